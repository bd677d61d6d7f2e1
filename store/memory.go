package store

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is a Store in a map: for tests and throw-away setups. Everything is
// lost when the process exits, and nothing is shared between processes.
type Memory struct {
	now func() time.Time
	n   *notifier

	mu     sync.Mutex
	m      map[string]*entry
	orders map[string]*orderState
	ix     memoryIndex
	ops    int
	closed bool

	queueOnce sync.Once
	queue     *localQueue

	refused refusedRing // RefusedLog (refused.go)
	catchup catchupMem  // Leaser, MissingLog (catchup.go)
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{now: time.Now, n: newNotifier(), m: make(map[string]*entry), orders: make(map[string]*orderState)}
}

// Queue returns the store's delivery queue, in memory like the store.
func (s *Memory) Queue() Queue {
	s.queueOnce.Do(func() { s.queue = newLocalQueue(s.now, nil) })
	return s.queue
}

// sweepEvery and sweepBatch bound the memory store's housekeeping: every
// sweepEvery claims, look at up to sweepBatch entries and drop expired ones,
// so keys nobody asks for again do not pile up for ever.
const (
	sweepEvery = 256
	sweepBatch = 64
)

// get returns the live entry for key; expired entries are dropped. mu held.
func (s *Memory) get(key string, t time.Time) *entry {
	e := s.m[key]
	if e != nil && e.expired(t) {
		delete(s.m, key)
		return nil
	}
	if e != nil {
		e.lapse(t)
	}
	return e
}

func (s *Memory) sweep(t time.Time) {
	n := 0
	for k, e := range s.m { // map order is random: a fair sample
		if e.expired(t) {
			delete(s.m, k)
		}
		if n++; n >= sweepBatch {
			break
		}
	}
	n = 0
	for k, o := range s.orders {
		if !t.Before(o.keep) {
			delete(s.orders, k)
		}
		if n++; n >= sweepBatch {
			break
		}
	}
	s.ix.sweep(t)
}

// ranEvent is the stored value of key's business event in its order, ""
// when it has not run (or the order expired). mu held.
func (s *Memory) ranEvent(key string, t time.Time) (order, event, v string) {
	order, event = OrderOf(key)
	o := s.orders[order]
	if o == nil {
		return order, event, ""
	}
	if !t.Before(o.keep) {
		delete(s.orders, order)
		return order, event, ""
	}
	return order, event, o.events[event]
}

// forget drops key's event from its order. mu held.
func (s *Memory) forget(key string) bool {
	order, event := OrderOf(key)
	o := s.orders[order]
	if o == nil {
		return false
	}
	_, had := o.events[event]
	delete(o.events, event)
	if len(o.events) == 0 {
		delete(s.orders, order)
	}
	return had
}

func (s *Memory) Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (ClaimResult, error) {
	t, err := s.enter(ctx)
	if err != nil {
		return ClaimResult{}, err
	}
	defer s.mu.Unlock()
	if s.ops++; s.ops%sweepEvery == 0 {
		s.sweep(t)
	}
	if e := s.get(key, t); e != nil {
		return e.claimOn(fingerprint, t, lockTTL), nil
	}
	if order, event, v := s.ranEvent(key, t); v != "" {
		ev, err := decodeOrderEvent(order, event, v)
		if err != nil {
			return ClaimResult{}, err
		}
		return ClaimResult{Outcome: Answered, Record: fromOrder(key, ev)}, nil
	}
	e := newEntry(key, fingerprint, t, lockTTL)
	s.m[key] = e
	return ClaimResult{Outcome: Won, Token: e.token}, nil
}

// owned runs fn on key's entry if token owns it. mu is taken here.
func (s *Memory) owned(ctx context.Context, key, token string, fn func(e *entry, t time.Time)) error {
	t, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	e := s.get(key, t)
	if e == nil || !e.owns(token) {
		return ErrNotOwner
	}
	fn(e, t)
	return nil
}

func (s *Memory) Complete(ctx context.Context, key, token string, a Answer, ttl time.Duration, j Journal) error {
	err := s.owned(ctx, key, token, func(e *entry, t time.Time) {
		e.answer(a, t, ttl, j)
		s.ix.search(key, t.Add(searchTTL(ttl, a.Order)), searchRefs(j, a.Order))
		if a.Order != nil {
			order, event := OrderOf(key)
			o := s.orders[order]
			if o == nil {
				o = &orderState{}
				s.orders[order] = o
			}
			o.ran(event, t, a.Order)
			s.ix.file(key, t, a.Order)
		}
	})
	if err == nil {
		s.n.wake(key)
	}
	return err
}

