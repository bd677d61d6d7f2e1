package caddymodule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/internal/registry"
)

// The delivery engine of one async route: `concurrency` workers take
// deliveries from the scope's queue (the queue enforces concurrency and
// rate across every instance) and send each to the backend, settling the
// key's claim by the outcome as the synchronous path does. It starts at
// Provision and stops at Cleanup; on a reload the new route's engine
// starts before the old one stops, and both take from the one queue for a
// moment, within its limits.

const (
	// maxTakeWait bounds a worker's sleep between takes, so a delivery
	// enqueued on another instance waits at most this long.
	maxTakeWait = 200 * time.Millisecond
	// stopGrace is how long Cleanup lets deliveries in flight finish
	// before cutting them off (they are then settled as ambiguous).
	stopGrace = 10 * time.Second
	// statsEvery refreshes the queue gauges.
	statsEvery = 2 * time.Second
	// maxDeliveryAnswer bounds the answer body read from the backend
	// beyond what is remembered: it is read to the end to know the answer
	// is whole.
	maxDeliveryAnswer = 64 << 20
	// sendAlign: on a scope with a rate, each delivery is sent this long
	// after its take began. The queue counts a start when it hands the
	// delivery out; were the send to follow after a varying time (the
	// Start's round trip, a busy moment), a late one would land in the
	// next second as the backend sees it, and the backend would see more
	// than the rate. A fixed delay shifts every start alike.
	sendAlign = 15 * time.Millisecond
)

type engine struct {
	h     *Handler
	ds    *deliveryState
	scope string
	lim   cache.QueueLimits

	client *http.Client
	wake   chan struct{}
	states keyStates // what this engine does with each key (deliver_keys.go)

	takeCtx    context.Context // done: take nothing more
	stopTaking context.CancelFunc
	sendCtx    context.Context // done: cut deliveries in flight off
	abortSends context.CancelFunc
	wg         sync.WaitGroup
	stopOnce   sync.Once

	stats      atomic.Pointer[cache.QueueStats]
	takeLogged atomic.Int64 // when a take error was last logged (unix ns)
}

func newEngine(h *Handler, ds *deliveryState) *engine {
	e := &engine{h: h, ds: ds, scope: h.scope(),
		lim:  cache.QueueLimits{Concurrency: ds.concurrency, Rate: ds.rate, Lease: time.Duration(h.LockTTL)},
		wake: make(chan struct{}, ds.concurrency)}
	e.takeCtx, e.stopTaking = context.WithCancel(context.Background())
	e.sendCtx, e.abortSends = context.WithCancel(context.Background())
	e.client = &http.Client{
		// A redirect is the backend's answer, not a place to re-send the
		// notification to.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: ds.concurrency,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
	return e
}

// start runs the workers and the stats refresher.
func (e *engine) start() {
	if h := e.h; h.signedFor() > 0 && h.resign == nil && !h.VerifyOff {
		h.logger.Warn(fmt.Sprintf("async deliveries of this route carry %s's own signature, which the gateway cannot renew: "+
			"a backend that checks it (the platform's SDK) refuses a delivery from %s after the platform signed it; "+
			"one refused (4xx) after that makes the key dead at once, with an idempotency.dead event, and the payment must be handled by hand",
			h.preset().Title, h.signedFor()),
			zap.String("platform", h.Platform), zap.String("scope", e.scope), zap.Duration("signed_for", h.signedFor()))
	}
	e.h.app.AddEngine(e)
	for range e.ds.concurrency {
		e.wg.Add(1)
		go e.work()
	}
	e.wg.Add(1)
	go e.refreshStats()
}

// stop takes nothing more, lets the deliveries in flight finish (cut off
// after stopGrace) and settle, and returns once every worker is gone.
func (e *engine) stop() {
	e.stopOnce.Do(func() {
		e.stopTaking()
		done := make(chan struct{})
		go func() { e.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopGrace):
			e.h.logger.Warn("deliveries still in flight at shutdown: cut off, settled as ambiguous", zap.String("scope", e.scope))
			e.abortSends()
			<-done
		}
		e.abortSends()
		replaced := e.h.app.RemoveEngine(e)
		if !replaced {
			// A reload starts the new config's engine before this one
			// stops: the config that replaced this one runs it.
			if running, ok := registry.Running(); ok && running != e.h.app {
				_, replaced = running.EngineOf(e.scope)
			}
		}
		e.client.CloseIdleConnections()
		if !replaced {
			// Not a reload: the route is gone, or the process is
			// stopping.
			e.leftQueued()
		}
	})
}

