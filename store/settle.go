package store

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Settler completes claims durably. Once the backend has answered, its
// answer must be settled whatever the store does at that moment: a Redis
// restart, failover or time-out must not free the key while the process
// that holds the answer lives. Complete tries the store once; if that
// fails for any reason other than a lost claim, the Settler keeps the
// answer in the process, retries the completion with back-off until it
// succeeds or the claim is proven lost, and serves the kept answer to
// duplicates that reach this process meanwhile (Kept).
//
// One Settler serves one store and outlives config reloads with it.
type Settler struct {
	s    Store
	opts SettlerOptions

	mu     sync.Mutex
	kept   map[string]*kept
	local  map[string]localCopy // keys at the backend from this process
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup

	// Under mu too: copies marked again (Local) before they settled, which
	// a duplicate awaits (woken when they settle, not the newer copy), and
	// the last copy marked.
	shadowed []localCopy
	seq      uint64
}

// SettlerOptions tune a Settler; the zero value is usable.
type SettlerOptions struct {
	// OpTimeout bounds each store call. Default 2s.
	OpTimeout time.Duration
	// MinBackoff and MaxBackoff bound the pause between retries (doubled
	// each time, with jitter). Defaults 50ms and 2s.
	MinBackoff, MaxBackoff time.Duration
}

type kept struct {
	rec   *Record
	a     Answer // what the retry completes: the answer and its order's run
	token string
	ttl   time.Duration
	j     Journal
	done  func(error)
}

// ErrKept is returned by Complete when the store failed and the answer is
// now kept by the Settler, retried in the background; done is called once
// with the final result.
var ErrKept = errors.New("store: store failed; the answer is kept and its completion retried")

// NewSettler returns a Settler for s.
func NewSettler(s Store, opts SettlerOptions) *Settler {
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = 2 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 50 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 2 * time.Second
	}
	return &Settler{s: s, opts: opts, kept: make(map[string]*kept), local: make(map[string]localCopy),
		stop: make(chan struct{})}
}

// Local marks key as at the backend from this process until the copy's
// Settled is called — after its answer was completed, kept or its claim
// released. A duplicate whose own claim fails meanwhile (the store just
// went down) can then wait for it with AwaitLocal instead of failing: the
// answer is about to be kept here. A mark costs no allocation: the
// channel a duplicate waits on is made by the first that waits.
func (st *Settler) Local(key string) LocalCopy {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.seq++
	if old, ok := st.local[key]; ok && old.wake != nil {
		st.shadowed = append(st.shadowed, old)
	}
	st.local[key] = localCopy{seq: st.seq}
	return LocalCopy{st: st, key: key, seq: st.seq}
}

// localCopy is a copy marked by Local; wake, made by the first duplicate
// that waits for it, is closed when it settles.
type localCopy struct {
	seq  uint64
	wake chan struct{}
}

// LocalCopy is a copy at the backend from this process (Local).
type LocalCopy struct {
	st  *Settler
	key string
	seq uint64
}

// Settled ends the mark: the copy's answer was completed, kept or its
// claim released; the duplicates waiting for it wake.
func (c LocalCopy) Settled() {
	st := c.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if l, ok := st.local[c.key]; ok && l.seq == c.seq {
		delete(st.local, c.key)
		if l.wake != nil {
			close(l.wake)
		}
		return
	}
	for i, l := range st.shadowed {
		if l.seq == c.seq {
			close(l.wake)
			st.shadowed = slices.Delete(st.shadowed, i, i+1)
			return
		}
	}
}

// AwaitLocal waits until the copy of key at the backend from this process
// settles, and reports whether there was one that settled before ctx
// ended.
func (st *Settler) AwaitLocal(ctx context.Context, key string) bool {
	st.mu.Lock()
	l, ok := st.local[key]
	if ok && l.wake == nil {
		l.wake = make(chan struct{})
		st.local[key] = l
	}
	st.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-l.wake:
		return true
	case <-ctx.Done():
		return false
	}
}

