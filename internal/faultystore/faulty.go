// Package faultystore is test support: Faulty wraps a real store.Store and
// injects failures and latency, so the tests of the stores' callers (the
// settler, the handler) drive their store-error paths against a real store
// underneath. Only tests import it.
package faultystore

import (
	"context"
	"sync"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// Op names a method of the claim contract (store.Store) or of an extension
// Faulty forwards, for Faulty's rules; the extensions share the ops of
// their kind (Reopen is OpDelete, the order reads OpLookup).
type Op string

const (
	OpClaim    Op = "claim"
	OpComplete Op = "complete"
	OpRelease  Op = "release"
	OpRenew    Op = "renew"
	OpLookup   Op = "lookup"
	OpWait     Op = "wait"
	OpDelete   Op = "delete"
	OpList     Op = "list"
	OpLeave    Op = "leave"
)

// Faulty wraps a real store.Store and injects failures and latency on
// demand, so tests can drive the store-error paths of its callers. Calls without a
// matching rule go straight to the wrapped store. Close is never faulted.
type Faulty struct {
	s store.Store

	mu      sync.Mutex
	fail    map[Op]error // every call fails
	next    map[Op]*countedErr
	after   map[Op]error // the call goes through, then fails (outcome unknown)
	latency map[Op]time.Duration
	calls   map[Op]int64
}

type countedErr struct {
	n   int
	err error
}

// NewFaulty wraps s; without rules it behaves exactly like s.
func NewFaulty(s store.Store) *Faulty {
	f := &Faulty{s: s}
	f.Reset()
	return f
}

// Unwrap returns the wrapped store.
func (f *Faulty) Unwrap() store.Store { return f.s }

// allOps is what a rule without ops applies to.
var allOps = []Op{OpClaim, OpComplete, OpRelease, OpRenew, OpLookup, OpWait, OpDelete, OpList, OpLeave}

func opsOr(ops []Op) []Op {
	if len(ops) == 0 {
		return allOps
	}
	return ops
}

// SetFail makes every call of ops (all methods if none given) fail with err
// without reaching the store; SetFail(nil, ...) lifts it.
func (f *Faulty) SetFail(err error, ops ...Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range opsOr(ops) {
		if err == nil {
			delete(f.fail, op)
		} else {
			f.fail[op] = err
		}
	}
}

// FailNext makes the next n calls of each of ops fail with err without
// reaching the store.
func (f *Faulty) FailNext(n int, err error, ops ...Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range opsOr(ops) {
		f.next[op] = &countedErr{n: n, err: err}
	}
}

// SetFailAfter lets calls of ops reach the store and then reports err: the
// caller cannot tell whether the operation happened, like a reply lost to a
// timeout. SetFailAfter(nil, ...) lifts it.
func (f *Faulty) SetFailAfter(err error, ops ...Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range opsOr(ops) {
		if err == nil {
			delete(f.after, op)
		} else {
			f.after[op] = err
		}
	}
}

// SetLatency delays each call of ops by d before it runs; a ctx that ends
// first makes the call return ctx.Err(). d = 0 lifts it.
func (f *Faulty) SetLatency(d time.Duration, ops ...Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range opsOr(ops) {
		if d <= 0 {
			delete(f.latency, op)
		} else {
			f.latency[op] = d
		}
	}
}

// Reset lifts every rule and zeroes the call counts.
func (f *Faulty) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = make(map[Op]error)
	f.next = make(map[Op]*countedErr)
	f.after = make(map[Op]error)
	f.latency = make(map[Op]time.Duration)
	f.calls = make(map[Op]int64)
}

// Calls counts the calls of op so far, faulted or not.
func (f *Faulty) Calls(op Op) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// before applies the rules that act before the store is called: it returns
// the error to fail with, or nil to go on.
func (f *Faulty) before(ctx context.Context, op Op) error {
	f.mu.Lock()
	f.calls[op]++
	d := f.latency[op]
	err := f.fail[op]
	if c := f.next[op]; err == nil && c != nil {
		err = c.err
		if c.n--; c.n <= 0 {
			delete(f.next, op)
		}
	}
	f.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return err
}

func (f *Faulty) afterErr(op Op, err error) error {
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.after[op]
}

func (f *Faulty) Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (store.ClaimResult, error) {
	if err := f.before(ctx, OpClaim); err != nil {
		return store.ClaimResult{}, err
	}
	res, err := f.s.Claim(ctx, key, fingerprint, lockTTL)
	if err = f.afterErr(OpClaim, err); err != nil {
		return store.ClaimResult{}, err
	}
	return res, nil
}

func (f *Faulty) Complete(ctx context.Context, key, token string, a store.Answer, ttl time.Duration, j store.Journal) error {
	if err := f.before(ctx, OpComplete); err != nil {
		return err
	}
	return f.afterErr(OpComplete, f.s.Complete(ctx, key, token, a, ttl, j))
}

