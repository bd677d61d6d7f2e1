package delivery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/journal"
	"github.com/idemgate/idemgate/store"
)

// One attempt of a taken delivery, and how its key's claim is settled by
// what the backend did.

// deliver makes one attempt of a delivery taken at took, and settles it.
func (e *Engine) deliver(d *store.Delivery, took time.Time) {
	rt, obs := e.rt, e.obs
	lockTTL := e.cfg.LockTTL
	stopLease := e.keepLease(d)
	defer stopLease()
	if d.Started {
		e.heldAmbiguous(d)
		return
	}

	// The claim must outlive this attempt and the next back-off. The
	// hold taken at receipt does, unless the queue was paused or backed
	// up for long: then it is renewed (one round trip more between the
	// start the queue counted and the send, which the rate's window
	// tolerates only a little of).
	minHold := e.cfg.RetryMax + 2*lockTTL
	hold := max(time.Until(d.Enqueued.Add(e.hold())), minHold)
	if time.Until(d.Enqueued.Add(e.hold())) < minHold+time.Minute {
		if !e.renewClaim(d, hold) {
			return
		}
	}
	// Marked started before a byte is sent: if this instance dies now,
	// whoever takes the delivery over knows the backend may have run it.
	if err := e.try(func(ctx context.Context) error { return e.queue.Start(ctx, e.cfg.Scope, d.Key, d.Lease) }); err != nil {
		if !errors.Is(err, store.ErrNotOwner) {
			e.storeTrouble(d, "start", err)
		}
		// ErrNotOwner: the lease ran out already; another taker has it.
		return
	}

	if e.cfg.Rate > 0 {
		if wait := time.Until(took.Add(sendAlign)); wait > 0 {
			time.Sleep(wait)
		}
	}
	attempt := d.Attempts + 1
	e.delivering(d.Key, attempt)
	start := time.Now()
	out := e.send(d, attempt)
	e.states.forget(d.Key) // sent; retrying says when it goes again
	elapsed := time.Since(start)
	a := journal.Attempt(journal.Result{Outcome: out.kind.AttemptOutcome(), Start: start, Duration: elapsed,
		Status: out.status, Body: out.body, Err: out.err, Resigned: out.resigned})
	outcome := a.Outcome
	obs.Delivered(outcome, elapsed)
	expired := e.signatureExpired(d, out, start)
	if expired != "" {
		a.Error, a.Dead = expired, true
	}
	j := store.Journal{Notification: rt.Journaled(d.Notification), Attempt: a}
	ttl := e.cfg.TTL

	if out.kind == gate.BackendAnswered {
		ans := store.Answer{Status: out.status, Header: rt.ReplayHeader(out.header), BodyCached: !out.overflow, Order: d.Order}
		if ans.BodyCached {
			ans.Body = out.body
		}
		e.logAttempt(zapcore.InfoLevel, "notification delivered", d, attempt, outcome, out, elapsed)
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.StoreTimeout)
		err := rt.Settler().Complete(ctx, d.Key, d.Token, "", ans, ttl, j, func(err error) {
			// Called only after ErrKept, once the store took the answer
			// or the claim proved lost.
			if err != nil {
				obs.ClaimTrouble(d.Key, "complete", err)
			}
		})
		cancel()
		switch {
		case err == nil, errors.Is(err, store.ErrNotOwner):
			if err != nil {
				obs.ClaimTrouble(d.Key, "complete", err)
			}
			e.done(d)
		case errors.Is(err, store.ErrKept):
			// Kept in this process and retried; duplicates reaching this
			// instance are answered from it. Done: nobody takes it again.
			obs.StoreError("complete")
			e.logger.Warn("store failed to remember the delivered answer: kept in this process and retried",
				zap.String("key", obs.LogKey(d.Key)))
			e.done(d)
		default:
			// Not settled: the lease runs out, and the taker-over finds
			// the attempt started and holds it.
			obs.ClaimTrouble(d.Key, "complete", err)
		}
		return
	}

	// An expired signature is refused by every later attempt alike: the
	// key is dead now, not after give_up of futile retries.
	giveUp := time.Since(d.Enqueued) >= e.cfg.GiveUp || expired != ""
	settle := rt.Store().Leave
	if giveUp {
		// Out of the queue before the key is freed: a copy that claims
		// the freed key queues a new delivery, which this Done must not
		// remove.
		stopLease()
		e.done(d)
		settle = rt.Store().Release
	}
	if err := e.try(func(ctx context.Context) error { return settle(ctx, d.Key, d.Token, ttl, j) }); err != nil {
		if errors.Is(err, store.ErrNotOwner) {
			obs.ClaimTrouble(d.Key, "leave", err)
			if !giveUp {
				e.done(d)
			}
			return
		}
		// The outcome is known (nothing to hold), only its journal entry
		// is lost: go on.
		obs.ClaimTrouble(d.Key, "leave", err)
	}
	status := out.status
	if out.kind == gate.BackendUnknown {
		obs.Emit("idempotency.ambiguous", d.Key, status, int64(attempt))
	} else {
		obs.Emit("idempotency.failed", d.Key, status, int64(attempt))
	}
	if giveUp {
		obs.Dead()
		if expired != "" {
			e.logAttempt(zapcore.ErrorLevel, "delivery refused after the platform's signature expired: the key is dead at once, "+
				"a redelivery carries the same signature; the payment must be handled by hand", d, attempt, outcome, out, elapsed,
				zap.String("reason", expired))
		} else {
			e.logAttempt(zapcore.ErrorLevel, "delivery given up: the key is dead, an operator must redeliver it", d, attempt, outcome, out, elapsed)
		}
		obs.Emit("idempotency.dead", d.Key, status, int64(attempt))
		return
	}
	next := e.backoff(attempt)
	if out.kind == gate.BackendUnknown {
		next = lockTTL
	}
	e.logAttempt(zapcore.WarnLevel, "delivery attempt failed: retried later", d, attempt, outcome, out, elapsed, zap.Duration("retry_in", next))
	e.retrying(d.Key, time.Now().Add(next), attempt)
	if err := e.try(func(ctx context.Context) error {
		return e.queue.Retry(ctx, e.cfg.Scope, d.Key, d.Lease, time.Now().Add(next), attempt)
	}); err != nil && !errors.Is(err, store.ErrNotOwner) {
		// The lease runs out and the delivery is taken again.
		e.logger.Error("could not reschedule a delivery; it is taken again after lock_ttl",
			zap.String("key", obs.LogKey(d.Key)), zap.Error(err))
	}
}

