package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2"
)

func init() {
	caddy.RegisterModule(App{})
}

// App starts the idempotency handlers of a config when the config runs.
// Caddy provisions every module for `caddy validate` too, and a handler
// has no Start of its own: what touches the outside world — opening the
// store (the embedded file's lock, a Redis connection and its start-up
// checks), the async delivery engine, the certificate watch — waits for
// this app's Start, which Caddy calls only for a config it runs. Handlers
// load the app themselves (as Caddy's acme_server handler loads the pki
// app); it needs no configuration.
//
// Caddy provisions a config's modules, then starts its apps, one after
// the other in one goroutine: handlers needs no lock.
type App struct {
	handlers []*Handler
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "idempotency",
		New: func() caddy.Module { return new(App) },
	}
}

// Start starts every handler of the config. A handler that cannot start
// (its store does not open) fails the config, as a failed Provision did.
func (a *App) Start() error {
	for _, h := range a.handlers {
		if err := h.start(); err != nil {
			return fmt.Errorf("route of scope %s: %v", h.scope(), err)
		}
	}
	return nil
}

// Stop does nothing: each handler's Cleanup stops what it started, once
// the config that replaces this one runs.
func (a *App) Stop() error { return nil }

// add makes h one of the handlers Start starts.
func (a *App) add(h *Handler) {
	a.handlers = append(a.handlers, h)
}

// each calls f for every handler added so far.
func (a *App) each(f func(*Handler)) {
	for _, h := range a.handlers {
		f(h)
	}
}

// configApp returns the idempotency app of ctx's config, loading it on
// first use; nil for a context made without a config (caddy.NewContext in
// a unit test), whose handlers start on their first request instead.
func configApp(ctx caddy.Context) (app *App) {
	defer func() {
		// ctx.App dereferences the config, which such a context lacks.
		if recover() != nil {
			app = nil
		}
	}()
	v, err := ctx.App("idempotency")
	if err != nil {
		return nil
	}
	return v.(*App)
}

// Interface guards
var _ caddy.App = (*App)(nil)