// leftQueued warns of the deliveries the scope's queue still holds once no
// async route of the scope runs in this process: nothing here delivers
// them any more. They wait in the store for a gateway that runs one.
func (e *engine) leftQueued() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(e.h.StoreTimeout))
	defer cancel()
	st, err := e.ds.queue.Stats(ctx, e.scope)
	if err != nil || st.Depth == 0 {
		return
	}
	e.h.logger.Warn("no async route of this scope runs here any more: its queued deliveries wait in the store "+
		"until a gateway with one runs (the memory store loses them with the process)",
		zap.String("scope", e.scope), zap.Int64("queued", st.Depth), zap.Time("oldest", st.Oldest))
}

// The engine as the admin API and the console see it (registry.Engine).
func (e *engine) Scope() string      { return e.scope }
func (e *engine) Platform() string   { return e.h.Platform }
func (e *engine) Target() string     { return e.ds.to.Redacted() }
func (e *engine) Queue() cache.Queue { return e.ds.queue }
func (e *engine) Poke()              { e.poke() }

// QueueStats are the queue's stats as refreshStats last read them, for
// the queue gauges (package metrics).
func (e *engine) QueueStats() (cache.QueueStats, bool) {
	if st := e.stats.Load(); st != nil {
		return *st, true
	}
	return cache.QueueStats{}, false
}

// poke wakes a worker: a delivery was just enqueued here.
func (e *engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// work is one worker: take, deliver, repeat.
func (e *engine) work() {
	defer e.wg.Done()
	for e.takeCtx.Err() == nil {
		took := time.Now()
		ctx, cancel := context.WithTimeout(e.takeCtx, time.Duration(e.h.StoreTimeout))
		d, wait, err := e.ds.queue.Take(ctx, e.scope, e.lim)
		cancel()
		if err != nil {
			if e.takeCtx.Err() != nil {
				return
			}
			e.takeTrouble(err)
			wait = maxTakeWait
		}
		if d != nil {
			e.deliver(d, took)
			continue
		}
		t := time.NewTimer(min(max(wait, time.Millisecond), maxTakeWait))
		select {
		case <-t.C:
		case <-e.wake:
		case <-e.takeCtx.Done():
		}
		t.Stop()
	}
}

// takeTrouble logs a failed take, at most once every 10s per engine.
func (e *engine) takeTrouble(err error) {
	e.h.metrics.StoreError(context.Background(), e.h.route(), "take")
	now := time.Now().UnixNano()
	if last := e.takeLogged.Load(); now-last < int64(10*time.Second) || !e.takeLogged.CompareAndSwap(last, now) {
		return
	}
	e.h.logger.Error("cannot take deliveries from the queue", zap.String("scope", e.scope), zap.Error(err))
}

// refreshStats keeps the queue's stats for the gauges.
func (e *engine) refreshStats() {
	defer e.wg.Done()
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(e.takeCtx, time.Duration(e.h.StoreTimeout))
		if st, err := e.ds.queue.Stats(ctx, e.scope); err == nil {
			e.stats.Store(&st)
		}
		cancel()
		select {
		case <-e.takeCtx.Done():
			return
		case <-t.C:
		}
	}
}

