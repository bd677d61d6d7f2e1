package store

import (
	"context"
	"time"
)

// CallContext bounds one call to s on the request path (a claim, a
// completion) by timeout, and carries neither values nor cancellation.
//
// For Redis it is a context that holds its deadline and nothing else: no
// timer. context.WithTimeout sets a timer and stops it for every call, two
// a first copy: 8 of its allocations and 720 B (BenchmarkHandlerCPU).
// Nothing can select on its end, as its Done is nil; what waits in a Redis
// call reads its deadline instead: go-redis sets the connection's read and
// write deadlines from it, the dialer its own, and a Batcher wakes the
// callers queued behind a batch with one timer of its own (Batcher.Do).
// Its Err reports the deadline once it has passed, as a timer's would.
// The other stores wait on Done (the embedded store's queue to its
// committer, the Settler's wait for a copy of this process), so they get
// a timer's context.
func CallContext(s Store, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := s.(*Redis); ok {
		return deadlineContext{time.Now().Add(timeout)}, func() {}
	}
	return context.WithTimeout(context.Background(), timeout)
}

// deadlineContext is CallContext's context for Redis.
type deadlineContext struct{ d time.Time }

func (c deadlineContext) Deadline() (time.Time, bool) { return c.d, true }
func (deadlineContext) Done() <-chan struct{}         { return nil }
func (deadlineContext) Value(any) any                 { return nil }

func (c deadlineContext) Err() error {
	if time.Now().Before(c.d) {
		return nil
	}
	return context.DeadlineExceeded
}