func (f *Faulty) Release(ctx context.Context, key, token string, ttl time.Duration, j store.Journal) error {
	if err := f.before(ctx, OpRelease); err != nil {
		return err
	}
	return f.afterErr(OpRelease, f.s.Release(ctx, key, token, ttl, j))
}

func (f *Faulty) Leave(ctx context.Context, key, token string, ttl time.Duration, j store.Journal) error {
	if err := f.before(ctx, OpLeave); err != nil {
		return err
	}
	return f.afterErr(OpLeave, f.s.Leave(ctx, key, token, ttl, j))
}

func (f *Faulty) Reopen(ctx context.Context, key string, ttl time.Duration) error {
	if err := f.before(ctx, OpDelete); err != nil {
		return err
	}
	rc, err := store.As[store.Recovery](f.s, "recovery")
	if err != nil {
		return err
	}
	return f.afterErr(OpDelete, rc.Reopen(ctx, key, ttl))
}

func (f *Faulty) Renew(ctx context.Context, key, token string, lockTTL time.Duration) error {
	if err := f.before(ctx, OpRenew); err != nil {
		return err
	}
	return f.afterErr(OpRenew, f.s.Renew(ctx, key, token, lockTTL))
}

func (f *Faulty) Lookup(ctx context.Context, key string) (*store.Record, error) {
	if err := f.before(ctx, OpLookup); err != nil {
		return nil, err
	}
	rec, err := f.s.Lookup(ctx, key)
	if err = f.afterErr(OpLookup, err); err != nil {
		return nil, err
	}
	return rec, nil
}

func (f *Faulty) Wait(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := f.before(ctx, OpWait); err != nil {
		return nil, nil, err
	}
	ch, stop, err := f.s.Wait(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	if err := f.afterErr(OpWait, nil); err != nil {
		stop()
		return nil, nil, err
	}
	return ch, stop, nil
}

func (f *Faulty) Delete(ctx context.Context, key string) error {
	if err := f.before(ctx, OpDelete); err != nil {
		return err
	}
	rc, err := store.As[store.Recovery](f.s, "recovery")
	if err != nil {
		return err
	}
	return f.afterErr(OpDelete, rc.Delete(ctx, key))
}

func (f *Faulty) List(ctx context.Context, q store.ListQuery) (store.ListPage, error) {
	if err := f.before(ctx, OpList); err != nil {
		return store.ListPage{}, err
	}
	ls, err := store.As[store.Lister](f.s, "listings")
	if err != nil {
		return store.ListPage{}, err
	}
	page, err := ls.List(ctx, q)
	if err = f.afterErr(OpList, err); err != nil {
		return store.ListPage{}, err
	}
	return page, nil
}

func (f *Faulty) Order(ctx context.Context, order string) (*store.Order, error) {
	if err := f.before(ctx, OpLookup); err != nil {
		return nil, err
	}
	ob, err := store.As[store.OrderBook](f.s, "order state")
	if err != nil {
		return nil, err
	}
	o, err := ob.Order(ctx, order)
	return o, f.afterErr(OpLookup, err)
}

func (f *Faulty) Orders(ctx context.Context, names []string) ([]*store.Order, error) {
	if err := f.before(ctx, OpLookup); err != nil {
		return nil, err
	}
	ox, err := store.As[store.OrderIndex](f.s, "order index")
	if err != nil {
		return nil, err
	}
	out, err := ox.Orders(ctx, names)
	return out, f.afterErr(OpLookup, err)
}

func (f *Faulty) EventsByRef(ctx context.Context, scope string, settles keying.Settlement, refs []string) ([][]string, error) {
	if err := f.before(ctx, OpLookup); err != nil {
		return nil, err
	}
	ox, err := store.As[store.OrderIndex](f.s, "order index")
	if err != nil {
		return nil, err
	}
	out, err := ox.EventsByRef(ctx, scope, settles, refs)
	return out, f.afterErr(OpLookup, err)
}

func (f *Faulty) RanOn(ctx context.Context, q store.RanQuery) (store.RanPage, error) {
	if err := f.before(ctx, OpLookup); err != nil {
		return store.RanPage{}, err
	}
	ox, err := store.As[store.OrderIndex](f.s, "order index")
	if err != nil {
		return store.RanPage{}, err
	}
	out, err := ox.RanOn(ctx, q)
	return out, f.afterErr(OpLookup, err)
}

// Close closes the wrapped store; it is never faulted.
func (f *Faulty) Close() error { return f.s.Close() }

// Interface guards: the claim contract and each extension Faulty forwards
// (to the wrapped store's, which must have it).
var (
	_ store.Store      = (*Faulty)(nil)
	_ store.Lister     = (*Faulty)(nil)
	_ store.Recovery   = (*Faulty)(nil)
	_ store.OrderBook  = (*Faulty)(nil)
	_ store.OrderIndex = (*Faulty)(nil)
)