// deliver makes one attempt of a delivery taken at took, and settles it.
func (e *engine) deliver(d *cache.Delivery, took time.Time) {
	h := e.h
	lockTTL := time.Duration(h.LockTTL)
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
	minHold := e.ds.retryMx + 2*lockTTL
	hold := max(time.Until(d.Enqueued.Add(e.ds.hold(lockTTL))), minHold)
	if time.Until(d.Enqueued.Add(e.ds.hold(lockTTL))) < minHold+time.Minute {
		if !e.renewClaim(d, hold) {
			return
		}
	}
	// Marked started before a byte is sent: if this instance dies now,
	// whoever takes the delivery over knows the backend may have run it.
	if err := e.try(func(ctx context.Context) error { return e.ds.queue.Start(ctx, e.scope, d.Key, d.Lease) }); err != nil {
		if !errors.Is(err, cache.ErrNotOwner) {
			e.storeTrouble(d, "start", err)
		}
		// ErrNotOwner: the lease ran out already; another taker has it.
		return
	}

	if e.ds.rate > 0 {
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
	h.metrics.Delivery(context.Background(), h.route(), out.kind.attemptOutcome(), elapsed)

	a := &cache.Attempt{Start: start, Duration: elapsed, Status: out.status, Outcome: out.kind.attemptOutcome(),
		Error: attemptError(out.kind, out.status, out.err, elapsed), Resigned: out.resigned}
	if out.kind == backendFailed && len(out.body) > 0 {
		a.Body = bytes.Clone(out.body[:min(len(out.body), cache.MaxAttemptBody)])
	}
	expired := e.signatureExpired(d, out, start)
	if expired != "" {
		a.Error, a.Dead = expired, true
	}
	j := cache.Journal{Notification: h.journaled(d.Notification), Attempt: a}
	ttl := time.Duration(h.TTL)

	if out.kind == backendAnswered {
		ans := cache.Answer{Status: out.status, Header: replayHeaders(out.header), BodyCached: !out.overflow, Order: d.Order}
		if ans.BodyCached {
			ans.Body = out.body
		}
		e.logAttempt(zapcore.InfoLevel, "notification delivered", d, attempt, out, elapsed)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(h.StoreTimeout))
		err := h.settler.Complete(ctx, d.Key, d.Token, "", ans, ttl, j, func(err error) {
			// Called only after ErrKept, once the store took the answer
			// or the claim proved lost.
			if err != nil {
				h.claimTrouble(d.Key, "complete", err)
			}
		})
		cancel()
		switch {
		case err == nil, errors.Is(err, cache.ErrNotOwner):
			if err != nil {
				h.claimTrouble(d.Key, "complete", err)
			}
			e.done(d)
		case errors.Is(err, cache.ErrKept):
			// Kept in this process and retried; duplicates reaching this
			// instance are answered from it. Done: nobody takes it again.
			h.metrics.StoreError(context.Background(), h.route(), "complete")
			h.logger.Warn("store failed to remember the delivered answer: kept in this process and retried",
				zap.String("key", h.logKey(d.Key)))
			e.done(d)
		default:
			// Not settled: the lease runs out, and the taker-over finds
			// the attempt started and holds it.
			h.claimTrouble(d.Key, "complete", err)
		}
		return
	}

	// An expired signature is refused by every later attempt alike: the
	// key is dead now, not after give_up of futile retries.
	giveUp := time.Since(d.Enqueued) >= e.ds.giveUp || expired != ""
	settle := h.store.Leave
	if giveUp {
		// Out of the queue before the key is freed: a copy that claims
		// the freed key queues a new delivery, which this Done must not
		// remove.
		stopLease()
		e.done(d)
		settle = h.store.Release
	}
	if err := e.try(func(ctx context.Context) error { return settle(ctx, d.Key, d.Token, ttl, j) }); err != nil {
		if errors.Is(err, cache.ErrNotOwner) {
			h.claimTrouble(d.Key, "leave", err)
			if !giveUp {
				e.done(d)
			}
			return
		}
		// The outcome is known (nothing to hold), only its journal entry
		// is lost: go on.
		h.claimTrouble(d.Key, "leave", err)
	}
	status := out.status
	if out.kind == backendAmbiguous {
		h.emitAttempts("idempotency.ambiguous", d.Key, status, int64(attempt))
	} else {
		h.emitAttempts("idempotency.failed", d.Key, status, int64(attempt))
	}
	if giveUp {
		h.metrics.Dead(context.Background(), h.route())
		if expired != "" {
			e.logAttempt(zapcore.ErrorLevel, "delivery refused after the platform's signature expired: the key is dead at once, "+
				"a redelivery carries the same signature; the payment must be handled by hand", d, attempt, out, elapsed,
				zap.String("reason", expired))
		} else {
			e.logAttempt(zapcore.ErrorLevel, "delivery given up: the key is dead, an operator must redeliver it", d, attempt, out, elapsed)
		}
		h.emitAttempts("idempotency.dead", d.Key, status, int64(attempt))
		return
	}
	next := e.ds.backoff(attempt)
	if out.kind == backendAmbiguous {
		next = lockTTL
	}
	e.logAttempt(zapcore.WarnLevel, "delivery attempt failed: retried later", d, attempt, out, elapsed, zap.Duration("retry_in", next))
	e.retrying(d.Key, time.Now().Add(next), attempt)
	if err := e.try(func(ctx context.Context) error {
		return e.ds.queue.Retry(ctx, e.scope, d.Key, d.Lease, time.Now().Add(next), attempt)
	}); err != nil && !errors.Is(err, cache.ErrNotOwner) {
		// The lease runs out and the delivery is taken again.
		h.logger.Error("could not reschedule a delivery; it is taken again after lock_ttl",
			zap.String("key", h.logKey(d.Key)), zap.Error(err))
	}
}

