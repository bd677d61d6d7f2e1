package caddymodule

import (
	"context"
	"errors"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/caddymodule/metrics"
	"github.com/idemgate/idemgate/store"
)

// routeObserver is a route's metrics, logs and events: what the request path
// and the delivery engine (delivery.Observer) report to. Provision builds
// it once the route's names and metrics are known.
type routeObserver struct {
	platform, scope string
	logKeys         bool // log_keys: keys in clear
	logger          *zap.Logger
	metrics         metrics.Recorder
	route           metrics.Route    // the route's metric labels
	alerter         *alerter         // the route's `alert`; nil: none
	events          *caddyevents.App // nil: events off
	ctx             caddy.Context
}

// newObserver is h's routeObserver; h is provisioned up to its metrics.
func newObserver(h *Handler, al *alerter, ev *caddyevents.App) *routeObserver {
	return &routeObserver{platform: h.Platform, scope: h.scope(), logKeys: h.LogKeys, logger: h.logger,
		metrics: h.metrics, route: metrics.Route{Platform: h.Platform, Scope: h.scope()}, alerter: al, events: ev, ctx: h.ctx}
}

// close stops the alerter; o may be nil (a failed Provision).
func (o *routeObserver) close() {
	if o != nil {
		o.alerter.close()
	}
}

// emit sends a Caddy event (caddyevents) that operators can hook: an
// alert, or the refund a business failure after payment needs.
func (o *routeObserver) emit(name, key string, status int) { o.Emit(name, key, status, 0) }

// Emit is emit with the key's attempt count (0: unknown).
func (o *routeObserver) Emit(name, key string, status int, attempts int64) {
	o.alerter.send(alertEvent{Event: name, Time: time.Now().UTC(), Scope: o.scope, Key: key,
		Platform: o.platform, Status: status, Attempts: attempts})
	if o.events == nil || !o.events.ShouldEmit(name) {
		return
	}
	data := map[string]any{"scope": o.scope, "key": key, "platform": o.platform}
	if status != 0 {
		data["status"] = status
	}
	if attempts != 0 {
		data["attempts"] = attempts
	}
	o.events.Emit(o.ctx, name, data)
}

// emitData sends an event about the route rather than one key
// (idempotency.reconcile: the counts of a reconciliation), to the route's
// alert and as a Caddy event, with the scope and platform added.
func (o *routeObserver) emitData(name string, data map[string]any) {
	o.alerter.send(alertEvent{Event: name, Time: time.Now().UTC(), Scope: o.scope, Platform: o.platform, Details: data})
	if o.events == nil || !o.events.ShouldEmit(name) {
		return
	}
	d := map[string]any{"scope": o.scope, "platform": o.platform}
	for k, v := range data {
		d[k] = v
	}
	o.events.Emit(o.ctx, name, d)
}

// LogKey is the key as it may appear in logs and spans: hashed unless
// log_keys is on.
func (o *routeObserver) LogKey(key string) string {
	if o.logKeys || key == "" {
		return key
	}
	return app.HashKey(key)
}

// ClaimTrouble logs and counts a claim that could not be settled. A lost
// claim (ErrNotOwner) means another request may have run the backend too.
func (o *routeObserver) ClaimTrouble(key, op string, err error) {
	if errors.Is(err, store.ErrNotOwner) {
		o.metrics.LostClaim(context.Background(), o.route, op)
		o.emit("idempotency.lost_claim", key, 0)
		o.logger.Error("lost the claim on an idempotency key while its request was at the backend",
			zap.String("op", op), zap.String("key", o.LogKey(key)), zap.Error(err))
		return
	}
	o.metrics.StoreError(context.Background(), o.route, op)
	o.logger.Error("store failed to settle a claim; it expires after lock_ttl",
		zap.String("op", op), zap.String("key", o.LogKey(key)), zap.Error(err))
}

// Delivered, Dead and StoreError count an async attempt, a key given up
// and a failed store operation.
func (o *routeObserver) Delivered(outcome string, took time.Duration) {
	o.metrics.Delivery(context.Background(), o.route, outcome, took)
}

func (o *routeObserver) Dead() { o.metrics.Dead(context.Background(), o.route) }

func (o *routeObserver) StoreError(op string) {
	o.metrics.StoreError(context.Background(), o.route, op)
}
