package caddymodule

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/internal/registry"
)

// Redelivery: the journaled notification enters the handler that took it,
// not the site's routing. A route guarded by remote_ip for the platform's
// addresses would refuse a copy sent from localhost, and a rewrite or
// handle_path in front of the handler would send the URI the handler saw
// somewhere else. The handler keeps the rest of its chain (the next
// handler, and the server it runs in) from the requests it serves, and a
// redelivery runs the handler with it, the request as the handler saw it:
// the original request (method, URI before any rewrite, remote address)
// for {http.request.orig_*}, the URI the handler saw for everything else.
//
// Until the route has served a request (right after a start), it knows no
// chain: a probe then walks the site's routing with the original request
// in process, its context already cancelled so that no handler on the way
// can send anything anywhere (a proxy fails before it dials), and the
// first idempotency handler it reaches stops it. If that handler is this
// route's, the chain it was handed is the route's own; if it is another
// route's, or none is reached (a matcher refuses the request, the config
// changed), the redelivery is refused and nothing is sent.

// registryRoute is this route as the operator surfaces see it.
func (h *Handler) registryRoute() *registry.Route {
	n := 1
	for _, o := range h.siblings() {
		if o.scope() == h.scope() {
			n++
		}
	}
	rt := &registry.Route{Scope: h.scope(), Platform: h.platform, TTL: time.Duration(h.TTL), RetryWindow: h.retryWindow(),
		Name: fmt.Sprintf("%s#%d", h.scope(), n), Async: h.async(), Concurrency: 4,
		Resigns: h.resign != nil, Redeliver: h.redeliver, Merchants: h.merchants, Emit: h.emitData}
	if h.async() {
		rt.Concurrency = h.dlv.concurrency
	} else {
		rt.Schedule = h.preset().Schedule
	}
	if h.resign == nil {
		rt.SignedFor = h.signedFor()
	}
	return rt
}

// chainRef is the rest of a route's chain, as Caddy hands it to the
// handler.
type chainRef struct {
	next caddyhttp.Handler
	srv  *caddyhttp.Server
}

// keepChain remembers the chain a live request came with; the first one
// is kept (every request of a config gets an equivalent one).
func (h *Handler) keepChain(r *http.Request, next caddyhttp.Handler) {
	if h.run.chain.Load() != nil {
		return
	}
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok {
		return
	}
	h.run.chain.CompareAndSwap(nil, &chainRef{next: next, srv: srv})
}

type redeliveryCtxKey struct{}

// redelivery marks a request that a redelivery sent into its handler.
type redelivery struct {
	// firstSeen is when the notification was first received: its
	// signature's timestamp is judged against it, not now, unless it was
	// re-signed.
	firstSeen time.Time
	resigned  bool
}

func redeliveryOf(ctx context.Context) *redelivery {
	rd, _ := ctx.Value(redeliveryCtxKey{}).(*redelivery)
	return rd
}

type probeCtxKey struct{}

// probe is a walk of the site's routing looking for a route's handler:
// the one that registered route in its config's app (not one of another
// config that happens to have the same name).
type probe struct {
	route *registry.Route
	mu    sync.Mutex
	// reached names the first idempotency handler the walk reached, and
	// found is its chain when it is the route looked for.
	reached string
	found   *chainRef
}

// answerProbe stops a probe at the first idempotency handler it reaches.
func (h *Handler) answerProbe(r *http.Request, next caddyhttp.Handler, p *probe) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reached != "" {
		return nil
	}
	p.reached = h.reg.Name
	if h.reg == p.route {
		if srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok {
			p.found = &chainRef{next: next, srv: srv}
		}
	}
	return nil
}

// redeliver runs n through this handler and its chain, as a copy first
// received at firstSeen (registry.Route.Redeliver).
func (h *Handler) redeliver(ctx context.Context, n *cache.Notification, firstSeen time.Time, before func() error) (registry.Answer, error) {
	if err := h.start(); err != nil {
		return registry.Answer{}, err
	}
	c := h.run.chain.Load()
	if c == nil {
		var err error
		if c, err = h.probeChain(ctx, n); err != nil {
			return registry.Answer{}, err
		}
		h.run.chain.CompareAndSwap(nil, c)
	}
	rd := &redelivery{firstSeen: firstSeen}
	req, err := h.redeliveryRequest(ctx, n, rd)
	if err != nil {
		return registry.Answer{}, err
	}
	if before != nil {
		if err := before(); err != nil {
			return registry.Answer{}, err
		}
	}
	rec := newAnswerRecorder()
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, c.srv)
	// The URI the handler saw, after the route's rewrites; the original
	// request (PrepareRequest kept it) has the platform's.
	if n.OrigURI != "" {
		u, err := url.ParseRequestURI(n.URI)
		if err != nil {
			return registry.Answer{}, fmt.Errorf("the journaled uri %q: %v", n.URI, err)
		}
		req.URL.Path, req.URL.RawPath, req.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
		req.RequestURI = n.URI
	}
	herr := h.ServeHTTP(rec, req, c.next)
	ans := rec.answer()
	ans.Resigned = rd.resigned
	if herr != nil && !rec.wrote {
		// Refused by the handler or an error of the chain, as Caddy would
		// answer it without handle_errors.
		var he caddyhttp.HandlerError
		ans.Status = http.StatusInternalServerError
		if errors.As(herr, &he) && he.StatusCode != 0 {
			ans.Status = he.StatusCode
		}
		ans.Body = []byte(http.StatusText(ans.Status) + ": " + rootError(herr))
		ans.ByGateway = true
	}
	return ans, nil
}

