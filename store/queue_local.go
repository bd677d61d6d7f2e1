package store

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// localQueue is the delivery queue of the memory and embedded stores: one
// process takes from it, so limits and leases live in memory. With a disk
// (the embedded store) every delivery is written through before Enqueue
// returns and is loaded again when the store opens: leases are not stored,
// as the process that held them is gone (a restart is a lease running
// out).
type localQueue struct {
	now  func() time.Time
	disk queueDisk // nil: memory only

	mu     sync.Mutex
	scopes map[string]*scopeQueue
}

// queueDisk keeps a localQueue's deliveries (encodeDelivery) and paused
// scopes.
type queueDisk interface {
	// syncDelivery writes key's delivery as state encodes it (nil: none)
	// when the write runs, not when it was asked for: of two writes of a
	// key racing to the disk, the later one writes the newer state.
	syncDelivery(ctx context.Context, scope, key string, state func() []byte) error
	setPaused(ctx context.Context, scope string, paused bool) error
}

type scopeQueue struct {
	items  map[string]*qitem // every delivery queued, pending ones too
	due    dueHeap           // waiting deliveries, earliest due first
	leased map[string]*qitem
	starts []time.Time // starts within the last RateWindow, oldest first
	paused bool
}

type qitem struct {
	d        Delivery
	due      time.Time
	leaseEnd time.Time
	// pending: being written to disk by Enqueue; not takeable yet, so a
	// delivery never starts before it is durable.
	pending bool
	idx     int // in due; -1 when not there
	// next: enqueued again while leased (a new claim of the key won it
	// meanwhile, e.g. an operator's redelivery of a key just delivered).
	// The lease's Done puts it in the queue instead of ending it; nil once
	// the lease ends.
	next *Delivery
}

type dueHeap []*qitem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].idx = i; h[j].idx = j }
func (h *dueHeap) Push(x any)        { it := x.(*qitem); it.idx = len(*h); *h = append(*h, it) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.idx = -1
	return it
}

func newLocalQueue(clock func() time.Time, disk queueDisk) *localQueue {
	return &localQueue{now: clock, disk: disk, scopes: make(map[string]*scopeQueue)}
}

func (q *localQueue) scope(name string) *scopeQueue {
	sq := q.scopes[name]
	if sq == nil {
		sq = &scopeQueue{items: make(map[string]*qitem), leased: make(map[string]*qitem)}
		q.scopes[name] = sq
	}
	return sq
}

// load adds a delivery read from disk (due as stored).
func (q *localQueue) load(scope string, d *Delivery, due time.Time) {
	sq := q.scope(scope)
	it := &qitem{d: *d, due: due, idx: -1}
	sq.items[d.Key] = it
	heap.Push(&sq.due, it)
}

func (q *localQueue) Enqueue(ctx context.Context, scope string, d Delivery) error {
	if scope == "" {
		return errBadScope
	}
	d.Lease = ""
	q.mu.Lock()
	sq := q.scope(scope)
	if it, ok := sq.items[d.Key]; ok && !it.pending {
		it.d.Token = d.Token // attempts and Started stay
		if sq.leased[d.Key] == it {
			d.Attempts, d.Started = 0, false
			it.next = &d
		}
		q.mu.Unlock()
		return q.persist(ctx, scope, d.Key)
	} else if ok {
		// Another Enqueue of the key is being written: the claim makes
		// that impossible unless its copy's claim ran out meanwhile.
		q.mu.Unlock()
		return ErrNotOwner
	}
	it := &qitem{d: d, due: q.now(), idx: -1, pending: q.disk != nil}
	sq.items[d.Key] = it
	if q.disk == nil {
		heap.Push(&sq.due, it)
		q.mu.Unlock()
		return nil
	}
	q.mu.Unlock()
	err := q.persist(ctx, scope, d.Key)
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil {
		delete(sq.items, d.Key)
		return err
	}
	it.pending = false
	heap.Push(&sq.due, it)
	return nil
}

func (q *localQueue) Queued(ctx context.Context, scope, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	it, ok := q.scope(scope).items[key]
	return ok && !it.pending, nil
}

func (q *localQueue) Take(ctx context.Context, scope string, lim QueueLimits) (*Delivery, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	t := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := q.scope(scope)
	// Leases that ran out: their taker is gone, the delivery is due now.
	for k, it := range sq.leased {
		if !it.leaseEnd.After(t) {
			// A re-enqueue (next) only changed the token: the taker
			// over is told of the attempt started, as after a restart.
			delete(sq.leased, k)
			it.d.Lease, it.due, it.next = "", t, nil
			heap.Push(&sq.due, it)
		}
	}
	if sq.paused {
		return nil, idleWait, nil
	}
	if lim.Concurrency > 0 && len(sq.leased) >= lim.Concurrency {
		return nil, 10 * time.Millisecond, nil
	}
	if lim.Rate > 0 {
		cut := 0
		for cut < len(sq.starts) && !sq.starts[cut].After(t.Add(-RateWindow)) {
			cut++
		}
		sq.starts = append(sq.starts[:0], sq.starts[cut:]...)
		if len(sq.starts) >= lim.Rate {
			return nil, sq.starts[0].Add(RateWindow).Sub(t) + time.Millisecond, nil
		}
	}
	if sq.due.Len() == 0 {
		return nil, idleWait, nil
	}
	it := sq.due[0]
	if it.due.After(t) {
		return nil, min(it.due.Sub(t), idleWait), nil
	}
	heap.Pop(&sq.due)
	it.d.Lease = newToken()
	it.leaseEnd = t.Add(lim.Lease)
	sq.leased[it.d.Key] = it
	if lim.Rate > 0 {
		sq.starts = append(sq.starts, t)
	}
	d := it.d
	return &d, 0, nil // d.Started: a taken-over attempt
}

