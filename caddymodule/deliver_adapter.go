package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	async "github.com/idemgate/idemgate/delivery"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/journal"
	"github.com/idemgate/idemgate/store"
)

// The delivery engine (package delivery) attached to an async route: the
// route as the engine's Route and Observer, the engine as the gate's Queue and as the
// config's app lists it, started and stopped with the route.

// asyncEngine is a route's delivery engine as the config's app lists it
// (app.Engine).
type asyncEngine struct {
	*async.Engine
	h        *Handler
	stopOnce sync.Once
}

// start registers the engine with the config's app and runs it.
func (e *asyncEngine) start() {
	// signedFor: how long after its signed time a backend's own check
	// refuses a notification sent as it is (keying.Preset.SignedFor).
	if h, signedFor := e.h, e.h.preset().SignedFor; signedFor > 0 && h.resign == nil && !h.VerifyOff {
		h.logger.Warn(fmt.Sprintf("async deliveries of this route carry %s's own signature, which the gateway cannot renew: "+
			"a backend that checks it (the platform's SDK) refuses a delivery from %s after the platform signed it; "+
			"one refused (4xx) after that makes the key dead at once, with an idempotency.dead event, and the payment must be handled by hand",
			h.preset().Title, signedFor),
			zap.String("platform", h.Platform), zap.String("scope", e.Scope()), zap.Duration("signed_for", signedFor))
	}
	e.h.app.AddEngine(e)
	e.Start()
}

// stop stops the engine and takes it off the app. When no engine of the
// scope runs on, here or in the config that replaced this one (a reload
// starts the new config's engine before this one stops), the route is
// gone or the process stopping: the deliveries left queued are warned of.
func (e *asyncEngine) stop() {
	e.stopOnce.Do(func() {
		e.Stop()
		replaced := e.h.app.RemoveEngine(e)
		if !replaced {
			if running, ok := app.Running(); ok && running != e.h.app {
				_, replaced = running.EngineOf(e.Scope())
			}
		}
		if !replaced {
			e.LeftQueued()
		}
	})
}

// KeyState is what this engine knows of key (app.Engine).
func (e *asyncEngine) KeyState(key string) (app.KeyDelivery, bool) {
	s, ok := e.Engine.KeyState(key)
	return app.KeyDelivery(s), ok
}

// asyncQueue is an async route's engine as the gate's Queue: the receipt
// and the answer to a copy of a queued key.
type asyncQueue struct{ h *Handler }

func (q asyncQueue) Enqueue(ctx context.Context, r *http.Request, c gate.Claim) gate.Outcome {
	return q.h.dlv.engine.Enqueue(ctx, r, c)
}

func (q asyncQueue) Copy(ctx context.Context, key, fp string, copies int64) (gate.Outcome, bool) {
	return q.h.dlv.engine.Copy(ctx, key, fp, copies)
}

// deliverRoute is the handler as its engine's Route; its Observer is the
// route's (observer.go). The journal's helpers (received, journal.CredentialsOf,
// journal.Cut) are reached from here only.
type deliverRoute struct{ h *Handler }

func (d deliverRoute) Store() store.Store      { return d.h.store }
func (d deliverRoute) Settler() *store.Settler { return d.h.settler }
func (d deliverRoute) Ackable() error          { return d.h.dlv.durable.Ackable(d.h.store) }

func (d deliverRoute) Received(r *http.Request, c gate.Claim) (*store.Notification, http.Header) {
	return received(r, c, d.h.reg), journal.CredentialsOf(r.Header)
}

func (d deliverRoute) Journaled(n *store.Notification) *store.Notification {
	return journal.Cut(n, d.h.JournalBody)
}

func (d deliverRoute) Success(method string, status int, header http.Header, body []byte) bool {
	return d.h.success.judge(method, status, header, body)
}

func (d deliverRoute) ReplayHeader(h http.Header) http.Header { return replayHeaders(h) }

func (d deliverRoute) Resign(hdr http.Header, body []byte) (bool, error) {
	if d.h.resign == nil {
		return false, nil
	}
	return true, d.h.resign(hdr, body, d.h.opts.now())
}

func (d deliverRoute) RefusedAfter(hdr http.Header, received time.Time) time.Time {
	if d.h.VerifyOff {
		return time.Time{}
	}
	return d.h.preset().RefusedAfter(hdr, received)
}

var (
	_ app.Engine     = (*asyncEngine)(nil)
	_ async.Route    = deliverRoute{}
	_ async.Observer = (*routeObserver)(nil)
)