// redeliveryRequest is n as the platform sent it, re-signed where this
// route holds the signing secret.
func (h *Handler) redeliveryRequest(ctx context.Context, n *cache.Notification, rd *redelivery) (*http.Request, error) {
	ctx = context.WithValue(ctx, redeliveryCtxKey{}, rd)
	req, err := receivedRequest(ctx, n, n.Body)
	if err != nil {
		return nil, err
	}
	if h.resign != nil {
		if err := h.resign(req.Header, n.Body, h.now()); err != nil {
			return nil, fmt.Errorf("re-signing the notification: %v", err)
		}
		rd.resigned = true
	}
	return req, nil
}

// receivedRequest rebuilds the request the platform sent: its method,
// URI, host, headers and address.
func receivedRequest(ctx context.Context, n *cache.Notification, body []byte) (*http.Request, error) {
	uri := n.ReceivedURI()
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, fmt.Errorf("the journaled uri %q: %v", uri, err)
	}
	req := (&http.Request{Method: n.Method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: n.Header.Clone(), Host: n.Host, RequestURI: uri, ContentLength: int64(len(body)),
		Body: io.NopCloser(bytes.NewReader(body)), RemoteAddr: n.Remote}).WithContext(ctx)
	if req.Header == nil {
		req.Header = http.Header{}
	}
	for _, name := range hopHeaders {
		req.Header.Del(name)
	}
	if len(body) == 0 {
		req.Body = http.NoBody
	}
	if req.RemoteAddr == "" {
		req.RemoteAddr = "127.0.0.1:0"
	}
	if n.TLS {
		host, _, err := net.SplitHostPort(n.Host)
		if err != nil {
			host = n.Host
		}
		req.TLS = &tls.ConnectionState{HandshakeComplete: true, ServerName: host}
	}
	if a, err := net.ResolveTCPAddr("tcp", n.Addr); err == nil {
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, net.Addr(a)))
	}
	return req, nil
}

// hopHeaders describe the platform's connection, not the notification.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Content-Length"}

// probeChain finds this route's chain by walking the site's routing with
// the original request (see the top of this file).
func (h *Handler) probeChain(ctx context.Context, n *cache.Notification) (*chainRef, error) {
	srv := h.serverOf(n.Addr)
	if srv == nil {
		return nil, fmt.Errorf("route %s has served no notification since it started, and no server of the running config listens on %s, where it was received", h.reg.Name, n.Addr)
	}
	p := &probe{route: h.reg}
	pctx, cancel := context.WithCancel(context.WithValue(ctx, probeCtxKey{}, p))
	cancel() // nothing on the way may send anything
	req, err := receivedRequest(pctx, n, nil)
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
			n.Method, n.ReceivedURI(), p.reached, h.reg.Name)
	}
	return nil, fmt.Errorf("route %s has served no notification since it started, and the site's routing did not take %s %s there "+
		"(a matcher refused it, or the config changed): nothing was sent; the route's next notification (or `idemgate idempotency send`) makes it known",
		h.reg.Name, n.Method, n.ReceivedURI())
}

// serverOf is the running config's server that listens on addr's port.
func (h *Handler) serverOf(addr string) *caddyhttp.Server {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	app, err := h.ctx.AppIfConfigured("http")
	if err != nil {
		return nil
	}
	for _, srv := range app.(*caddyhttp.App).Servers {
		for _, l := range srv.Listen {
			na, err := caddy.ParseNetworkAddress(l)
			if err != nil {
				continue
			}
			p, _ := strconv.Atoi(port)
			if uint(p) >= na.StartPort && uint(p) <= na.EndPort {
				return srv
			}
		}
	}
	return nil
}

// answerRecorder keeps a redelivery's answer (the first 64KiB of its
// body, as the admin API shows it).
type answerRecorder struct {
	hdr    http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

const maxRedeliveryAnswer = 64 << 10

func newAnswerRecorder() *answerRecorder { return &answerRecorder{hdr: http.Header{}} }

func (a *answerRecorder) Header() http.Header { return a.hdr }

func (a *answerRecorder) WriteHeader(status int) {
	if a.wrote || status < 200 && status >= 100 {
		return
	}
	a.status, a.wrote = status, true
}

func (a *answerRecorder) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	if room := maxRedeliveryAnswer - a.body.Len(); room > 0 {
		a.body.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (a *answerRecorder) answer() registry.Answer {
	if !a.wrote {
		a.status = http.StatusOK // what Caddy answers when no handler wrote
	}
	return registry.Answer{Status: a.status, Header: a.hdr.Clone(), Body: bytes.Clone(a.body.Bytes())}
}
