package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/catchup"
	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/platforms/guest"
	"github.com/idemgate/idemgate/store"
)

// CatchUpConfig is a route's `catch_up` block (补单, "Missing
// notifications" in the docs): off the request path, the route asks the
// platform's API for payments whose notification never reached the
// backend (package catchup), and recovers them by the platform's resend or
// the merchant's own status-query route — never by forging a
// notification.
//
// Credentials are written as the Caddyfile has them ({env.*}, {file.*})
// and resolved once at provision, like the route's `secret`: the JSON a
// GET /config shows holds the templates, never the values, and no log
// line names them.
type CatchUpConfig struct {
	// API is the platform API's base URL (Alipay: the gateway URL).
	// Default: the platform's production API.
	API string `json:"api,omitempty"`
	// Every is how often the platform is asked (10m), Grace how long its
	// own retries are left to run (15m), Window how far back the gateway
	// looks (72h).
	Every  caddy.Duration `json:"every,omitempty"`
	Grace  caddy.Duration `json:"grace,omitempty"`
	Window caddy.Duration `json:"window,omitempty"`
	// Recover is resend, query_route or alert; QueryRoute the path (or
	// full URL) of the merchant's status-query route for query_route.
	Recover    string `json:"recover,omitempty"`
	QueryRoute string `json:"query_route,omitempty"`

	// Credentials are the block's other subdirectives, by name, as
	// written: the platform's own (Stripe api_key, endpoint; PayPal
	// client_id, secret; Alipay app_private_key; WeChat Pay
	// merchant_private_key, merchant_serial), which its module reads
	// (guest.CatchUpper).
	Credentials map[string]string `json:"credentials,omitempty"`

	// Set by provision and start; never in the JSON.
	api   any // the platform's read API client
	state *catchUpState
}

// catchUpState is a running catch-up: its engine once built, and how to
// stop it.
type catchUpState struct {
	mu     sync.Mutex
	engine *catchup.Engine
	stop   context.CancelFunc
	done   chan struct{}
}

