package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/caddymodule/metrics"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/orders"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/platforms/guest"
	"github.com/idemgate/idemgate/store"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler forwards only the first copy of each payment notification to the
// next handler (usually reverse_proxy to a legacy backend), remembers the
// backend's successful answer and replays it to every later copy.
type Handler struct {
	// PlatformRaw is the route's platform, a guest module in the namespace
	// http.handlers.idempotency.platforms named by its "name" (generic,
	// the default, alipay, wechatpay, wechatpay_v2, stripe, paypal,
	// standard_webhooks, or one built in from outside) with its own
	// settings: {"name": "alipay", "public_key": …}; a bare name
	// ("stripe") is the platform without settings. A preset verifies the
	// platform's signature and knows its key, fingerprint and success rule.
	PlatformRaw json.RawMessage `json:"platform,omitempty" caddy:"namespace=http.handlers.idempotency.platforms inline_key=name"`
	// Platform is the loaded platform's name (set by the Caddyfile adapter
	// and Provision). A handler built in Go may set it instead of
	// PlatformRaw to name a platform without settings.
	Platform string `json:"-"`

	// Key is the idempotency key template (Caddy placeholders plus
	// {idempotency.json.*}, {idempotency.form.*}, {idempotency.xml.*}).
	// Required for generic; presets have a default. A placeholder that
	// renders empty makes the request a 400.
	Key string `json:"key,omitempty"`

	// Fingerprint is the template of what must be equal between copies of
	// one key; "off" disables the check. Default: the preset's fields; for
	// generic, none when the key template reads the body (the key is the
	// notification's identity), else a digest of the body.
	Fingerprint string `json:"fingerprint,omitempty"`

	// Scope is the key namespace: every key is claimed as <scope>:<key>.
	// Default: the platform name, so a generic route never shares a
	// preset's keys unless it names that preset's scope here.
	Scope string `json:"scope,omitempty"`

	// Store says where claims and answers live. Default: embedded.
	Store *StoreConfig `json:"store,omitempty"`

	// LockTTL is how long a claim lives without renewal. It is renewed
	// while the backend works, so it bounds how long a crashed gateway
	// blocks a key, not how long the backend may take. Default: 30s.
	LockTTL caddy.Duration `json:"lock_ttl,omitempty"`

	// TTL is how long successful answers are remembered. It should outlive
	// the platform's retry window. Default: 72h.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// OrderTTL is how long an order remembers which of its business events
	// ran (see store.Order), so a late copy — Alipay's TRADE_FINISHED
	// months after the payment, a payment re-sent after ttl — is never
	// forwarded again. Default: 400 days (past Alipay's and WeChat Pay's
	// 12-month refund windows); 30 days for Stripe, PayPal and Standard
	// Webhooks, whose events are their own and kept 30 days by the
	// platform. Never shorter than TTL.
	OrderTTL caddy.Duration `json:"order_ttl,omitempty"`

	// InFlight is what a copy gets while the first copy is at the backend:
	// "wait" (the default) waits up to InFlightWait for the answer, then
	// answers 409 with Retry-After; "reject" answers 409 at once.
	InFlight string `json:"in_flight,omitempty"`
	// InFlightWait bounds a waiting copy. Default: 10s.
	InFlightWait caddy.Duration `json:"in_flight_wait,omitempty"`

	// OnStoreError is "fail_closed" (the default: 503 with Retry-After, the
	// platform retries later) or "pass" (forward unprotected and log it).
	OnStoreError string `json:"on_store_error,omitempty"`

	// StoreTimeout bounds each store operation. Default: 2s.
	StoreTimeout caddy.Duration `json:"store_timeout,omitempty"`

	// MaxBody bounds the request body read (413 above it). Default: 1MiB.
	MaxBody int64 `json:"max_body,omitempty"`

	// MaxAnswer bounds the answer body remembered for replay. A larger
	// successful answer still marks the key answered; duplicates then get
	// its status and headers without the body. Default: 64KiB.
	MaxAnswer int64 `json:"max_answer,omitempty"`

	// JournalBody bounds the raw notification body kept with each key's
	// record (its journal: notification, copies, attempts), for
	// inspection and redelivery. -1 keeps no notification at all
	// (`journal_body off`). Default: 64KiB.
	JournalBody int64 `json:"journal_body,omitempty"`

	// Deliver is how notifications reach the backend: "sync" (the
	// default; through the next handler) or "async" (acknowledged once
	// queued, delivered by the gateway; see DeliverConfig).
	Deliver *DeliverConfig `json:"deliver,omitempty"`

	// Alert POSTs events (failed, last_retry, dead, ambiguous, conflict, lost_claim)
	// as JSON to an operations endpoint, off the request path.
	Alert *AlertConfig `json:"alert,omitempty"`

	// CatchUp asks the platform for payments that never arrived (catchup.go).
	CatchUp *CatchUpConfig `json:"catch_up,omitempty"`

	// Success overrides the platform's success rule.
	Success *SuccessRule `json:"success,omitempty"`

	// OnDuplicate replaces the replay for duplicates on this route.
	OnDuplicate *DuplicateAction `json:"on_duplicate,omitempty"`

	// VerifyOff runs a preset without signature checks. It is logged at
	// start; use it only behind something else that verifies.
	VerifyOff bool `json:"verify_off,omitempty"`
	// Tolerance is how far a signed timestamp (WeChat Pay v3, Stripe,
	// PayPal, Standard Webhooks) may be from the gateway's clock.
	// Default: 5m.
	Tolerance caddy.Duration `json:"tolerance,omitempty"`

	// LogKeys writes keys in clear in logs; by default only a hash.
	LogKeys bool `json:"log_keys,omitempty"`
	// WarnCopies logs a warning when a key has been seen more than this
	// many times. Default: 5.
	WarnCopies int64 `json:"warn_copies,omitempty"`
	// RouteOrigin is where the Caddyfile wrote this route: its site, its
	// matcher or path, its file and line (origin.go). Set by the adapter,
	// it names the route in provision errors.
	RouteOrigin string `json:"route_origin,omitempty"`

	platform keying.Platform
	// mod is the platform's module, which holds its settings.
	mod guest.Module
	// bodyKeyed: a generic route whose key reads the body, so its
	// default fingerprint is off.
	bodyKeyed bool
	// scopedKey is Key behind the route's scope, "<scope>:<Key>": the
	// template renderKey renders ("" without Key).
	scopedKey string
	storeRef  *app.StoreRef
	storeConf StoreConfig
	// store and settler are set by start, before started is.
	store   store.Store
	settler *store.Settler
	app     *app.App // the config's idempotency app (app.go)
	run     *runState
	keys    *signKeys // the preset's verification keys (signkeys.go)
	success *successJudge
	logger  *zap.Logger
	metrics metrics.Recorder
	warned  *copyWarnings
	obs     *routeObserver // metrics, logs, events (observer.go)
	ctx     caddy.Context
	dlv     *deliveryState // async delivery; nil for sync
	gate    *gate.Gate     // the request path (serve.go)
	reg     *app.Route     // this route in the registry, once provisioned

	// decisions is logger with its lines written after the answer
	// (decisionlog.go), by lines.
	decisions *zap.Logger
	lines     *lineQueue

	// merchants: app_id and mchid as resolved (the registry's Merchants).
	merchants []string
	// resign signs a redelivery afresh (Stripe, Standard Webhooks: the
	// route holds the signing secret); nil where it cannot.
	resign func(hdr http.Header, body []byte, at time.Time) error
	// retries watches the platform's last retries (retries.go).
	retries *retryWatch
	// opts are the clock, the backend's ceiling and the watches'
	// intervals, production's unless injected (options.go).
	opts options
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision sets defaults, reads secrets and takes a reference to the
// store, one named step each. It opens nothing and starts nothing: Caddy
// provisions for `caddy validate` too; the config's App starts the
// handler when the config runs (app.go).
func (h *Handler) Provision(ctx caddy.Context) (err error) {
	defer func() { err = where(h.RouteOrigin, err) }()
	h.logger = ctx.Logger()
	h.lines = newLineQueue()
	h.decisions = h.lines.logger(h.logger)
	h.ctx = ctx
	h.run = new(runState)
	lr, err := loadLastRetries()
	if err != nil {
		return err
	}
	h.retries = &retryWatch{sent: lr}
	h.app = configApp(ctx)
	if err := h.loadPlatform(ctx); err != nil {
		return err
	}
	h.setDefaults()
	// Secrets and paths are resolved once with a fresh replacer: the
	// request's replacer is for per-request templates only.
	repl := caddy.NewReplacer()
	if err := h.provisionPlatform(repl); err != nil {
		return err
	}
	h.keys = newSignKeys(h.platform, h.VerifyOff, h.Platform, h.scope(), h.logger, h.opts.now())
	if err := h.provisionSuccess(); err != nil {
		return err
	}
	if err := h.provisionStore(repl); err != nil {
		return err
	}
	if err := h.provisionScope(); err != nil {
		return err
	}
	if err := h.provisionDeliver(); err != nil {
		return err
	}
	var al *alerter
	if h.Alert != nil {
		if err := h.Alert.validate(); err != nil {
			return err
		}
		al = newAlerter(h.Alert, h.logger)
	}
	// The http app loads the events app before its handlers; a context
	// without a config (unit tests) has none, and events are then off.
	var events *caddyevents.App
	if ev, err := ctx.AppIfConfigured("events"); err == nil {
		events = ev.(*caddyevents.App)
	}
	h.metrics = metrics.Load(ctx)
	h.obs = newObserver(h, al, events)
	w := h.retries
	w.scope, w.window, w.storeTimeout, w.app, w.obs, w.logger = h.scope(), h.retryWindow(), time.Duration(h.StoreTimeout), h.app, h.obs, h.logger
	if !h.async() {
		w.sched = h.preset().Schedule
	}
	h.warned = newCopyWarnings()
	h.provisionGate()
	h.reg = h.registryRoute()
	if err := provisionCatchUp(h, repl); err != nil {
		return err
	}
	h.app.AddRoute(h.reg)
	h.logger.Info("idempotency handler ready", append([]zap.Field{
		zap.String("platform", h.Platform),
		zap.String("scope", h.scope()),
		zap.String("store", h.storeConf.id()),
		zap.Duration("ttl", time.Duration(h.TTL)),
		zap.Duration("order_ttl", time.Duration(h.OrderTTL)),
		zap.Duration("lock_ttl", time.Duration(h.LockTTL))},
		append(h.dlv.fields(), h.keys.fields()...)...)...)
	h.app.Join(h)
	return nil
}

// preset is the route's platform as the registry describes it; an empty
// one for a name it does not know (Provision refuses that name).
func (h *Handler) preset() *keying.Preset {
	if h.mod != nil {
		return h.mod.Preset()
	}
	if p := platforms.Lookup(h.Platform); p != nil {
		return p
	}
	return &keying.Preset{Name: h.Platform}
}

func (h *Handler) setDefaults() {
	if h.Platform == "" {
		h.Platform = platforms.Default
	}
	if h.LockTTL == 0 {
		h.LockTTL = caddy.Duration(30 * time.Second)
	}
	if h.TTL == 0 {
		h.TTL = caddy.Duration(defaultTTL)
	}
	if h.OrderTTL == 0 {
		h.OrderTTL = caddy.Duration(orders.DefaultTTL(h.preset(), time.Duration(h.TTL)))
	}
	if h.InFlight == "" {
		h.InFlight = "wait"
	}
	if h.InFlightWait == 0 {
		h.InFlightWait = caddy.Duration(10 * time.Second)
	}
	if h.OnStoreError == "" {
		h.OnStoreError = "fail_closed"
	}
	if h.StoreTimeout == 0 {
		h.StoreTimeout = caddy.Duration(2 * time.Second)
	}
	if h.MaxBody == 0 {
		h.MaxBody = 1 << 20
	}
	if h.MaxAnswer == 0 {
		h.MaxAnswer = 64 << 10
	}
	if h.JournalBody == 0 {
		h.JournalBody = 64 << 10
	}
	if h.WarnCopies == 0 {
		h.WarnCopies = 5
	}
}

// loadPlatform loads the route's platform module (generic when the route
// names none), as reverse_proxy loads its transport.
func (h *Handler) loadPlatform(ctx caddy.Context) error {
	name := h.Platform
	// A bare name ("platform": "stripe") is the platform without settings.
	if len(h.PlatformRaw) > 0 && h.PlatformRaw[0] == '"' {
		if err := json.Unmarshal(h.PlatformRaw, &name); err != nil {
			return fmt.Errorf("platform: %v", err)
		}
		h.PlatformRaw = nil
	}
	if h.PlatformRaw == nil {
		if name == "" {
			name = platforms.Default
		}
		h.PlatformRaw = caddyconfig.JSONModuleObject(struct{}{}, "name", name, nil)
	}
	m, err := ctx.LoadModule(h, "PlatformRaw")
	if err != nil {
		return fmt.Errorf("loading platform: %v", err)
	}
	mod, ok := m.(guest.Module)
	if !ok {
		return fmt.Errorf("platform module %T is not a platform", m)
	}
	h.mod, h.Platform = mod, mod.CaddyModule().ID.Name()
	return nil
}

// guestRoute is what h gives its platform module: the route's settings
// every platform shares and its readers of secrets and files.
func guestRoute(h *Handler, repl *caddy.Replacer) guest.Route {
	return guest.Route{
		NoVerify:  h.VerifyOff,
		Tolerance: time.Duration(h.Tolerance),
		Secret:    func(field, tmpl string) (string, error) { return resolveSecret(repl, field, tmpl) },
		Resolve:   func(tmpl string) string { return repl.ReplaceKnown(tmpl, "") },
		PEM:       func(field, tmpl string) ([]byte, error) { return readPEM(repl, field, tmpl) },
		Remember:  rememberIn(h),
	}
}

// provisionPlatform has the platform module read its secrets and build
// the route's check.
func (h *Handler) provisionPlatform(repl *caddy.Replacer) error {
	route := guestRoute(h, repl)
	h.bodyKeyed = h.preset().KeyRequired && keyReadsBody(h.Key)
	if h.Key != "" {
		h.scopedKey = h.scope() + ":" + h.Key
	}
	p, err := h.mod.Build(route)
	if err != nil {
		return err // "<preset>: <what>" already
	}
	h.platform = p
	if pin, ok := h.mod.(guest.Pinner); ok {
		h.merchants = pin.Merchants()
	}
	if rs, ok := h.mod.(guest.Resigner); ok {
		h.resign = rs.Resigner()
	}
	if h.VerifyOff {
		h.logger.Warn("signature verification is OFF for this route: forged notifications will be forwarded",
			zap.String("platform", h.Platform))
	}
	if w := p.RetryWindow(); w > time.Duration(h.TTL) {
		h.logger.Warn("ttl is shorter than the platform's retry window: late retries will reach the backend again",
			zap.String("platform", h.Platform), zap.Duration("ttl", time.Duration(h.TTL)), zap.Duration("retry_window", w))
	}
	return nil
}

// holdsSecret tells whether a route's platform settings hold the secret
// that opens its encrypted part.
func holdsSecret(mod guest.Module) bool {
	s, ok := mod.(guest.SecretHolder)
	return ok && s.HasSecret()
}

// provisionStore resolves the store configuration (a copy: the handler's
// own config keeps its placeholders), checks it offline and takes a
// reference to the shared store, which start opens.
func (h *Handler) provisionStore(repl *caddy.Replacer) error {
	sc := StoreConfig{Type: "embedded"}
	if h.Store != nil {
		sc = *h.Store
	}
	sc, err := sc.resolve(repl)
	if err != nil {
		return fmt.Errorf("loading store: %v", err)
	}
	if err := sc.check(); err != nil {
		return fmt.Errorf("loading store: %v", err)
	}
	ref, err := loadStore(sc, time.Duration(h.StoreTimeout), h.logger)
	if err != nil {
		return fmt.Errorf("loading store: %v", err)
	}
	h.storeRef, h.storeConf = ref, sc
	h.app.UseStore(ref)
	return nil
}

// Validate checks the configuration.
func (h *Handler) Validate() (err error) {
	defer func() { err = where(h.RouteOrigin, err) }()
	if err := h.checkPlaceholders(); err != nil {
		return err
	}
	if d := h.OnDuplicate; d != nil && d.Redirect != "" {
		if _, err := redirectOrigin(d.Redirect); err != nil {
			return err
		}
	}
	if h.preset().KeyRequired && h.Key == "" {
		return fmt.Errorf("%s: needs a key template", h.Platform)
	}
	if h.Scope != "" {
		if err := validScope(h.Scope); err != nil {
			return err
		}
	}
	if h.InFlight != "wait" && h.InFlight != "reject" {
		return fmt.Errorf("in_flight must be wait or reject, not %q", h.InFlight)
	}
	if h.OnStoreError != "fail_closed" && h.OnStoreError != "pass" {
		return fmt.Errorf("on_store_error must be fail_closed or pass, not %q", h.OnStoreError)
	}
	if h.MaxBody < 0 || h.MaxAnswer < 0 {
		return fmt.Errorf("max_body and max_answer must be positive")
	}
	if err := orders.CheckTTL(time.Duration(h.OrderTTL), time.Duration(h.TTL)); err != nil {
		return err
	}
	if h.LockTTL < caddy.Duration(time.Second) {
		return fmt.Errorf("lock_ttl must be at least 1s (it is renewed at a third of its length)")
	}
	if d := h.OnDuplicate; d != nil && d.Redirect == "" && (d.Status < 100 || d.Status > 999) {
		return fmt.Errorf("on_duplicate needs a redirect or a status")
	}
	return nil
}

// scope is the namespace of this route's keys.
// It is Scope when written, else the platform name (see scope.go).
func (h *Handler) scope() string {
	if h.Scope != "" {
		return h.Scope
	}
	return h.Platform
}

// defaultTTL is how long answers are remembered unless ttl says: longer
// than every preset's retry window but Adyen's.
const defaultTTL = app.DefaultTTL

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