// signatureExpired is the reason an attempt that the backend refused
// (a 4xx) at was refused for good: the notification carries the
// platform's own signature (WeChat Pay v3, PayPal: the route cannot
// re-sign it), and a backend that checks its signed time refuses it from
// SignedFor after it. "" for any other failure.
func (e *engine) signatureExpired(d *cache.Delivery, out sendResult, at time.Time) string {
	h := e.h
	if out.kind != backendFailed || out.status < 400 || out.status >= 500 || out.resigned || h.VerifyOff || d.Notification == nil {
		return ""
	}
	after := h.preset().RefusedAfter(d.Notification.Header, d.Enqueued)
	if after.IsZero() || at.Before(after) {
		return ""
	}
	return fmt.Sprintf("the platform's signature expired: refused (status %d) after %s, %s after the platform signed it, "+
		"and the gateway cannot re-sign it", out.status, after.UTC().Format(time.RFC3339), h.signedFor())
}

// renewClaim extends the key's claim to hold before an attempt. A claim
// that ran out while the delivery waited (a long pause or backlog) or was
// purged is claimed again, so the notification the platform was
// acknowledged for is still delivered. false: do not deliver now.
func (e *engine) renewClaim(d *cache.Delivery, hold time.Duration) bool {
	h := e.h
	err := e.try(func(ctx context.Context) error { return h.store.Renew(ctx, d.Key, d.Token, hold) })
	if err == nil {
		return true
	}
	if !errors.Is(err, cache.ErrNotOwner) {
		e.storeTrouble(d, "renew", err)
		return false
	}
	var res cache.ClaimResult
	if err := e.try(func(ctx context.Context) error {
		var err error
		res, err = h.store.Claim(ctx, d.Key, "", hold)
		return err
	}); err != nil {
		e.storeTrouble(d, "claim", err)
		return false
	}
	switch res.Outcome {
	case cache.Won:
		h.logger.Warn("a queued delivery's claim ran out (paused or backed up longer than give_up): claimed again",
			zap.String("key", h.logKey(d.Key)))
		d.Token = res.Token
		return true
	case cache.Answered:
		// Delivered meanwhile (a redelivery): nothing to do.
		e.done(d)
		return false
	}
	// Claimed by a newer copy, which queued it again with its own token:
	// the next take of this delivery carries that token.
	if err := e.try(func(ctx context.Context) error {
		return e.ds.queue.Retry(ctx, e.scope, d.Key, d.Lease, time.Now().Add(time.Duration(h.LockTTL)), d.Attempts)
	}); err != nil && !errors.Is(err, cache.ErrNotOwner) {
		h.logger.Error("could not reschedule a delivery; it is taken again after lock_ttl",
			zap.String("key", h.logKey(d.Key)), zap.Error(err))
	}
	return false
}

// heldAmbiguous settles a delivery whose previous taker started an
// attempt and never settled it (its instance died or lost its lease): the
// backend may have run, so it is not sent again. As an ambiguous forward
// on the sync path, the claim is held for lock_ttl, then the key reads
// failed with its journal: an operator decides and can redeliver it (the
// ambiguous event and alert say so).
func (e *engine) heldAmbiguous(d *cache.Delivery) {
	h := e.h
	a := &cache.Attempt{Start: time.Now(), Outcome: cache.AttemptAmbiguous}
	j := cache.Journal{Notification: h.journaled(d.Notification), Attempt: a}
	if err := e.try(func(ctx context.Context) error {
		return h.store.Leave(ctx, d.Key, d.Token, time.Duration(h.TTL), j)
	}); err != nil {
		h.claimTrouble(d.Key, "leave", err)
	} else if err := e.try(func(ctx context.Context) error {
		return h.store.Renew(ctx, d.Key, d.Token, time.Duration(h.LockTTL))
	}); err != nil {
		h.claimTrouble(d.Key, "renew", err)
	}
	h.metrics.Delivery(context.Background(), h.route(), cache.AttemptAmbiguous, 0)
	h.logger.Warn("a delivery's previous attempt was started by a taker that never settled it (its gateway died?): "+
		"the backend may have run, so it is not sent again; the key is held for lock_ttl, then reads failed: inspect and redeliver it if needed",
		zap.String("scope", e.scope), zap.String("key", h.logKey(d.Key)), zap.Int("attempts", d.Attempts))
	h.emitAttempts("idempotency.ambiguous", d.Key, 0, int64(d.Attempts+1))
	e.done(d)
}

