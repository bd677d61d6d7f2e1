// Package admin is the idempotency admin API (admin.api.idempotency), on
// Caddy's admin endpoint: keys and their journal, listings by state,
// purge, redelivery and the async delivery queues. It reads its config's
// stores, routes and engines through the idempotency app
// (app.App), as admin.api.pki reads the pki app. The operations are
// a Service's methods, apart from HTTP; the routes (routeTable) read a
// request, call one and write its answer. The console calls the Service
// in process, the CLI (caddymodule/command) the routes over HTTP,
// decoding the exported views.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI serves the idempotency routes on Caddy's admin endpoint: its
// routeTable, one line a route; docs/operations.md says what each takes
// and answers. <key> is URL-escaped (a "/" in a key as %2F). Every route
// takes ?store=<id> to pick a store when several are loaded.
type AdminAPI struct {
	logger *zap.Logger
	app    *app.App
	svc    *Service       // the operations the routes call
	mux    *http.ServeMux // the route table's (Routes)
}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.idempotency",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Provision takes the logger and the config's idempotency app. Caddy
// provisions the admin endpoint before any app of the config, and the
// handlers load the app themselves (it is never in the config's JSON), so
// ctx.AppIfConfigured would not find it yet: ctx.App loads it here, and
// the config's handlers join the same one.
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	ap, err := ctx.App("idempotency")
	if err != nil {
		return err
	}
	a.app = ap.(*app.App)
	a.svc = NewService(a.app, a.logger)
	return nil
}

// Routes returns the /idempotency/ routes: Caddy's admin server hands
// the whole prefix to serve, which dispatches on the route table.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	a.mux = http.NewServeMux()
	for _, rt := range a.routeTable() {
		a.mux.Handle(rt.pattern, route{a, rt.serve})
	}
	return []caddy.AdminRoute{{
		Pattern: adminPrefix,
		Handler: caddy.AdminHandlerFunc(a.serve),
	}}
}

// routeTable is the admin API: a method and a path each (Go's ServeMux
// patterns), and what serves it. {key...} takes the rest of the path,
// unescaped segment by segment, so a key holding "/" (sent as %2F) stays
// one key; {key} alone, before /redeliver, is one escaped segment.
func (a *AdminAPI) routeTable() []struct {
	pattern string
	serve   func(http.ResponseWriter, *http.Request) error
} {
	return []struct {
		pattern string
		serve   func(http.ResponseWriter, *http.Request) error
	}{
		{"GET /idempotency/stores", a.listStores},
		{"GET /idempotency/keys", a.listKeys},
		{"GET /idempotency/keys/{key...}", a.getKey},
		{"DELETE /idempotency/keys/{key...}", a.deleteKey},
		{"POST /idempotency/keys/{key}/redeliver", a.redeliver},
		{"POST /idempotency/redeliver", a.bulkRedeliver},
		{"GET /idempotency/summary", a.summary},
		{"GET /idempotency/orders/{order...}", a.getOrder},
		{"POST /idempotency/reconcile", a.reconcile},
		{"GET /idempotency/search", a.search},
		{"GET /idempotency/refused", a.refused},
		{"GET /idempotency/missing", a.missing},
		{"POST /idempotency/query", a.query},
		{"GET /idempotency/deliveries", a.listDeliveries},
		{"POST /idempotency/deliveries/{scope}/pause", a.pauseDeliveries},
		{"POST /idempotency/deliveries/{scope}/resume", a.resumeDeliveries},
	}
}

const (
	adminPrefix      = "/idempotency/"
	adminTimeout     = 10 * time.Second
	DefaultPageLimit = 100
	maxPageLimit     = 1000
)

// route is one route's handler in the mux: its errors are written as
// the admin API's JSON errors.
type route struct {
	a     *AdminAPI
	serve func(http.ResponseWriter, *http.Request) error
}

func (rt route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := rt.serve(w, r); err != nil {
		_ = rt.a.writeError(w, err)
	}
}

