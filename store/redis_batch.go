package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batcher sends the store's write commands (the scripts, the claim's
// pair) in pipelines that concurrent callers share, each written and read
// by one of those callers itself. A caller that finds no batch on the wire
// sends its own commands at once: a lone request pays no hand-off. Callers
// that arrive while a batch is on the wire queue theirs; the caller whose
// batch comes back elects one of them to send the queue as the next batch,
// and wakes the others of its own batch. Every caller is woken at most
// once. go-redis's autopipeliner, which this replaces, also woke a flusher
// goroutine and started a goroutine per batch (~15% of a first copy's
// gateway CPU under load, with the scheduler's share).
//
// One batch is on the wire at a time, as with the autopipeliner's default:
// Redis runs one command at a time anyway, and the queue that builds up
// behind a batch is the next batch. Commands are never re-sent (onceCmd).
type Batcher struct {
	pipe redis.Pipeliner // the leader's alone (busy): reused, batch after batch

	mu    sync.Mutex
	busy  bool         // a leader holds the wire
	queue []*batchCall // waiting for the next batch

	// The deadlines of callers whose context has no Done (CallContext):
	// one timer for all of them, armed at the earliest deadline a caller
	// waits with (armed; zero when not armed). When it fires it closes
	// expiry, a new one takes its place, and every caller waiting with a
	// deadline wakes and looks at its own (Do).
	timer  *time.Timer
	armed  time.Time
	expiry chan struct{}
}

// NewBatcher returns a Batcher sending on c's pipelines.
func NewBatcher(c redis.UniversalClient) *Batcher {
	return &Batcher{pipe: c.Pipeline()}
}

// A batchCall is one caller's commands while they wait for a batch.
type batchCall struct {
	ctx  context.Context
	cmds []redis.Cmder
	// state: callWaiting until the caller gives up (callAbandoned) or the
	// Batcher commits to sending it a batch to lead (callLeading); only
	// one of the two wins.
	state atomic.Int32
	// wake carries nil once the call's replies are in, or the batch it is
	// to send (itself first). Buffered: the sender never blocks.
	wake chan []*batchCall
}

const (
	callWaiting = iota
	callAbandoned
	callLeading
)

// Do sends cmds in a batch and returns once their replies (or errors) are
// in, or with ctx's error when ctx ends first: the commands may still be
// sent and run, their outcome unknown to the caller, as with any time-out.
// A caller elected to lead a batch sends it even when its own context has
// just ended, since the others in it wait on it. A context without Done
// but with a deadline (CallContext) ends at its deadline all the same: the
// Batcher's timer wakes its caller.
func (b *Batcher) Do(ctx context.Context, cmds ...redis.Cmder) error {
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		b.lead(ctx, cmds, nil)
		return nil
	}
	c := callPool.Get().(*batchCall)
	c.ctx, c.cmds = ctx, cmds
	b.queue = append(b.queue, c)
	done := ctx.Done()
	deadline, bounded := ctx.Deadline()
	var expiry <-chan struct{}
	if done == nil && bounded {
		expiry = b.watch(deadline)
	}
	b.mu.Unlock()
	var batch []*batchCall
	for {
		var gaveUp error
		select {
		case batch = <-c.wake:
		case <-done:
			gaveUp = ctx.Err()
		case <-expiry:
			if time.Now().Before(deadline) { // the timer fired for another
				b.mu.Lock()
				expiry = b.watch(deadline)
				b.mu.Unlock()
				continue
			}
			gaveUp = context.DeadlineExceeded
		}
		if gaveUp != nil {
			if c.state.CompareAndSwap(callWaiting, callAbandoned) {
				// Still queued, or in a batch: c is not reused.
				return gaveUp
			}
			// Elected meanwhile: the batch is on its way.
			batch = <-c.wake
		}
		break
	}
	if batch != nil {
		b.lead(nil, nil, batch)
	}
	// Nothing refers to c any more: its batch is done, and its leader
	// sent the last message it will get.
	c.ctx, c.cmds = nil, nil
	c.state.Store(callWaiting)
	callPool.Put(c)
	return nil
}

