package journal

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// A forward that failed (the backend refused, or could not be reached)
// frees its key for the platform's next retry. Its events say how many
// attempts the key has had and, once the platform's retry window has
// passed, that nobody will send it again: the key is dead.

// RetryWindow is how long a route's notification may still come again:
// past it, a failed key is dead. An async route's platform was
// acknowledged and retries nothing: the gateway's own give_up (giveUp >
// 0) is the window. Otherwise it is the platform's window, stretched by
// its retry schedule (nil: none) to the last retry plus slack.
func RetryWindow(giveUp, platform time.Duration, sched keying.Schedule, slack time.Duration) time.Duration {
	if giveUp > 0 {
		return giveUp
	}
	if sched != nil {
		// Dead only once the last retry could have come.
		return max(platform, sched.Total()+slack)
	}
	return platform
}

// Failed is what the events of a failed forward tell besides the status:
// how many attempts the key has had, whether it is dead, and its record.
// Zero when the store could not say.
type Failed struct {
	Attempts int64
	Dead     bool
	Rec      *store.Record
}

// ReadFailed reads a key just released after a failure from st, for its
// events: one read on the failure path only (never on a replay or a
// successful first copy), dead by now's clock past window.
func ReadFailed(st store.Store, key string, timeout time.Duration, now func() time.Time, window time.Duration) Failed {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec, err := st.Lookup(ctx, key)
	if err != nil {
		return Failed{}
	}
	return Failed{Attempts: rec.AttemptCount, Dead: rec.StateAt(now(), window) == store.StateDead, Rec: rec}
}

// Emitter is where the events go (the route's observer).
type Emitter interface {
	Emit(event, key string, status int, attempts int64)
}

// Emit sends idempotency.failed for key, and idempotency.dead when the
// platform's retry window has passed: nobody will send it again. A key
// still alive goes to lastCopy (nil: none), the copy that just failed
// having perhaps been the platform's last.
func (f Failed) Emit(to Emitter, key string, status int, lastCopy func(*store.Record)) {
	to.Emit("idempotency.failed", key, status, f.Attempts)
	if f.Rec != nil && !f.Dead && lastCopy != nil {
		lastCopy(f.Rec)
	}
	if f.Dead {
		to.Emit("idempotency.dead", key, status, f.Attempts)
	}
}
