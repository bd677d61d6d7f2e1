package catchup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// What a route does with a missing payment (Config.Recover).
const (
	// RecoverResend asks an EventLister platform to send the event again.
	RecoverResend = "resend"
	// RecoverQueryRoute POSTs the order's numbers to the merchant's own
	// status-query route, through the gate (Config.QueryRoute).
	RecoverQueryRoute = "query_route"
	// RecoverAlert only records and alerts.
	RecoverAlert = "alert"
)

// Outcomes of a missing item (store.Missing.Outcome), the metric's
// outcome label.
const (
	OutcomeRecovered = "recovered" // its business event ran (Key)
	OutcomeMissing   = "missing"   // found missing; recovery asked or failed
	OutcomeAlertOnly = "alert only"
	OutcomeNotPaid   = "not paid" // the platform's verified answer: not paid (yet)
	OutcomeUnknown   = "unknown"  // nothing concluded: Reason says why
)

// Defaults of a catch_up block.
const (
	DefaultEvery          = 10 * time.Minute
	DefaultGrace          = 15 * time.Minute
	DefaultWindow         = 72 * time.Hour
	DefaultCallsPerMinute = 60
	DefaultCallTimeout    = 10 * time.Second
)

// backoff is the wait before each attempt: the first at Grace after the
// payment, then 1h, 6h and 24h after the one before, 24h from then on.
var backoff = []time.Duration{0, time.Hour, 6 * time.Hour, 24 * time.Hour}

// Config is one route's catch_up block.
type Config struct {
	// Scope is the route's key namespace; Platform its preset's name.
	Scope, Platform string
	// API is the platform's read API: a keying.EventLister or a
	// keying.OrderQuerier.
	API any
	// Store is the route's store; it must offer the listings, the order
	// state, leases and the missing list (every store of package store
	// does).
	Store store.Store
	// Every is how often the platform is asked (default 10m); Grace how
	// long the platform's own retries are left to run (15m); Window how
	// far back the engine looks and how long it keeps trying (72h).
	Every, Grace, Window time.Duration
	// Recover is RecoverResend (EventLister only), RecoverQueryRoute
	// (OrderQuerier only, with QueryRoute) or RecoverAlert.
	Recover string
	// QueryRoute is the URL of the merchant's status-query route, as the
	// gate serves it: POSTed JSON with the order's numbers as the platform
	// names them (queryRouteBody).
	QueryRoute string
	// CallsPerMinute caps the calls to the platform's API across the
	// engine (default 60); CallTimeout bounds each outbound call (10s).
	CallsPerMinute int
	CallTimeout    time.Duration
	// HTTPClient makes the query route's calls (nil: a plain client; the
	// call is bounded by CallTimeout either way).
	HTTPClient *http.Client
	// Observer is told what the engine finds (nil: nothing is).
	Observer Observer
	// Now is the engine's clock (nil: time.Now).
	Now func() time.Time
	// Owner is this instance's lease token (default random).
	Owner string
}

// Observer is told what the engine finds: the app wires the
// idemgate_missing_total metric and the `missing` alert to it. Calls
// come from the engine's goroutine and must not block for long.
type Observer interface {
	// Counted: an item entered outcome (idemgate_missing_total by
	// platform and outcome).
	Counted(platform, outcome string)
	// Alert: an item the operator should see (a `missing` alert).
	Alert(m store.Missing)
	// APIError: the platform's API failed or refused a call; nothing was
	// changed because of it.
	APIError(platform string, err error)
}

// NopObserver is told nothing.
type NopObserver struct{}

func (NopObserver) Counted(string, string) {}
func (NopObserver) Alert(store.Missing)    {}
func (NopObserver) APIError(string, error) {}

// Engine catches up one route. Its methods are safe for concurrent use.
type Engine struct {
	cfg     Config
	lister  keying.EventLister
	querier keying.OrderQuerier
	store   store.Store
	list    store.Lister
	orders  store.OrderBook
	lease   store.Leaser
	missing store.MissingLog
	obs     Observer
	http    *http.Client

	mu    sync.Mutex
	calls []time.Time // the platform calls of the last minute
}

// ErrCapped: the engine made its CallsPerMinute calls this minute.
var ErrCapped = errors.New("catchup: the per-minute cap on the platform's API calls is reached")

