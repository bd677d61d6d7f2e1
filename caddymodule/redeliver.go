package caddymodule

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/caddymodule/redeliver"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/orders"
	"github.com/idemgate/idemgate/store"
)

// Redelivery (package redeliver) as the handler attaches it: its Point
// is the first step of ServeHTTP (keeps the chain, answers a probe), and
// the route's registry entry redelivers through it.

// registryRoute is this route as the operator surfaces see it.
func (h *Handler) registryRoute() *app.Route {
	n := 1
	for _, o := range h.siblings() {
		if o.scope() == h.scope() {
			n++
		}
	}
	rt := &app.Route{Scope: h.scope(), Platform: h.platform, TTL: time.Duration(h.TTL), RetryWindow: h.retryWindow(),
		Name: fmt.Sprintf("%s#%d", h.scope(), n), Async: h.async(), Concurrency: 4,
		Resigns: h.resign != nil, Merchants: h.merchants, Emit: h.obs.emitData,
		OrderRun: func(key string, n *keying.Notification) *store.OrderRun {
			return orders.RunOf(h.preset(), time.Duration(h.OrderTTL), key, n)
		}}
	// Redeliver runs n through this handler and its chain, as a copy
	// first received at firstSeen.
	rt.Redeliver = func(ctx context.Context, n *store.Notification, firstSeen time.Time, before func() error) (app.Answer, error) {
		return h.run.recovery.Redeliver(ctx, redeliver.Route{Reg: h.reg, Ctx: h.ctx, Handler: h, Start: h.start, Resign: h.resign, Now: h.opts.now},
			n, firstSeen, before)
	}
	if h.async() {
		rt.Concurrency = h.dlv.concurrency
	} else {
		rt.Schedule = h.preset().Schedule
	}
	if h.resign == nil {
		rt.SignedFor = h.preset().SignedFor
	}
	return rt
}
