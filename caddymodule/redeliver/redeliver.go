// Package redeliver sends a journaled notification (package journal) into
// the idempotency handler that took it, not the site's routing. A route
// guarded by remote_ip for the platform's addresses would refuse a copy
// sent from localhost, and a rewrite or handle_path in front of the
// handler would send the URI the handler saw somewhere else. The handler
// keeps the rest of its chain (the next handler, and the server it runs
// in) from the requests it serves, and a redelivery runs the handler with
// it, the request as the handler saw it: the original request (method,
// URI before any rewrite, remote address) for {http.request.orig_*}, the
// URI the handler saw for everything else.
//
// Until the route has served a request (right after a start), it knows no
// chain: a probe then walks the site's routing with the original request
// in process, its context already cancelled so that no handler on the way
// can send anything anywhere (a proxy fails before it dials), and the
// first idempotency handler it reaches stops it. If that handler is this
// route's, the chain it was handed is the route's own; if it is another
// route's, or none is reached (a matcher refuses the request, the config
// changed), the redelivery is refused and nothing is sent.
//
// It attaches to the handler at two points, both on the handler's Point:
// Seen, the first step of its ServeHTTP, and Redeliver, the route's
// app.Route.Redeliver that the admin API, the console and the CLI
// call. A redelivered request carries a Mark, by which the handler judges
// its signature's time and records its attempt as re-signed.
package redeliver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/journal"
	"github.com/idemgate/idemgate/store"
)

// Point is where recovery attaches to one route's handler: the chain the
// route's requests come with. The zero value is ready.
type Point struct {
	chain atomic.Pointer[chain]
}

// Route is the handler a redelivery enters.
type Route struct {
	// Reg is the route as registered in its config's app: a probe stops
	// at the handler that registered it.
	Reg *app.Route
	// Ctx is the handler's config, whose http servers a probe walks.
	Ctx caddy.Context
	// Handler is the idempotency handler itself.
	Handler caddyhttp.MiddlewareHandler
	// Start opens the route's store (a redelivery may come first).
	Start func() error
	// Resign signs the request afresh with the route's secret; nil: sent
	// with the platform's own signature.
	Resign func(hdr http.Header, body []byte, at time.Time) error
	Now    func() time.Time
}

// chain is the rest of a route's chain, as Caddy hands it to the handler.
type chain struct {
	next caddyhttp.Handler
	srv  *caddyhttp.Server
}

// Seen is the handler's first step on every request. It keeps the chain
// a live request came with (the first one: every request of a config gets
// an equivalent one), or answers a probe: true, r is no notification and
// the handler returns at once.
func (p *Point) Seen(r *http.Request, next caddyhttp.Handler, route *app.Route) (probe bool) {
	if pr, ok := r.Context().Value(probeCtxKey{}).(*prober); ok {
		pr.reach(r, next, route)
		return true
	}
	if p.chain.Load() != nil {
		return false
	}
	if srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok {
		p.chain.CompareAndSwap(nil, &chain{next: next, srv: srv})
	}
	return false
}

type markCtxKey struct{}

// Mark is on a request that a redelivery sent into its handler; only a
// redelivery in process sets it, so no request from outside can claim
// one.
type Mark struct {
	// FirstSeen is when the notification was first received: its
	// signature's timestamp is judged against it, not now, unless it was
	// re-signed.
	FirstSeen time.Time
	Resigned  bool
}

// MarkOf is ctx's redelivery mark, nil for any other request.
func MarkOf(ctx context.Context) *Mark {
	m, _ := ctx.Value(markCtxKey{}).(*Mark)
	return m
}