// serve dispatches a request on the route table. The mux's own answers
// (its plain-text 404 and 405, its redirects to a path with a trailing
// slash) are replaced by the API's JSON errors: 405 names the methods
// the path takes (and sets Allow), 404 the routes to try.
func (a *AdminAPI) serve(w http.ResponseWriter, r *http.Request) error {
	if h, _ := a.mux.Handler(r); isRoute(h) {
		a.mux.ServeHTTP(w, r)
		return nil
	}
	var allowed []string
	for _, m := range []string{http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodPost} {
		probe := *r
		probe.Method = m
		if h, _ := a.mux.Handler(&probe); isRoute(h) {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) == 0 {
		return a.writeError(w, apiError(http.StatusNotFound, fmt.Errorf("no such route: %s (try /idempotency/keys/<key>, /idempotency/keys?state=failed, /idempotency/stores)", r.URL.Path)))
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	return a.writeError(w, apiError(http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", "))))
}

func isRoute(h http.Handler) bool {
	_, ok := h.(route)
	return ok
}

// writeError writes a route's error itself: Caddy's admin server encodes
// errors with HTML escaping, which shows "<key>" as "\u003ckey\u003e".
// An error that is no caddy.APIError is a 500, as Caddy makes it.
func (a *AdminAPI) writeError(w http.ResponseWriter, err error) error {
	var apiErr caddy.APIError
	if !errors.As(err, &apiErr) {
		apiErr = caddy.APIError{Err: err}
	}
	if apiErr.HTTPStatus == 0 {
		apiErr.HTTPStatus = http.StatusInternalServerError
	}
	if apiErr.Message == "" && apiErr.Err != nil {
		apiErr.Message = apiErr.Err.Error()
	}
	// Logged as Caddy's admin server logs the errors it writes.
	a.logger.Error("request error", zap.Error(err), zap.Int("status_code", apiErr.HTTPStatus))
	return writeJSON(w, apiErr.HTTPStatus, apiErr)
}

// StoresView is the answer to GET /idempotency/stores.
type StoresView struct {
	Stores []string `json:"stores"`
}

func (a *AdminAPI) listStores(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, StoresView{Stores: a.svc.Stores()})
}