// callPool keeps batchCalls and their channels for reuse: two
// allocations a call. One that gave up is never put back (a batch may
// still hold it).
var callPool = sync.Pool{New: func() any { return &batchCall{wake: make(chan []*batchCall, 1)} }}

// lead sends one batch, either cmds alone (a caller that found the wire
// free, with its own ctx) or batch's calls, hands the wire on, and wakes
// the batch's other callers. Should the client panic while sending, the
// wire is handed on and the batch's callers woken all the same, each
// command failed (its outcome unknown): no caller reads a command that
// was never answered as a success, and none waits on a wire nobody holds.
func (b *Batcher) lead(ctx context.Context, cmds []redis.Cmder, batch []*batchCall) {
	sent := false
	defer func() {
		if !sent {
			b.pipe.Discard()
			for _, cmd := range cmds {
				cmd.SetErr(errBatchPanicked)
			}
			for _, c := range batch {
				for _, cmd := range c.cmds {
					cmd.SetErr(errBatchPanicked)
				}
			}
		}
		b.handOn()
		for _, c := range batch[min(1, len(batch)):] {
			c.wake <- nil
		}
	}()
	for _, cmd := range cmds {
		_ = b.pipe.Process(ctx, cmd)
	}
	if batch != nil {
		ctx = batchContext(batch)
		for _, c := range batch {
			for _, cmd := range c.cmds {
				_ = b.pipe.Process(ctx, cmd)
			}
		}
	}
	_, _ = b.pipe.Exec(ctx) // each command keeps its own error
	sent = true
}

// batchContext is the context a batch is sent with: its caller's with
// the latest deadline (the one that gives up last), or one without any
// when a caller has none.
func batchContext(batch []*batchCall) context.Context {
	ctx := batch[0].ctx
	latest, bounded := ctx.Deadline()
	for _, c := range batch[1:] {
		if d, ok := c.ctx.Deadline(); bounded && (!ok || d.After(latest)) {
			ctx, latest, bounded = c.ctx, d, ok
		}
	}
	return ctx
}

var errBatchPanicked = errors.New("store: redis batch failed while being sent (a panic in the client); outcome unknown")

// handOn gives the wire to the first queued caller still waiting, with
// the queue as its batch (callers that gave up left out), or frees it.
func (b *Batcher) handOn() {
	b.mu.Lock()
	q := b.queue
	b.queue = nil
	next := -1
	for i, c := range q {
		if c.state.CompareAndSwap(callWaiting, callLeading) {
			next = i
			break
		}
	}
	if next < 0 {
		b.busy = false
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	batch := q[next : next+1]
	for _, c := range q[next+1:] {
		if c.state.Load() != callAbandoned {
			batch = append(batch, c)
		}
	}
	batch[0].wake <- batch
}

// watch returns the channel closed when the Batcher's timer next fires,
// arming it for d when it is not armed for an earlier time; b.mu is held.
// The timer may fire for a caller long served: the callers it wakes whose
// deadline has not come watch again (Do).
func (b *Batcher) watch(d time.Time) <-chan struct{} {
	switch {
	case b.timer == nil:
		b.expiry = make(chan struct{})
		b.timer = time.AfterFunc(time.Until(d), b.expire)
		b.armed = d
	case b.armed.IsZero() || d.Before(b.armed):
		b.timer.Reset(time.Until(d))
		b.armed = d
	}
	return b.expiry
}

// expire wakes every caller waiting with a deadline (watch).
func (b *Batcher) expire() {
	b.mu.Lock()
	close(b.expiry)
	b.expiry = make(chan struct{})
	b.armed = time.Time{}
	b.mu.Unlock()
}