// held returns the leased item of key if lease holds it now.
func (q *localQueue) held(scope, key, lease string) (*scopeQueue, *qitem, error) {
	sq := q.scope(scope)
	it, ok := sq.leased[key]
	if !ok || it.d.Lease != lease || !it.leaseEnd.After(q.now()) {
		return nil, nil, ErrNotOwner
	}
	return sq, it, nil
}

func (q *localQueue) Start(ctx context.Context, scope, key, lease string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	_, it, err := q.held(scope, key, lease)
	if err != nil {
		q.mu.Unlock()
		return err
	}
	it.d.Started = true
	q.mu.Unlock()
	// On disk before the attempt is sent: a process that dies mid-attempt
	// comes back knowing it.
	return q.persist(ctx, scope, key)
}

func (q *localQueue) Extend(ctx context.Context, scope, key, lease string, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	_, it, err := q.held(scope, key, lease)
	if err != nil {
		return err
	}
	it.leaseEnd = q.now().Add(d)
	return nil
}

func (q *localQueue) Retry(ctx context.Context, scope, key, lease string, due time.Time, attempts int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	sq, it, err := q.held(scope, key, lease)
	if err != nil {
		q.mu.Unlock()
		return err
	}
	delete(sq.leased, key)
	if it.next != nil {
		// Enqueued again meanwhile: its new claim waits for no back-off.
		due, it.next = q.now(), nil
	}
	it.d.Lease, it.d.Attempts, it.due, it.d.Started = "", attempts, due, false
	heap.Push(&sq.due, it)
	q.mu.Unlock()
	// Written after the fact: if the write fails, the delivery is due
	// again at its older time, with fewer attempts counted — early, never
	// lost.
	return q.persist(ctx, scope, key)
}

func (q *localQueue) Done(ctx context.Context, scope, key, lease string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	sq, it, err := q.held(scope, key, lease)
	if err != nil {
		q.mu.Unlock()
		return err
	}
	delete(sq.leased, key)
	if it.next != nil {
		// Enqueued again while leased: that delivery is a new one (its
		// claim won the key after this one was settled), due now.
		it.d, it.due, it.next = *it.next, q.now(), nil
		heap.Push(&sq.due, it)
	} else {
		delete(sq.items, key)
	}
	q.mu.Unlock()
	return q.persist(ctx, scope, key)
}

func (q *localQueue) Remove(ctx context.Context, scope, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	sq := q.scope(scope)
	it, ok := sq.items[key]
	switch {
	case !ok || it.pending:
		q.mu.Unlock()
		return ErrNotFound
	case sq.leased[key] != nil && it.leaseEnd.After(q.now()):
		q.mu.Unlock()
		return ErrNotOwner
	}
	delete(sq.leased, key)
	if it.idx >= 0 {
		heap.Remove(&sq.due, it.idx)
	}
	delete(sq.items, key)
	q.mu.Unlock()
	return q.persist(ctx, scope, key)
}

// persist writes key's delivery as it is when the write runs (removed if
// it is gone). A pending one is written too: Enqueue makes it takeable
// once that write returns.
func (q *localQueue) persist(ctx context.Context, scope, key string) error {
	if q.disk == nil {
		return nil
	}
	return q.disk.syncDelivery(ctx, scope, key, func() []byte {
		q.mu.Lock()
		defer q.mu.Unlock()
		it := q.scope(scope).items[key]
		if it == nil {
			return nil
		}
		return encodeDelivery(&it.d, it.due)
	})
}

func (q *localQueue) setPaused(ctx context.Context, scope string, paused bool) error {
	if scope == "" {
		return errBadScope
	}
	if q.disk != nil {
		if err := q.disk.setPaused(ctx, scope, paused); err != nil {
			return err
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.scope(scope).paused = paused
	return nil
}

func (q *localQueue) Pause(ctx context.Context, scope string) error {
	return q.setPaused(ctx, scope, true)
}

func (q *localQueue) Resume(ctx context.Context, scope string) error {
	return q.setPaused(ctx, scope, false)
}

func (q *localQueue) Stats(ctx context.Context, scope string) (QueueStats, error) {
	if err := ctx.Err(); err != nil {
		return QueueStats{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := q.scope(scope)
	st := QueueStats{Leased: int64(len(sq.leased)), Paused: sq.paused}
	for _, it := range sq.items {
		if it.pending {
			continue
		}
		st.Depth++
		if st.Oldest.IsZero() || it.d.Enqueued.Before(st.Oldest) {
			st.Oldest = it.d.Enqueued
		}
	}
	return st, nil
}

var _ Queue = (*localQueue)(nil)