// Redeliver runs n through rt's handler and its chain, as a copy first
// received at firstSeen (app.Route.Redeliver); before runs once the
// request is ready, just before it is sent.
func (p *Point) Redeliver(ctx context.Context, rt Route, n *store.Notification, firstSeen time.Time, before func() error) (app.Answer, error) {
	if err := rt.Start(); err != nil {
		return app.Answer{}, err
	}
	c := p.chain.Load()
	if c == nil {
		var err error
		if c, err = probeChain(ctx, rt, n); err != nil {
			return app.Answer{}, err
		}
		p.chain.CompareAndSwap(nil, c)
	}
	m := &Mark{FirstSeen: firstSeen}
	req, err := rt.request(ctx, n, m)
	if err != nil {
		return app.Answer{}, err
	}
	if before != nil {
		if err := before(); err != nil {
			return app.Answer{}, err
		}
	}
	rec := newAnswerRecorder()
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, c.srv)
	// The URI the handler saw, after the route's rewrites; the original
	// request (PrepareRequest kept it) has the platform's.
	if n.OrigURI != "" {
		u, err := url.ParseRequestURI(n.URI)
		if err != nil {
			return app.Answer{}, fmt.Errorf("the journaled uri %q: %v", n.URI, err)
		}
		req.URL.Path, req.URL.RawPath, req.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
		req.RequestURI = n.URI
	}
	herr := rt.Handler.ServeHTTP(rec, req, c.next)
	ans := rec.answer()
	ans.Resigned = m.Resigned
	if herr != nil && !rec.wrote {
		// Refused by the handler or an error of the chain, as Caddy would
		// answer it without handle_errors.
		var he caddyhttp.HandlerError
		ans.Status = http.StatusInternalServerError
		if errors.As(herr, &he) && he.StatusCode != 0 {
			ans.Status = he.StatusCode
		}
		ans.Body = []byte(http.StatusText(ans.Status) + ": " + journal.RootError(herr))
		ans.ByGateway = true
	}
	return ans, nil
}

// request is n as the platform sent it, marked m, re-signed where the
// route holds the signing secret.
func (rt Route) request(ctx context.Context, n *store.Notification, m *Mark) (*http.Request, error) {
	ctx = context.WithValue(ctx, markCtxKey{}, m)
	req, err := rebuild(ctx, n, n.Body)
	if err != nil {
		return nil, err
	}
	if rt.Resign != nil {
		if err := rt.Resign(req.Header, n.Body, rt.Now()); err != nil {
			return nil, fmt.Errorf("re-signing the notification: %v", err)
		}
		m.Resigned = true
	}
	return req, nil
}

type probeCtxKey struct{}

// prober is a walk of the site's routing looking for a route's handler:
// the one that registered route in its config's app (not one of another
// config that happens to have the same name).
type prober struct {
	route *app.Route
	mu    sync.Mutex
	// reached names the first idempotency handler the walk reached, and
	// found is its chain when it is the route looked for.
	reached string
	found   *chain
}

// reach stops the probe at the first idempotency handler it reaches,
// route's.
func (p *prober) reach(r *http.Request, next caddyhttp.Handler, route *app.Route) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reached != "" {
		return
	}
	p.reached = route.Name
	if route == p.route {
		if srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok {
			p.found = &chain{next: next, srv: srv}
		}
	}
}

// probeChain finds rt's chain by walking the site's routing with the
// original request (see the package comment).
func probeChain(ctx context.Context, rt Route, n *store.Notification) (*chain, error) {
	name := rt.Reg.Name
	srv := serverOf(rt.Ctx, n.Addr)
	if srv == nil {
		return nil, fmt.Errorf("route %s has served no notification since it started, and no server of the running config listens on %s, where it was received", name, n.Addr)
	}
	p := &prober{route: rt.Reg}
	pctx, cancel := context.WithCancel(context.WithValue(ctx, probeCtxKey{}, p))
	cancel() // nothing on the way may send anything
	req, err := rebuild(pctx, n, nil)
	if err != nil {
		return nil, err
	}
	srv.ServeHTTP(newAnswerRecorder(), req)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.found != nil:
		return p.found, nil
	case p.reached != "":
		return nil, fmt.Errorf("the site's routing now takes %s %s to route %s, not %s, which received it: nothing was sent",
			n.Method, n.ReceivedURI(), p.reached, name)
	}
	return nil, fmt.Errorf("route %s has served no notification since it started, and the site's routing did not take %s %s there "+
		"(a matcher refused it, or the config changed): nothing was sent; the route's next notification (or `idemgate idempotency send`) makes it known",
		name, n.Method, n.ReceivedURI())
}