func (s *Memory) Release(ctx context.Context, key, token string, ttl time.Duration, j Journal) error {
	err := s.owned(ctx, key, token, func(e *entry, t time.Time) {
		if ttl <= 0 {
			delete(s.m, key)
			return
		}
		e.fail(t, ttl, j)
		s.ix.search(key, t.Add(ttl), searchRefs(j))
	})
	if err == nil {
		s.n.wake(key)
	}
	return err
}

func (s *Memory) Reopen(ctx context.Context, key string, ttl time.Duration) error {
	t, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	e := s.get(key, t)
	if e == nil || e.State != StateAnswered {
		return ErrNotFound
	}
	s.forget(key)
	e.reopen(t, ttl)
	return nil
}

func (s *Memory) Leave(ctx context.Context, key, token string, ttl time.Duration, j Journal) error {
	return s.owned(ctx, key, token, func(e *entry, t time.Time) {
		e.leave(t, ttl, j)
		s.ix.search(key, t.Add(ttl), searchRefs(j))
	})
}

func (s *Memory) Renew(ctx context.Context, key, token string, lockTTL time.Duration) error {
	return s.owned(ctx, key, token, func(e *entry, t time.Time) { e.renew(t, lockTTL) })
}

// enter starts a call that reads the store at its time t: ctx is still
// live, the store is locked (the caller unlocks it) and open.
func (s *Memory) enter(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	t := s.now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return time.Time{}, ErrClosed
	}
	return t, nil
}

func (s *Memory) Lookup(ctx context.Context, key string) (*Record, error) {
	t, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	e := s.get(key, t)
	if e == nil {
		return nil, ErrNotFound
	}
	return e.journaled()
}

// Wait: see Store. An expired claim wakes nobody; waiters bound their wait.
func (s *Memory) Wait(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, nil, ErrClosed
	}
	ch, stop := s.n.wait(key)
	return ch, stop, nil
}

func (s *Memory) Delete(ctx context.Context, key string) error {
	t, err := s.enter(ctx)
	if err != nil {
		return err
	}
	e := s.get(key, t)
	delete(s.m, key)
	had := s.forget(key)
	s.mu.Unlock()
	if e == nil && !had {
		return ErrNotFound
	}
	s.n.wake(key)
	return nil
}

// List sorts the matching records newest first: the memory store is for
// tests and small setups, so a page costs a pass over the map.
func (s *Memory) List(ctx context.Context, q ListQuery) (ListPage, error) {
	if err := ctx.Err(); err != nil {
		return ListPage{}, err
	}
	if err := q.normalize(); err != nil {
		return ListPage{}, err
	}
	after, err := decodeListCursor(q.Cursor)
	if err != nil {
		return ListPage{}, err
	}
	t, err := s.enter(ctx)
	if err != nil {
		return ListPage{}, err
	}
	defer s.mu.Unlock()
	var recs []*Record
	for k := range s.m {
		e := s.get(k, t)
		if e == nil || !q.matches(&e.Record) {
			continue
		}
		if q.Cursor != "" && !listAfter(e.Changed, e.Key, after) {
			continue
		}
		recs = append(recs, e.listed())
	}
	slices.SortFunc(recs, listOrder)
	var next string
	if len(recs) > q.Limit {
		recs = recs[:q.Limit]
		last := recs[q.Limit-1]
		next = encodeListCursor(listPos{Changed: last.Changed.UnixMilli(), Key: last.Key})
	}
	return ListPage{Records: recs, Next: next}, nil
}

func (s *Memory) Order(ctx context.Context, order string) (*Order, error) {
	t, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	o := s.orders[order]
	if o == nil || !t.Before(o.keep) || len(o.events) == 0 {
		return nil, ErrNotFound
	}
	return o.view(order)
}

// Close drops everything and wakes all waiters.
func (s *Memory) Close() error {
	s.mu.Lock()
	s.closed = true
	s.m, s.orders, s.ix = nil, nil, memoryIndex{}
	s.mu.Unlock()
	s.n.wakeAll()
	return nil
}

var _ Store = (*Memory)(nil)