// RecordView is a record as the admin API shows it: everything but the
// answer's header values and, unless asked for, its body.
type RecordView struct {
	Store string `json:"store"`
	Key   string `json:"key"`
	// Order and Event name the business event of an order the key stands
	// for (GET /idempotency/orders/<order> has the order's page).
	Order string `json:"order"`
	Event string `json:"event,omitempty"`
	State string `json:"state"`
	// Status is the backend's status: the remembered answer's (answered),
	// else the last attempt's (a failed key whose backend answered 502);
	// 0 when none came back (connection refused, a timeout).
	Status      int       `json:"status,omitempty"`
	Copies      int64     `json:"copies"`
	Conflicts   int64     `json:"conflicts"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
	ExpiresAt   time.Time `json:"expires_at"`
	ExpiresIn   string    `json:"expires_in"`
	Fingerprint string    `json:"fingerprint,omitempty"`
	BodyCached  *bool     `json:"body_cached,omitempty"` // answered keys only
	BodySize    *int      `json:"body_size,omitempty"`
	HeaderNames []string  `json:"header_names,omitempty"`
	Body        *[]byte   `json:"body,omitempty"` // base64 in JSON; only with ?body=1

	// The journal.
	Changed      time.Time         `json:"changed"`
	CopyOutcomes store.CopyCounts  `json:"copy_outcomes"`
	AttemptCount int64             `json:"attempt_count"`
	Notification *NotificationView `json:"notification,omitempty"`
	Attempts     []AttemptView     `json:"attempts,omitempty"`

	// Recovery.
	// Route is the handler that took the notification ("<scope>#<n>").
	Route string `json:"route,omitempty"`
	// NextAttempt: an async key retrying, when its next attempt is due.
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
	// PlatformRetries: a failed key's retry budget at its platform.
	PlatformRetries *RetriesView `json:"platform_retries,omitempty"`
	// Signature: what a redelivery carries.
	Signature *SignatureView `json:"signature,omitempty"`
	// Async: the route acked the platform and delivers itself; a dead
	// async key will never be retried by the platform.
	Async bool `json:"async,omitempty"`
	// Amount is the event's own money, as the notification's signed
	// content names it (the key's view and a listing's rows: each
	// verifies the notification again; a refund that names the order's
	// refunded total shows its increase over the order's other refunds).
	Amount *AmountView `json:"amount,omitempty"`
	// MerchantRefs are the merchant's own numbers the notification names
	// (out_trade_no first, then a refund's; Stripe's and PayPal's objects
	// and the merchant's references they carry): what search finds it by.
	MerchantRefs []string `json:"merchant_refs,omitempty"`
}

// AmountView is an amount in major units, an exact decimal string.
type AmountView struct {
	Value    string `json:"value"`
	Currency string `json:"currency"`
	// Refund: the amount is a refund's, money owed back, not received.
	Refund bool `json:"refund,omitempty"`
}

// NotificationView is the journaled request; its body only with ?body=1.
type NotificationView struct {
	Method string `json:"method"`
	// URI is the URI the handler (and so the backend) saw; OrigURI the
	// one the platform sent, when a rewrite changed it.
	URI       string      `json:"uri"`
	OrigURI   string      `json:"orig_uri,omitempty"`
	Remote    string      `json:"remote,omitempty"`
	Host      string      `json:"host,omitempty"`
	Header    http.Header `json:"header,omitempty"`
	BodySize  int64       `json:"body_size"`
	Truncated bool        `json:"truncated,omitempty"`
	Body      *[]byte     `json:"body,omitempty"`
}

type AttemptView struct {
	Start    time.Time `json:"start"`
	Duration string    `json:"duration"`
	Status   int       `json:"status,omitempty"`
	Outcome  string    `json:"outcome"`
	// Error is why it failed, in words: "connection refused",
	// "timeout after 30s", "status 500: …".
	Error    string  `json:"error,omitempty"`
	Resigned bool    `json:"resigned,omitempty"`
	BodySize int     `json:"body_size,omitempty"`
	Body     *[]byte `json:"body,omitempty"`
}

// apiTime is a time as the API shows every one: UTC, to the
// millisecond. The stores keep milliseconds, but a record read back from
// the process that wrote it (memory, embedded) may carry the clock's
// nanoseconds in some fields and not others.
func apiTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}

// setState sets the view's state, as StateOf names it.
func (v *RecordView) setState(ks KeyState) {
	v.State, v.Async, v.NextAttempt = ks.State, ks.Async, nil
	if !ks.NextAttempt.IsZero() {
		t := apiTime(ks.NextAttempt)
		v.NextAttempt = &t
	}
}

func NewRecordView(ap *app.App, storeID string, rec *store.Record, withBody bool) RecordView {
	v := RecordView{
		Store:       storeID,
		Key:         rec.Key,
		State:       string(rec.State),
		Status:      rec.Status,
		Copies:      rec.Copies,
		Conflicts:   rec.Conflicts,
		FirstSeen:   apiTime(rec.FirstSeen),
		LastSeen:    apiTime(rec.LastSeen),
		ExpiresAt:   apiTime(rec.ExpiresAt),
		ExpiresIn:   time.Until(rec.ExpiresAt).Round(time.Second).String(),
		Fingerprint: rec.Fingerprint,

		Changed:      apiTime(rec.Changed),
		CopyOutcomes: rec.CopyOutcomes,
		AttemptCount: rec.AttemptCount,
	}
	v.setState(StateOf(ap, rec))
	v.PlatformRetries = PlatformRetries(ap, rec, v.State)
	v.Signature = signatureOf(ap, rec)
	v.Order, v.Event = store.OrderOf(rec.Key)
	if n := rec.Notification; n != nil {
		v.Route = n.Route
		v.MerchantRefs = n.MerchantRefs
		nv := &NotificationView{Method: n.Method, URI: n.URI, OrigURI: n.OrigURI, Remote: n.Remote, Host: n.Host, Header: n.Header,
			BodySize: n.BodySize, Truncated: n.Truncated()}
		if withBody {
			b := n.Body
			if b == nil {
				b = []byte{}
			}
			nv.Body = &b
		}
		v.Notification = nv
	}
	if v.Status == 0 && len(rec.Attempts) > 0 {
		v.Status = rec.Attempts[len(rec.Attempts)-1].Status
	}
	for _, a := range rec.Attempts {
		av := AttemptView{Start: apiTime(a.Start), Duration: a.Duration.String(), Status: a.Status,
			Outcome: a.Outcome, Error: a.Error, Resigned: a.Resigned, BodySize: len(a.Body)}
		if withBody && len(a.Body) > 0 {
			b := a.Body
			av.Body = &b
		}
		v.Attempts = append(v.Attempts, av)
	}
	if rec.State == store.StateAnswered {
		v.BodyCached = &rec.BodyCached
		if rec.BodyCached {
			n := len(rec.Body)
			v.BodySize = &n
			if withBody {
				b := rec.Body
				if b == nil {
					b = []byte{}
				}
				v.Body = &b
			}
		}
		for name := range rec.Header {
			v.HeaderNames = append(v.HeaderNames, name)
		}
		slices.Sort(v.HeaderNames)
	}
	return v
}

// lookup reads key's record in ps, as admin errors: 404 for no record,
// 503 when the store fails.
func lookup(ctx context.Context, ps *app.Store, key string) (*store.Record, error) {
	rec, err := ps.Lookup(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apiError(http.StatusNotFound, fmt.Errorf("no record for key %q in store %s", key, ps.ID))
	}
	if err != nil {
		return nil, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
	}
	return rec, nil
}

func (a *AdminAPI) getKey(w http.ResponseWriter, r *http.Request) error {
	key, err := keyParam(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	v, err := a.svc.Key(ctx, ps, key, boolParam(r, "body"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

func (a *AdminAPI) deleteKey(w http.ResponseWriter, r *http.Request) error {
	key, err := keyParam(r)
	if err != nil {
		return err
	}
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	out, err := a.svc.Purge(ctx, ps, key, boolParam(r, "force"), r.RemoteAddr)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (a *AdminAPI) listKeys(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	lq := store.ListQuery{State: store.State(q.Get("state")), Scope: q.Get("scope"), Prefix: q.Get("prefix"),
		Cursor: q.Get("cursor"), Limit: DefaultPageLimit}
	switch lq.State {
	case store.StateInFlight, store.StateAnswered, store.StateFailed, store.StateDead:
	default:
		return apiError(http.StatusBadRequest, fmt.Errorf("state must be in_flight, answered, failed or dead, not %q", lq.State))
	}
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return apiError(http.StatusBadRequest, fmt.Errorf("since must be an RFC 3339 time (2026-01-02T15:04:05Z), not %q", s))
		}
		lq.Since = t
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return apiError(http.StatusBadRequest, fmt.Errorf("limit must be a positive number, not %q", s))
		}
		lq.Limit = min(n, maxPageLimit)
	}
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	out, err := a.svc.List(ctx, ps, lq)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// pickStore finds the store named by ?store=, or the only one loaded.
func (a *AdminAPI) pickStore(r *http.Request) (*app.Store, error) {
	return PickStore(a.app, r.URL.Query().Get("store"))
}

// PickStore finds the store named id, or the only one loaded when id is
// "", as an admin error that lists the loaded stores when it cannot.
func PickStore(a *app.App, id string) (*app.Store, error) {
	ps, ids := a.FindStore(id)
	if ps != nil {
		return ps, nil
	}
	switch {
	case len(ids) == 0:
		return nil, apiError(http.StatusNotFound, errors.New("no idempotency store is loaded: the running config has no idempotency handler"))
	case id == "":
		return nil, apiError(http.StatusBadRequest, fmt.Errorf("several stores are loaded; pick one with ?store=<id> (--store): %s", strings.Join(ids, ", ")))
	}
	return nil, apiError(http.StatusNotFound, fmt.Errorf("no store %q is loaded; loaded: %s", id, strings.Join(ids, ", ")))
}

func boolParam(r *http.Request, name string) bool {
	b, _ := strconv.ParseBool(r.URL.Query().Get(name))
	return b
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // keys and messages as they are: <key>, not \u003ckey\u003e
	return enc.Encode(v)
}

func apiError(status int, err error) error {
	return caddy.APIError{HTTPStatus: status, Err: err}
}

// keyParam is the route's {key}, unescaped by the mux.
func keyParam(r *http.Request) (string, error) {
	key := r.PathValue("key")
	if key == "" {
		return "", apiError(http.StatusBadRequest, errors.New("missing key: /idempotency/keys/<key>"))
	}
	return key, nil
}

// Interface guards
var (
	_ caddy.Provisioner = (*AdminAPI)(nil)
	_ caddy.AdminRouter = (*AdminAPI)(nil)
)
