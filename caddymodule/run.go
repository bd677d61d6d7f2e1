package caddymodule

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/idemgate/idemgate/caddymodule/redeliver"
)

// A route's run: start opens what the handler needs beside its requests
// (the store, the delivery engine, the watches) when the config runs, and
// Cleanup stops it.

// start opens the store and starts what runs beside the requests: the
// async delivery engine. The config's app calls it when the config runs;
// a request calls it if it comes first (the http app may start before
// the idempotency app), and a handler provisioned outside a config starts
// on its first request.
func (h *Handler) start() error {
	if h.run.started.Load() {
		return nil
	}
	h.run.mu.Lock()
	defer h.run.mu.Unlock()
	if h.run.started.Load() {
		return nil
	}
	if h.run.stopped {
		return fmt.Errorf("the route is stopped")
	}
	ps, err := h.storeRef.Open()
	if err != nil {
		return fmt.Errorf("opening store %s: %v", h.storeConf.id(), err)
	}
	h.store, h.settler = ps.Store, ps.Settler
	if h.async() {
		if err := h.startDeliver(); err != nil {
			return err
		}
	}
	h.startWatch()
	h.run.started.Store(true)
	return nil
}

// startWatch runs what watches the route beside its requests (the
// certificate expiry, the retry scan) until run.stopWatch; run.mu is held.
func (h *Handler) startWatch() {
	var watch context.Context
	watch, h.run.stopWatch = context.WithCancel(context.Background())
	h.keys.watch(watch, h.opts.expiryCheckEvery(), h.opts.now)
	h.retries.watch(watch, h.store, h.opts.retryScanEvery())
	startCatchUp(h, watch)
}

// runState is whether a handler started: start sets store and settler
// before started, so a request that sees started sees them.
type runState struct {
	mu      sync.Mutex
	started atomic.Bool
	stopped bool // Cleanup ran; guarded by mu
	// stopWatch ends the watch (startWatch); set by start.
	stopWatch context.CancelFunc
	// recovery keeps the rest of the route's chain from the requests it
	// serves, which a redelivery enters (package redeliver).
	recovery redeliver.Point
}

// Cleanup stops what start started and drops this handler's reference to
// its store. Caddy calls it after a failed Provision too.
func (h *Handler) Cleanup() error {
	// The queued decision lines are written here, where Caddy's log still
	// writes, at a stop and at a reload (decisionlog.go).
	if h.lines != nil {
		h.lines.close()
	}
	if h.run == nil {
		return nil
	}
	h.run.mu.Lock()
	h.run.stopped = true
	started := h.run.started.Load()
	h.run.mu.Unlock()
	// The engine settles its deliveries in flight while the store is
	// still loaded.
	if started {
		h.run.stopWatch()
		stopCatchUp(h)
	}
	if started && h.async() {
		h.dlv.engine.stop()
	}
	h.obs.close()
	if h.reg != nil {
		h.app.RemoveRoute(h.reg)
	}
	if h.retries != nil {
		_ = unloadLastRetries() // its Destruct cannot fail
	}
	if h.storeRef == nil {
		return nil
	}
	h.app.DropStore(h.storeRef)
	return unloadStore(h.storeConf)
}