// New checks cfg, fills its defaults and builds its engine.
func New(cfg Config) (*Engine, error) {
	e := &Engine{cfg: cfg}
	c := &e.cfg
	if c.Scope == "" || c.Store == nil {
		return nil, errors.New("catchup: a scope and a store are needed")
	}
	c.Every = or(c.Every, DefaultEvery)
	c.Grace = or(c.Grace, DefaultGrace)
	c.Window = or(c.Window, DefaultWindow)
	c.CallTimeout = or(c.CallTimeout, DefaultCallTimeout)
	if c.CallsPerMinute <= 0 {
		c.CallsPerMinute = DefaultCallsPerMinute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Owner == "" {
		b := make([]byte, 16)
		rand.Read(b)
		c.Owner = hex.EncodeToString(b)
	}
	if e.obs = c.Observer; e.obs == nil {
		e.obs = NopObserver{}
	}
	if e.http = c.HTTPClient; e.http == nil {
		e.http = &http.Client{}
	}
	switch api := c.API.(type) {
	case keying.EventLister:
		e.lister = api
	case keying.OrderQuerier:
		e.querier = api
	default:
		return nil, fmt.Errorf("catchup: platform %q has no read API (%T)", c.Platform, c.API)
	}
	switch c.Recover {
	case RecoverResend:
		if e.lister == nil {
			return nil, fmt.Errorf("catchup: recover resend: platform %q has no resend API (use query_route or alert)", c.Platform)
		}
	case RecoverQueryRoute:
		if e.querier == nil {
			return nil, fmt.Errorf("catchup: recover query_route: platform %q is not queried by order (use resend or alert)", c.Platform)
		}
		if c.QueryRoute == "" {
			return nil, errors.New("catchup: recover query_route needs the route's URL")
		}
	case RecoverAlert:
	default:
		return nil, fmt.Errorf("catchup: recover %q: want resend, query_route or alert", c.Recover)
	}
	var err error
	if e.list, err = store.As[store.Lister](c.Store, "listings"); err != nil {
		return nil, err
	}
	if e.orders, err = store.As[store.OrderBook](c.Store, "order state"); err != nil {
		return nil, err
	}
	if e.lease, err = store.As[store.Leaser](c.Store, "leases"); err != nil {
		return nil, err
	}
	if e.missing, err = store.As[store.MissingLog](c.Store, "missing list"); err != nil {
		return nil, err
	}
	e.store = c.Store
	return e, nil
}

func or(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Run ticks every Config.Every until ctx ends. Errors of a pass are
// reported to the Observer (the API's) or left for the next pass (the
// store's: nothing changed).
func (e *Engine) Run(ctx context.Context) {
	t := time.NewTicker(e.cfg.Every)
	defer t.Stop()
	for {
		e.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick runs one pass if this instance holds the route's lease (taken or
// renewed for Every, so the fleet's other instances skip this period):
// ran says whether it did.
func (e *Engine) Tick(ctx context.Context) (ran bool, err error) {
	held, err := e.lease.Lease(ctx, "catchup:"+e.cfg.Scope, e.cfg.Owner, e.cfg.Every)
	if err != nil || !held {
		return false, err
	}
	if e.lister != nil {
		return true, e.events(ctx)
	}
	return true, e.orderPass(ctx)
}

// take counts one call to the platform against the per-minute cap.
func (e *Engine) take() bool {
	now := e.cfg.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	i := 0
	for i < len(e.calls) && !e.calls[i].After(now.Add(-time.Minute)) {
		i++
	}
	e.calls = e.calls[i:]
	if len(e.calls) >= e.cfg.CallsPerMinute {
		return false
	}
	e.calls = append(e.calls, now)
	return true
}

// call runs one platform call under the cap and the per-call timeout.
func (e *Engine) call(ctx context.Context, f func(ctx context.Context) error) error {
	if !e.take() {
		return ErrCapped
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
	defer cancel()
	return f(ctx)
}

// due says whether an item (nil: new) is to be acted on now.
func due(m *store.Missing, now time.Time) bool {
	return m == nil || (!m.NextAt.IsZero() && !now.Before(m.NextAt))
}

// next is when an item acted on for the n-th time (1…) is acted on
// again, zero past the window's end.
func next(n int, now, end time.Time) time.Time {
	t := now.Add(backoff[min(n, len(backoff)-1)])
	if t.After(end) {
		return time.Time{}
	}
	return t
}

// put keeps m, telling the Observer of a new outcome.
func (e *Engine) put(ctx context.Context, old *store.Missing, m store.Missing) error {
	m.Updated = e.cfg.Now()
	if old == nil {
		m.Found = m.Updated
	}
	if err := e.missing.PutMissing(ctx, m); err != nil {
		return err
	}
	if old == nil || old.Outcome != m.Outcome {
		e.obs.Counted(m.Platform, m.Outcome)
		if m.Outcome != OutcomeRecovered && m.Outcome != OutcomeNotPaid {
			e.obs.Alert(m)
		}
	}
	return nil
}

// item reads the missing item (scope, id): nil when there is none.
func (e *Engine) item(ctx context.Context, id string) (*store.Missing, error) {
	m, err := e.missing.MissingItem(ctx, e.cfg.Scope, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return m, err
}

// ran returns the key of order's event that ran (event "" for a key that
// is its own event), "" if it has not.
func (e *Engine) ran(ctx context.Context, order, event string) (string, error) {
	o, err := e.orders.Order(ctx, order)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	for _, ev := range o.Events {
		if ev.Event == event {
			return ev.Key, nil
		}
	}
	return "", nil
}

// recovered marks an item whose event ran since, final.
func (e *Engine) recovered(ctx context.Context, m *store.Missing, key string) error {
	if m == nil || m.Outcome == OutcomeRecovered {
		return nil
	}
	n := *m
	n.Outcome, n.Key, n.Reason, n.NextAt = OutcomeRecovered, key, "", time.Time{}
	return e.put(ctx, m, n)
}

// apiReason is why nothing was concluded from a failed API call; the
// Observer hears of the API's own failures.
func (e *Engine) apiReason(err error) string {
	switch {
	case errors.Is(err, ErrCapped):
		return "per-minute cap reached"
	case errors.Is(err, keying.ErrUnverified):
		return "response failed verification"
	case errors.Is(err, keying.ErrAPIRefused):
		e.obs.APIError(e.cfg.Platform, err)
		return "the platform's API refused the call"
	case errors.Is(err, context.DeadlineExceeded):
		e.obs.APIError(e.cfg.Platform, err)
		return "the platform's API timed out"
	}
	e.obs.APIError(e.cfg.Platform, err)
	return "the platform's API is down"
}
