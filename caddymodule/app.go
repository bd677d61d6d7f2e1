package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/caddymodule/app"
)

// The config's state (routes, engines, stores, counts) lives in its
// idempotency app (app.App), which also starts the handlers when the
// config runs: a handler joins it at Provision, and leaves its route at
// Cleanup.

// configApp returns the idempotency app of ctx's config, loading it on
// first use; for a context made without a config (caddy.NewContext in a
// unit test), an app of the handler's own, which nothing starts: the
// handler then starts on its first request.
func configApp(ctx caddy.Context) (a *app.App) {
	defer func() {
		// ctx.App dereferences the config, which such a context lacks.
		if recover() != nil {
			a = app.New()
		}
	}()
	v, err := ctx.App("idempotency")
	if err != nil {
		return app.New()
	}
	return v.(*app.App)
}

// Start starts the handler when its config runs (app.Member). A
// handler that cannot start (its store does not open) fails the config,
// as a failed Provision did.
func (h *Handler) Start() error {
	if err := h.start(); err != nil {
		return fmt.Errorf("route of scope %s: %v", h.scope(), err)
	}
	return nil
}

// siblings are the other handlers of h's config provisioned so far.
func (h *Handler) siblings() []*Handler {
	var out []*Handler
	for _, m := range h.app.Members() {
		if o, ok := m.(*Handler); ok && o != h {
			out = append(out, o)
		}
	}
	return out
}

// Interface guards
var _ app.Member = (*Handler)(nil)