// signatureExpired is the reason an attempt that the backend refused
// (a 4xx) at was refused for good: the notification carries the
// platform's own signature (WeChat Pay v3, PayPal: the route cannot
// re-sign it), and a backend that checks its signed time refuses it from
// SignedFor after it. "" for any other failure.
func (e *Engine) signatureExpired(d *store.Delivery, out sendResult, at time.Time) string {
	if out.kind != gate.BackendRefused || out.status < 400 || out.status >= 500 || out.resigned || d.Notification == nil {
		return ""
	}
	after := e.rt.RefusedAfter(d.Notification.Header, d.Enqueued)
	if after.IsZero() || at.Before(after) {
		return ""
	}
	return fmt.Sprintf("the platform's signature expired: refused (status %d) after %s, %s after the platform signed it, "+
		"and the gateway cannot re-sign it", out.status, after.UTC().Format(time.RFC3339), e.cfg.SignedFor)
}

// renewClaim extends the key's claim to hold before an attempt. A claim
// that ran out while the delivery waited (a long pause or backlog) or was
// purged is claimed again, so the notification the platform was
// acknowledged for is still delivered. false: do not deliver now.
func (e *Engine) renewClaim(d *store.Delivery, hold time.Duration) bool {
	rt, obs := e.rt, e.obs
	err := e.try(func(ctx context.Context) error { return rt.Store().Renew(ctx, d.Key, d.Token, hold) })
	if err == nil {
		return true
	}
	if !errors.Is(err, store.ErrNotOwner) {
		e.storeTrouble(d, "renew", err)
		return false
	}
	var res store.ClaimResult
	if err := e.try(func(ctx context.Context) error {
		var err error
		res, err = rt.Store().Claim(ctx, d.Key, "", hold)
		return err
	}); err != nil {
		e.storeTrouble(d, "claim", err)
		return false
	}
	switch res.Outcome {
	case store.Won:
		e.logger.Warn("a queued delivery's claim ran out (paused or backed up longer than give_up): claimed again",
			zap.String("key", obs.LogKey(d.Key)))
		d.Token = res.Token
		return true
	case store.Answered:
		// Delivered meanwhile (a redelivery): nothing to do.
		e.done(d)
		return false
	}
	// Claimed by a newer copy, which queued it again with its own token:
	// the next take of this delivery carries that token.
	if err := e.try(func(ctx context.Context) error {
		return e.queue.Retry(ctx, e.cfg.Scope, d.Key, d.Lease, time.Now().Add(e.cfg.LockTTL), d.Attempts)
	}); err != nil && !errors.Is(err, store.ErrNotOwner) {
		e.logger.Error("could not reschedule a delivery; it is taken again after lock_ttl",
			zap.String("key", obs.LogKey(d.Key)), zap.Error(err))
	}
	return false
}