// parseCatchUp reads `catch_up { … }`.
func parseCatchUp(d *caddyfile.Dispenser) (*CatchUpConfig, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	c := new(CatchUpConfig)
	err := cfparse.Block(d, d.Nesting(), "catch_up", func(name string) error {
		switch name {
		case "api":
			return cfparse.OneArg(d, &c.API)
		case "every":
			return cfparse.DurationArg(d, &c.Every)
		case "grace":
			return cfparse.DurationArg(d, &c.Grace)
		case "window":
			return cfparse.DurationArg(d, &c.Window)
		case "recover":
			args := d.RemainingArgs()
			switch {
			case len(args) == 1 && (args[0] == catchup.RecoverResend || args[0] == catchup.RecoverAlert):
				c.Recover = args[0]
			case len(args) == 2 && args[0] == catchup.RecoverQueryRoute:
				c.Recover, c.QueryRoute = args[0], args[1]
			default:
				return d.Errf("catch_up: recover: want resend, query_route <path> or alert")
			}
			return nil
		}
		// A credential: the platform's module says which it takes.
		var v string
		if err := cfparse.OneArg(d, &v); err != nil {
			return err
		}
		if c.Credentials == nil {
			c.Credentials = map[string]string{}
		}
		if _, dup := c.Credentials[name]; dup {
			return d.Errf("catch_up: %s written twice", name)
		}
		c.Credentials[name] = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// provisionCatchUp checks the route's catch_up block and builds the
// platform's read API client from its credentials. It calls nothing: the
// platform is asked only once the config runs (startCatchUp).
func provisionCatchUp(h *Handler, repl *caddy.Replacer) error {
	c := h.CatchUp
	if c == nil {
		return nil
	}
	c.state = new(catchUpState)
	cu, ok := h.mod.(guest.CatchUpper)
	rd, reads := h.mod.(guest.Reader)
	if !ok || !reads || rd.ReadAPI() == nil {
		have := platforms.CatchUp()
		return fmt.Errorf("catch_up: platform %s has no API to ask for missing payments (%s and %s have)", h.Platform,
			strings.Join(have[:len(have)-1], ", "), have[len(have)-1])
	}
	if c.Recover == "" {
		return errors.New("catch_up: needs `recover resend | query_route <path> | alert`")
	}
	switch c.Recover {
	case catchup.RecoverResend:
		if !cu.Resends() {
			return fmt.Errorf("catch_up: recover resend: %s has no resend API (use query_route <path> or alert)", h.Platform)
		}
	case catchup.RecoverQueryRoute:
		if cu.Resends() {
			return fmt.Errorf("catch_up: recover query_route: %s is asked by event, not by order (use resend or alert)", h.Platform)
		}
		if !strings.HasPrefix(c.QueryRoute, "/") && !strings.HasPrefix(c.QueryRoute, "http://") && !strings.HasPrefix(c.QueryRoute, "https://") {
			return fmt.Errorf("catch_up: query_route %q: want a path (/orders/query) or an http(s) URL", c.QueryRoute)
		}
	case catchup.RecoverAlert:
	default:
		return fmt.Errorf("catch_up: recover %q: want resend, query_route <path> or alert", c.Recover)
	}
	cfg := keying.APIConfig{HTTPClient: &http.Client{Timeout: catchup.DefaultCallTimeout}}
	var err error
	if cfg.BaseURL, err = resolveSecret(repl, "catch_up: api", c.API); err != nil {
		return err
	}
	if err := cu.ReadAPIConfig(guestRoute(h, repl), c.Credentials, &cfg); err != nil {
		return err
	}
	if c.Recover == catchup.RecoverResend && cfg.Merchant == "" {
		return errors.New("catch_up: recover resend needs where the platform resends to (Stripe: endpoint we_…; PayPal: the route's webhook_id)")
	}
	api, err := rd.ReadAPI()(cfg)
	if err != nil {
		return fmt.Errorf("catch_up: %v", err)
	}
	c.api = api
	if h.reg != nil {
		h.reg.Query = func(ctx context.Context, q keying.OrderQuery) (store.Missing, error) { return catchUpQuery(ctx, h, q) }
	}
	return nil
}

// startCatchUp runs the route's catch-up engine until watch ends (the
// route's Cleanup). The engine is built on the opened store once the
// query route's address is known: the http app's listeners.
func startCatchUp(h *Handler, watch context.Context) {
	c := h.CatchUp
	if c == nil || c.state == nil {
		return
	}
	ctx, cancel := context.WithCancel(watch)
	st := c.state
	st.mu.Lock()
	st.stop, st.done = cancel, make(chan struct{})
	st.mu.Unlock()
	route, client := c.QueryRoute, (*http.Client)(nil)
	if c.Recover == catchup.RecoverQueryRoute && strings.HasPrefix(route, "/") {
		// A path on this route's own server, whose address is known once
		// it listens: resolved at each call.
		route, client = "http://"+ownServerHost+route, &http.Client{Transport: ownServer{h}}
	}
	e, err := catchup.New(catchup.Config{Scope: h.scope(), Platform: h.Platform, API: c.api, Store: h.store,
		Every: time.Duration(c.Every), Grace: time.Duration(c.Grace), Window: time.Duration(c.Window),
		Recover: c.Recover, QueryRoute: route, HTTPClient: client, Observer: catchUpObserver{h}})
	if err != nil {
		close(st.done)
		h.logger.Error("catch_up not started", zap.Error(err))
		return
	}
	st.mu.Lock()
	st.engine = e
	st.mu.Unlock()
	h.logger.Info("catch_up started", zap.String("recover", c.Recover), zap.String("query_route", c.QueryRoute))
	go func() {
		defer close(st.done)
		e.Run(ctx)
	}()
}

// ownServerHost stands for this route's server in the query route's URL
// until a call resolves it (ownServer).
const ownServerHost = "idemgate.own-server"

// ownServer sends the query route's calls to this route's own server:
// http://<its first listener's address><path>, an unspecified address
// as the loopback.
type ownServer struct{ h *Handler }

func (o ownServer) RoundTrip(r *http.Request) (*http.Response, error) {
	addr, ok := ownListener(o.h)
	if !ok {
		return nil, errors.New("the route's server does not listen yet")
	}
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = addr, addr
	return http.DefaultTransport.RoundTrip(r)
}

// catchUpEngine is the route's running engine, or nil.
func catchUpEngine(h *Handler) *catchup.Engine {
	if h.CatchUp == nil || h.CatchUp.state == nil {
		return nil
	}
	st := h.CatchUp.state
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.engine
}

// ownListener is the address of the server that holds this route, or of
// the only server, once it listens.
func ownListener(h *Handler) (string, bool) {
	a, err := h.ctx.AppIfConfigured("http")
	if err != nil {
		return "", false
	}
	app, ok := a.(*caddyhttp.App)
	if !ok {
		return "", false
	}
	var srv *caddyhttp.Server
	for _, s := range app.Servers {
		if holds(s.Routes, h) {
			srv = s
			break
		}
	}
	if srv == nil && len(app.Servers) == 1 {
		for _, s := range app.Servers {
			srv = s
		}
	}
	if srv == nil || len(srv.Listeners()) == 0 {
		return "", false
	}
	host, port, err := net.SplitHostPort(srv.Listeners()[0].Addr().String())
	if err != nil {
		return "", false
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), true
}

// holds tells whether routes (or their subroutes) hold h.
func holds(routes caddyhttp.RouteList, h *Handler) bool {
	for _, r := range routes {
		for _, mh := range r.Handlers {
			switch v := mh.(type) {
			case *Handler:
				if v == h {
					return true
				}
			case *caddyhttp.Subroute:
				if holds(v.Routes, h) {
					return true
				}
			}
		}
	}
	return false
}

// stopCatchUp ends the engine and waits for it (its watch context ends it
// too; this waits).
func stopCatchUp(h *Handler) {
	if h.CatchUp == nil || h.CatchUp.state == nil {
		return
	}
	st := h.CatchUp.state
	st.mu.Lock()
	stop, done := st.stop, st.done
	st.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// catchUpObserver feeds idemgate_missing_total, the `missing` alert and
// the log from what the engine finds.
type catchUpObserver struct{ h *Handler }

func (o catchUpObserver) Counted(platform, outcome string) {
	// The process's *metrics.Metrics; a test's own Recorder counts none.
	if m, ok := o.h.metrics.(interface {
		Missing(ctx context.Context, platform, outcome string)
	}); ok {
		m.Missing(context.Background(), platform, outcome)
	}
}

func (o catchUpObserver) Alert(m store.Missing) {
	o.h.logger.Warn("missing payment", zap.String("id", m.ID), zap.String("order", m.Order),
		zap.String("merchant_ref", m.MerchantRef), zap.String("action", m.Action),
		zap.String("outcome", m.Outcome), zap.String("reason", m.Reason))
	o.h.obs.emitData("idempotency.missing", map[string]any{"id": m.ID, "order": m.Order, "merchant_ref": m.MerchantRef,
		"amount": m.Amount, "currency": m.Currency, "at": m.At, "action": m.Action, "outcome": m.Outcome,
		"key": m.Key, "reason": m.Reason})
}

func (o catchUpObserver) APIError(platform string, err error) {
	o.h.logger.Warn("catch_up: the platform's API failed; nothing changed", zap.String("platform", platform), zap.Error(err))
	o.h.obs.emitData("idempotency.missing", map[string]any{"outcome": catchup.OutcomeUnknown, "reason": err.Error()})
}

// catchUpQuery asks the platform about one order now (an operator's
// `idemgate idempotency query`): the engine's Query.
func catchUpQuery(ctx context.Context, h *Handler, q keying.OrderQuery) (store.Missing, error) {
	e := catchUpEngine(h)
	if e == nil {
		return store.Missing{}, errors.New("catch_up is not running on this route")
	}
	return e.Query(ctx, q)
}