// done removes a settled delivery from the queue.
func (e *engine) done(d *cache.Delivery) {
	e.states.forget(d.Key)
	if err := e.try(func(ctx context.Context) error {
		return e.ds.queue.Done(ctx, e.scope, d.Key, d.Lease)
	}); err != nil && !errors.Is(err, cache.ErrNotOwner) {
		e.h.logger.Error("could not remove a settled delivery from the queue; it is taken again after lock_ttl and found settled",
			zap.String("key", e.h.logKey(d.Key)), zap.Error(err))
	}
}

// storeTrouble: the store failed before anything was sent; the lease runs
// out and the delivery is taken again.
func (e *engine) storeTrouble(d *cache.Delivery, op string, err error) {
	e.h.metrics.StoreError(context.Background(), e.h.route(), op)
	e.h.logger.Error("store failed before a delivery attempt; it is taken again after lock_ttl",
		zap.String("op", op), zap.String("key", e.h.logKey(d.Key)), zap.Error(err))
}

// try runs a store operation, retrying transient failures for up to half
// a lock_ttl (the lease is being extended meanwhile). ErrNotOwner and
// ErrClosed are final.
func (e *engine) try(op func(ctx context.Context) error) error {
	deadline := time.Now().Add(time.Duration(e.h.LockTTL) / 2)
	wait := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(e.h.StoreTimeout))
		err := op(ctx)
		cancel()
		if err == nil || errors.Is(err, cache.ErrNotOwner) || errors.Is(err, cache.ErrClosed) || time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// keepLease extends the delivery's lease at a third of lock_ttl until the
// returned stop is called.
func (e *engine) keepLease(d *cache.Delivery) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lockTTL := time.Duration(e.h.LockTTL)
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
			xctx, xcancel := context.WithTimeout(ctx, time.Duration(e.h.StoreTimeout))
			err := e.ds.queue.Extend(xctx, e.scope, d.Key, d.Lease, lockTTL)
			xcancel()
			if errors.Is(err, cache.ErrNotOwner) {
				e.h.logger.Warn("lost a delivery's lease: another taker may take it over (and finds its attempt started)",
					zap.String("key", e.h.logKey(d.Key)))
				return
			}
		}
	}()
	// Safe to call more than once.
	return func() { cancel(); <-done }
}

// backoff is the wait before the next attempt after attempts failed ones:
// full jitter between retry's initial and min(max, initial·2^attempts).
func (ds *deliveryState) backoff(attempts int) time.Duration {
	ceil := ds.retryMx
	if attempts < 40 {
		if c := ds.retryInitial << attempts; c > 0 && c < ceil {
			ceil = c
		}
	}
	if ceil <= ds.retryInitial {
		return ds.retryInitial
	}
	return ds.retryInitial + rand.N(ceil-ds.retryInitial+1)
}

// logAttempt logs one attempt.
func (e *engine) logAttempt(level zapcore.Level, msg string, d *cache.Delivery, attempt int, out sendResult,
	elapsed time.Duration, extra ...zap.Field,
) {
	ce := e.h.logger.Check(level, msg)
	if ce == nil {
		return
	}
	fields := append([]zap.Field{
		zap.String("platform", e.h.Platform), zap.String("scope", e.scope), zap.String("key", e.h.logKey(d.Key)),
		zap.Int("attempt", attempt), zap.String("outcome", out.kind.attemptOutcome()), zap.Duration("duration", elapsed),
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

var _ registry.Engine = (*engine)(nil)
