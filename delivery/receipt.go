package delivery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/store"
)

// The receipt, where the engine attaches to the gate (gate.Queue): a won
// key is held, queued and acked (Enqueue); a copy of a queued key is
// acked too, or answered as its delivery ended (Copy).

// Enqueue is the receipt of a won key on an async route: hold the claim
// for the whole delivery, queue the notification (durable when the
// queue's Enqueue returns), then ack. The hold comes first: once queued,
// the delivery may be taken and settled before this copy's next step. Any
// store error before the ack answers 503 + Retry-After, never the ack:
// the platform's retry comes back.
func (e *Engine) Enqueue(_ context.Context, r *http.Request, c gate.Claim) gate.Outcome {
	key, token := c.Key, c.Token
	if err := e.rt.Ackable(); err != nil {
		// The queue would not survive a Redis restart: no ack, and
		// nothing queued; the platform's retry comes back.
		e.unclaim(key, token)
		return queueFailed("aof", err)
	}
	n, credentials := e.rt.Received(r, c)
	d := store.Delivery{Key: key, Token: token, Notification: n, Enqueued: time.Now(), Order: c.Run,
		Credentials: credentials}
	// The platform hanging up must not cut the write half-way: it is
	// bounded by store_timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), e.cfg.StoreTimeout)
	defer cancel()
	st := e.rt.Store()
	if err := st.Renew(ctx, key, token, e.hold()); err != nil {
		e.unclaim(key, token)
		return queueFailed("renew", err)
	}
	if err := e.queue.Enqueue(ctx, e.cfg.Scope, d); err != nil {
		e.unclaim(key, token)
		return queueFailed("enqueue", err)
	}
	e.Poke()
	return gate.Acknowledged(gate.Queued, 1)
}

// unclaim frees a key whose notification could not be queued, so the
// platform's retry claims it again (best effort; else it frees itself
// after lock_ttl). A key with a journal (a failed or dead key sent again)
// keeps it; a new one leaves nothing behind.
func (e *Engine) unclaim(key, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.StoreTimeout)
	defer cancel()
	st := e.rt.Store()
	var ttl time.Duration
	if rec, err := st.Lookup(ctx, key); err == nil && (rec.AttemptCount > 0 || rec.Notification != nil) {
		ttl = e.cfg.TTL
	}
	_ = st.Release(ctx, key, token, ttl, store.Journal{})
}

// queueFailed answers a store failure before the ack.
func queueFailed(op string, err error) gate.Outcome {
	return gate.StoreFailure(op, err, fmt.Errorf("queueing the notification: %w", err))
}

// Copy answers a copy of an in-flight key on an async route: the ack
// when the key is queued (its first copy was acked, or is about to be),
// the remembered answer (a Replay of the record, which the gate checks)
// when the delivery ended meanwhile. A first copy still between its
// claim and its Enqueue is given a moment; past it, 409 + Retry-After.
// again: the key was released meanwhile (the copy is a retry: claim
// again).
func (e *Engine) Copy(ctx context.Context, key, _ string, copies int64) (o gate.Outcome, again bool) {
	deadline := time.Now().Add(time.Second)
	wait := 2 * time.Millisecond
	for {
		queued, rec, err := e.queueState(ctx, key)
		switch {
		case err != nil && ctx.Err() != nil:
			return gate.Dropped(copies, err), false
		case err != nil:
			o := gate.StoreFailure("queued", err, fmt.Errorf("looking up the delivery queue: %w", err))
			o.Copies = copies
			return o, false
		case queued:
			if err := e.rt.Ackable(); err != nil {
				// Queued, but not durably: a later copy finds it still
				// queued (or delivered) and is answered once AOF is back.
				o := gate.StoreFailure("aof", err, err)
				o.Copies = copies
				return o, false
			}
			return gate.Acknowledged(gate.Acked, copies), false
		case rec == nil || rec.State == store.StateFailed:
			return gate.Outcome{}, true
		case rec.State == store.StateAnswered:
			// Delivered between this copy's claim and now.
			return gate.Outcome{Action: gate.Replay, Record: rec}, false
		}
		if time.Now().Add(wait).After(deadline) {
			return gate.TryLater(copies, "the first copy of this notification is being queued or was held after an unknown outcome"), false
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return gate.Dropped(copies, ctx.Err()), false
		}
		wait += wait / 2
	}
}

// queueState tells whether key is queued and, when it is not, its record
// (nil when there is none): a delivery may have ended since the copy's
// claim found the key in flight.
func (e *Engine) queueState(ctx context.Context, key string) (bool, *store.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	defer cancel()
	queued, err := e.queue.Queued(ctx, e.cfg.Scope, key)
	if err != nil || queued {
		return queued, nil, err
	}
	rec, err := e.rt.Store().Lookup(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil, nil
	}
	return false, rec, err
}

var _ gate.Queue = (*Engine)(nil)