// heldAmbiguous settles a delivery whose previous taker started an
// attempt and never settled it (its instance died or lost its lease): the
// backend may have run, so it is not sent again. As an ambiguous forward
// on the sync path, the claim is held for lock_ttl, then the key reads
// failed with its journal: an operator decides and can redeliver it (the
// ambiguous event and alert say so).
func (e *Engine) heldAmbiguous(d *store.Delivery) {
	rt, obs := e.rt, e.obs
	a := &store.Attempt{Start: time.Now(), Outcome: store.AttemptAmbiguous}
	j := store.Journal{Notification: rt.Journaled(d.Notification), Attempt: a}
	if err := e.try(func(ctx context.Context) error {
		return rt.Store().Leave(ctx, d.Key, d.Token, e.cfg.TTL, j)
	}); err != nil {
		obs.ClaimTrouble(d.Key, "leave", err)
	} else if err := e.try(func(ctx context.Context) error {
		return rt.Store().Renew(ctx, d.Key, d.Token, e.cfg.LockTTL)
	}); err != nil {
		obs.ClaimTrouble(d.Key, "renew", err)
	}
	obs.Delivered(store.AttemptAmbiguous, 0)
	e.logger.Warn("a delivery's previous attempt was started by a taker that never settled it (its gateway died?): "+
		"the backend may have run, so it is not sent again; the key is held for lock_ttl, then reads failed: inspect and redeliver it if needed",
		zap.String("scope", e.cfg.Scope), zap.String("key", obs.LogKey(d.Key)), zap.Int("attempts", d.Attempts))
	obs.Emit("idempotency.ambiguous", d.Key, 0, int64(d.Attempts+1))
	e.done(d)
}

// done removes a settled delivery from the queue.
func (e *Engine) done(d *store.Delivery) {
	e.states.forget(d.Key)
	if err := e.try(func(ctx context.Context) error {
		return e.queue.Done(ctx, e.cfg.Scope, d.Key, d.Lease)
	}); err != nil && !errors.Is(err, store.ErrNotOwner) {
		e.logger.Error("could not remove a settled delivery from the queue; it is taken again after lock_ttl and found settled",
			zap.String("key", e.obs.LogKey(d.Key)), zap.Error(err))
	}
}

// storeTrouble: the store failed before anything was sent; the lease runs
// out and the delivery is taken again.
func (e *Engine) storeTrouble(d *store.Delivery, op string, err error) {
	e.obs.StoreError(op)
	e.logger.Error("store failed before a delivery attempt; it is taken again after lock_ttl",
		zap.String("op", op), zap.String("key", e.obs.LogKey(d.Key)), zap.Error(err))
}

// try runs a store operation, retrying transient failures for up to half
// a lock_ttl (the lease is being extended meanwhile). ErrNotOwner and
// ErrClosed are final.
func (e *Engine) try(op func(ctx context.Context) error) error {
	deadline := time.Now().Add(e.cfg.LockTTL / 2)
	wait := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.StoreTimeout)
		err := op(ctx)
		cancel()
		if err == nil || errors.Is(err, store.ErrNotOwner) || errors.Is(err, store.ErrClosed) || time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// keepLease extends the delivery's lease at a third of lock_ttl until the
// returned stop is called.
func (e *Engine) keepLease(d *store.Delivery) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lockTTL := e.cfg.LockTTL
	go func() {
		defer close(done)
		t := time.NewTicker(lockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			xctx, xcancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
			err := e.queue.Extend(xctx, e.cfg.Scope, d.Key, d.Lease, lockTTL)
			xcancel()
			if errors.Is(err, store.ErrNotOwner) {
				e.logger.Warn("lost a delivery's lease: another taker may take it over (and finds its attempt started)",
					zap.String("key", e.obs.LogKey(d.Key)))
				return
			}
		}
	}()
	// Safe to call more than once.
	return func() { cancel(); <-done }
}

// backoff is the wait before the next attempt after attempts failed ones:
// full jitter between retry's initial and min(max, initial·2^attempts).
func (e *Engine) backoff(attempts int) time.Duration {
	return backoff(e.cfg.RetryInitial, e.cfg.RetryMax, attempts)
}

func backoff(initial, most time.Duration, attempts int) time.Duration {
	ceil := most
	if attempts < 40 {
		if c := initial << attempts; c > 0 && c < ceil {
			ceil = c
		}
	}
	if ceil <= initial {
		return initial
	}
	return initial + rand.N(ceil-initial+1)
}

// logAttempt logs one attempt, which came to outcome.
func (e *Engine) logAttempt(level zapcore.Level, msg string, d *store.Delivery, attempt int, outcome string, out sendResult,
	elapsed time.Duration, extra ...zap.Field,
) {
	ce := e.logger.Check(level, msg)
	if ce == nil {
		return
	}
	fields := append([]zap.Field{
		zap.String("platform", e.cfg.Platform), zap.String("scope", e.cfg.Scope), zap.String("key", e.obs.LogKey(d.Key)),
		zap.Int("attempt", attempt), zap.String("outcome", outcome), zap.Duration("duration", elapsed),
		zap.Duration("queued", time.Since(d.Enqueued)),
	}, extra...)
	if out.status != 0 {
		fields = append(fields, zap.Int("upstream_status", out.status))
	}
	if out.err != nil {
		fields = append(fields, zap.Error(out.err))
	}
	ce.Write(fields...)
}