// Complete stores answer for key under token. It returns nil when the
// store took it, ErrNotOwner when the claim is lost, and ErrKept when the
// store failed: the answer is then kept, retried in the background, and
// done (if not nil) is called once with the final result — nil when it was
// stored, an error wrapping ErrNotOwner when the claim was lost meanwhile,
// ErrClosed when the Settler closed first. fingerprint is the claim's, so
// kept answers are refused to copies with another one.
func (st *Settler) Complete(ctx context.Context, key, token, fingerprint string, a Answer, ttl time.Duration, j Journal, done func(error)) error {
	err := st.complete(ctx, key, token, a, ttl, j)
	if err == nil || errors.Is(err, ErrNotOwner) || errors.Is(err, ErrClosed) {
		return err
	}
	t := time.Now()
	rec := &Record{Key: key, State: StateAnswered, Status: a.Status, Header: a.Header,
		BodyCached: a.BodyCached, Fingerprint: fingerprint, Copies: 1, FirstSeen: t, LastSeen: t, ExpiresAt: t.Add(ttl)}
	if a.BodyCached {
		rec.Body = a.Body
	}
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return err
	}
	st.kept[key] = &kept{rec: rec, a: a, token: token, ttl: ttl, j: j, done: done}
	st.wg.Add(1)
	st.mu.Unlock()
	go st.retry(key)
	return ErrKept
}

// complete is one attempt. A lost claim whose record holds exactly this
// answer was completed by an earlier attempt whose reply was lost.
func (st *Settler) complete(ctx context.Context, key, token string, a Answer, ttl time.Duration, j Journal) error {
	// A caller's deadline within OpTimeout already bounds the attempt (the
	// handler's store_timeout on the request path): a second timer would
	// cost the request a timer set and stopped (~3.5 µs under load) and
	// change nothing.
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > st.opts.OpTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, st.opts.OpTimeout)
		defer cancel()
	}
	err := st.s.Complete(ctx, key, token, a, ttl, j)
	if !errors.Is(err, ErrNotOwner) {
		return err
	}
	rec, lerr := st.s.Lookup(ctx, key)
	switch {
	case lerr == nil && rec.State == StateAnswered && rec.Status == a.Status &&
		(!a.BodyCached || bytes.Equal(rec.Body, a.Body)):
		return nil
	case lerr != nil && !errors.Is(lerr, ErrNotFound):
		// Not proven lost: the look-up itself failed (the store is down,
		// or with WaitReplicas not confirmed), so try again later.
		return lerr
	}
	return err
}

// retry completes a kept answer with back-off until it is stored, the
// claim is proven lost, or the Settler closes.
func (st *Settler) retry(key string) {
	defer st.wg.Done()
	st.mu.Lock()
	k := st.kept[key]
	st.mu.Unlock()
	// The very Answer the first attempt sent, its Order included: the
	// retry writes what a settle writes (the record, the order's event,
	// its search references and day index) in one store operation.
	a := k.a
	pause := st.opts.MinBackoff
	var err error
	for {
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-st.stop:
			t.Stop()
			err = ErrClosed
		case <-t.C:
			err = st.complete(context.Background(), key, k.token, a, k.ttl, k.j)
		}
		if err == nil || errors.Is(err, ErrNotOwner) || errors.Is(err, ErrClosed) {
			break
		}
		pause = min(2*pause, st.opts.MaxBackoff)
	}
	st.mu.Lock()
	if st.kept[key] == k {
		delete(st.kept, key)
	}
	st.mu.Unlock()
	if k.done != nil {
		k.done(err)
	}
}

// Kept returns the answer kept for key while its completion is retried,
// or nil. The record is shared: callers must not change it.
func (st *Settler) Kept(key string) *Record {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.kept) == 0 {
		return nil
	}
	if k := st.kept[key]; k != nil {
		return k.rec
	}
	return nil
}

// Pending is how many answers are kept now.
func (st *Settler) Pending() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.kept)
}

// Close stops the retries (their done functions see ErrClosed) and waits
// for them; call it before closing the store.
func (st *Settler) Close() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.closed = true
	close(st.stop)
	st.mu.Unlock()
	st.wg.Wait()
}
