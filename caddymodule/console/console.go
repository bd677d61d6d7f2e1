// Package console is the operator's console (http.handlers.idempotency_console
// and its Caddyfile directive): server-rendered pages from embedded
// templates (templates/), usable without JavaScript, that show requests by
// outcome, keys in flight, failed and dead notifications, the async
// queues and one key's journal, with redeliver, purge and pause/resume
// behind cross-site checks. It reads its config's idempotency app
// (app.App, reached through ctx.App) and acts
// through the admin API's own code (caddymodule/admin), so the rules stay
// in one place.
package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/store"
)

func init() {
	caddy.RegisterModule(Console{})
	httpcaddyfile.RegisterHandlerDirective("idempotency_console", parseConsoleCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("idempotency_console", httpcaddyfile.Before, "reverse_proxy")
}

// Console is the operator's page: recent requests by outcome, keys in
// flight, failed and dead notifications, and one key's journal with
// redeliver and purge. Mount it in a route the operator protects
// (basic_auth, remote_ip, a site bound to localhost), under any path:
//
//	route /console/* {
//		basic_auth { ops <hash> }
//		idempotency_console
//	}
//
// It is not offered on Caddy's admin endpoint: that endpoint answers 403 to
// a browser's navigation (its Origin and Sec-Fetch checks run before any
// module), so only a console in a site is reachable from a browser.
type Console struct {
	// Refresh is how often the overview reloads itself (with JavaScript
	// on); a negative value (Caddyfile: refresh off) turns it off.
	// Default: 15s.
	Refresh caddy.Duration `json:"refresh,omitempty"`

	// ShowDecrypted shows a WeChat Pay notification's decrypted resource
	// (the payer, the amount) on its key page. Off by default: like
	// log_keys, it puts payment details in front of whoever reaches the
	// console.
	ShowDecrypted bool `json:"show_decrypted,omitempty"`

	// Hosts are more names the console answers for (a Host header,
	// without its port; wildcards as Caddy's host matcher has them),
	// besides the hosts its site names, or loopback on a site that names
	// none. A request for any other host is refused (403) before any page
	// or token is served: DNS rebinding (hosts.go).
	Hosts []string `json:"hosts,omitempty"`

	hosts caddyhttp.MatchHost
	guard *hostGuard // set in Provision

	logger *zap.Logger
	app    *app.App // the config's idempotency app
	data   consoleData
}

// CaddyModule returns the Caddy module information.
func (Console) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency_console",
		New: func() caddy.Module { return new(Console) },
	}
}

// Provision takes the logger and the config's idempotency app, which the
// config's idempotency handlers share (they load it the same way).
func (c *Console) Provision(ctx caddy.Context) error {
	c.logger = ctx.Logger()
	if c.Refresh == 0 {
		c.Refresh = caddy.Duration(15 * time.Second)
	}
	a, err := ctx.App("idempotency")
	if err != nil {
		return err
	}
	c.app = a.(*app.App)
	c.guard = new(hostGuard)
	if len(c.Hosts) > 0 {
		c.hosts = append(caddyhttp.MatchHost(nil), c.Hosts...)
		if err := c.hosts.Provision(ctx); err != nil {
			return fmt.Errorf("hosts: %v", err)
		}
	}
	if c.data == nil {
		c.data = appData{c.app}
	}
	c.warnExposure(ctx)
	return nil
}

// consoleTimeout bounds one page's store reads.
const consoleTimeout = 10 * time.Second

// ServeHTTP serves the console's pages. The pages it knows are the last
// path segment (key, purge, redeliver; anything else is the overview), and
// everything before it is the mount point, so links work under any prefix,
// handle_path's stripping included.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if !c.hostAllowed(r) {
		if c.logger != nil {
			c.logger.Warn("console request for a host it does not serve refused (DNS rebinding?)",
				zap.String("host", r.Host), zap.String("remote", r.RemoteAddr))
		}
		refuseHost(w, r)
		return nil
	}
	base, page := consolePaths(r)
	nonce := newNonce()
	h := w.Header()
	// Nothing but this page's own nonce'd script and style runs; forms
	// post only here; no framing (clickjacking of the action buttons).
	h.Set("Content-Security-Policy", "default-src 'none'; img-src 'self' data:; style-src 'nonce-"+nonce+
		"'; script-src 'nonce-"+nonce+"'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // no-referrer would make Chromium send "Origin: null" with the forms
	h.Set("Cache-Control", "no-store")

	v := &consolePage{Base: base, Nonce: nonce, CSRF: consoleToken, Now: time.Now()}
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	var err error
	switch page {
	case "key":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return c.render(w, http.StatusMethodNotAllowed, v.fail("GET only"))
		}
		err = c.keyPage(ctx, r, v)
	case "order":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return c.render(w, http.StatusMethodNotAllowed, v.fail("GET only"))
		}
		err = c.orderPage(ctx, r, v)
		v.CatchUp = c.queryScopes()
	case "purge":
		if r.Method == http.MethodPost {
			return c.act(ctx, w, r, v, c.purge)
		}
		err = c.confirmPurge(ctx, r, v)
	case "redeliver":
		if r.Method != http.MethodPost {
			return c.render(w, http.StatusMethodNotAllowed, v.fail("redeliver is a POST from the key's page"))
		}
		return c.act(ctx, w, r, v, c.redeliver)
	case "search":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return c.render(w, http.StatusMethodNotAllowed, v.fail("GET only"))
		}
		err = c.searchPage(ctx, r, v)
		v.CatchUp = c.queryScopes()
	case "reconcile":
		if r.Method == http.MethodPost {
			return c.reconcile(w, r, v)
		}
		c.reconcileForm(r, v)
	case "redeliver-all":
		if r.Method == http.MethodPost {
			return c.act(ctx, w, r, v, c.bulkRedeliver)
		}
		err = c.confirmBulk(ctx, r, v)
	case "refused":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return c.render(w, http.StatusMethodNotAllowed, v.fail("GET only"))
		}
		err = c.refusedPage(ctx, r, v)
	case "missing":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return c.render(w, http.StatusMethodNotAllowed, v.fail("GET only"))
		}
		err = c.missingPage(ctx, r, v)
	case "query":
		if r.Method != http.MethodPost {
			return c.render(w, http.StatusMethodNotAllowed, v.fail("query is a POST from the missing or an order's page"))
		}
		return c.act(ctx, w, r, v, c.query)
	case "deliveries":
		if r.Method != http.MethodPost {
			return c.render(w, http.StatusMethodNotAllowed, v.fail("pause and resume are POSTs from the overview"))
		}
		return c.act(ctx, w, r, v, c.pause)
	default:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return c.render(w, http.StatusMethodNotAllowed, v.fail("GET only"))
		}
		err = c.overview(ctx, r, v)
	}
	status := http.StatusOK
	if err != nil {
		status = errStatus(err)
		v.fail(err.Error())
	}
	return c.render(w, status, v)
}

// consolePaths splits the request's original path (before any
// handle_path stripping) into the console's mount point, ending in "/",
// and the page.
func consolePaths(r *http.Request) (base, page string) {
	p := r.URL.Path
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		p = orig.URL.Path
	}
	dir, last := p, ""
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		dir, last = p[:i+1], p[i+1:]
	}
	switch last {
	case "key", "order", "purge", "redeliver", "redeliver-all", "deliveries", "reconcile", "refused", "search", "missing", "query":
		base, page = dir, last
	case "":
		base = dir
	default:
		// The mount point itself without its trailing slash (/console).
		base = p + "/"
	}
	// Links are absolute paths: never "//host/…", which a browser reads
	// as another site.
	base = "/" + strings.TrimLeft(base, "/")
	return (&url.URL{Path: base}).EscapedPath(), page
}

// act runs a POST action after the cross-site checks.
func (c *Console) act(ctx context.Context, w http.ResponseWriter, r *http.Request, v *consolePage,
	do func(context.Context, http.ResponseWriter, *http.Request, *consolePage) error,
) error {
	if err := checkSameOrigin(r); err != nil {
		if c.logger != nil {
			c.logger.Warn("console action refused", zap.Error(err), zap.String("remote", r.RemoteAddr))
		}
		return c.render(w, http.StatusForbidden, v.fail(err.Error()))
	}
	if err := do(ctx, w, r, v); err != nil {
		return c.render(w, errStatus(err), v.fail(err.Error()))
	}
	return nil
}

// overviewLimit bounds each list on the overview.
const overviewLimit = 50

func (c *Console) overview(ctx context.Context, r *http.Request, v *consolePage) error {
	v.Page = "overview"
	v.Title = "Overview"
	if c.Refresh > 0 {
		v.RefreshMS = time.Duration(c.Refresh).Milliseconds()
	}
	q := r.URL.Query()
	v.Prefix, v.Scope = q.Get("prefix"), q.Get("scope")
	v.Note = noteText(q)
	v.Chart = newChart(c.app.Counts().Last())
	v.Stores = c.data.storeIDs()
	v.Scopes = c.app.ScopeNames()
	var errs []string
	// The money at stake comes first: what the failed and dead
	// notifications carry, per currency.
	v.Stakes, errs = stakes(ctx, c.app, v.Stores, v.Scope)
	v.Delivery = "synchronous delivery: each notification goes to the backend on the platform's own request, so there is no queue"
	if queues, err := c.service().QueueViews(ctx); err != nil {
		errs = append(errs, "delivery queues: "+err.Error())
	} else if len(queues) > 0 {
		v.Queues = queues
		v.Delivery = "asynchronous delivery: notifications are acknowledged once queued and delivered by the gateway"
	}
	states := []store.State{store.StateInFlight, store.StateFailed, store.StateDead}
	if v.Prefix != "" {
		states = append(states, store.StateAnswered)
	}
	for _, st := range states {
		var rows []keyRow
		for _, id := range v.Stores {
			recs, err := c.data.list(ctx, id, store.ListQuery{State: st, Prefix: v.Prefix, Scope: v.Scope, Limit: overviewLimit})
			if err != nil {
				errs = append(errs, fmt.Sprintf("store %s: listing %s keys: %v", id, st, err))
				continue
			}
			for _, rec := range recs {
				rows = append(rows, newKeyRow(c.app, id, rec, c.data.stateOf(rec), v.Now))
			}
		}
		switch st {
		case store.StateInFlight:
			v.InFlight = rows
		case store.StateFailed:
			v.Failed = rows
		case store.StateDead:
			v.Dead = rows
		case store.StateAnswered:
			v.Answered = rows
		}
	}
	v.Errors = errs
	return nil
}

func (c *Console) keyPage(ctx context.Context, r *http.Request, v *consolePage) error {
	q := r.URL.Query()
	storeID, key := q.Get("store"), q.Get("k")
	v.Page, v.Title, v.Note = "key", "Key "+key, noteText(q)
	if key == "" {
		return &consoleError{http.StatusBadRequest, "which key? (?k=<full key>)"}
	}
	rec, err := c.data.lookup(ctx, storeID, key)
	if err != nil {
		return err
	}
	v.Key = newKeyDetail(c.app, storeID, rec, c.data.stateOf(rec), v.Now)
	if c.ShowDecrypted {
		if plain := decryptedResource(ctx, c.app, rec); plain != nil {
			b := newPrettyBody(plain, int64(len(plain)), "application/json")
			v.Key.Decrypted = &b
		}
	}
	return nil
}

func (c *Console) orderPage(ctx context.Context, r *http.Request, v *consolePage) error {
	q := r.URL.Query()
	storeID, order := q.Get("store"), q.Get("o")
	v.Page, v.Title = "order", "Order "+order
	if order == "" {
		return &consoleError{http.StatusBadRequest, "which order? (?o=<scope>:<merchant>:<order>)"}
	}
	ov, err := c.data.order(ctx, storeID, order)
	if err != nil {
		return err
	}
	v.Order, v.OrderStore = &ov, storeID
	return nil
}

func (c *Console) confirmPurge(ctx context.Context, r *http.Request, v *consolePage) error {
	q := r.URL.Query()
	storeID, key := q.Get("store"), q.Get("k")
	v.Page, v.Title = "purge", "Purge "+key
	rec, err := c.data.lookup(ctx, storeID, key)
	if err != nil {
		return err
	}
	v.Key = newKeyDetail(c.app, storeID, rec, c.data.stateOf(rec), v.Now)
	return nil
}

func (c *Console) purge(ctx context.Context, w http.ResponseWriter, r *http.Request, v *consolePage) error {
	storeID, key := r.PostForm.Get("store"), r.PostForm.Get("k")
	if r.PostForm.Get("confirm") != "yes" {
		// A purge is confirmed on its own page, without JavaScript.
		http.Redirect(w, r, v.Base+"purge?"+url.Values{"store": {storeID}, "k": {key}}.Encode(), http.StatusSeeOther)
		return nil
	}
	force := r.PostForm.Get("force") == "yes"
	if err := c.data.purge(ctx, storeID, key, force, c.logger, r.RemoteAddr); err != nil {
		return err
	}
	http.Redirect(w, r, v.Base+"?"+url.Values{"note": {"purged"}, "k": {key}}.Encode(), http.StatusSeeOther)
	return nil
}

func (c *Console) redeliver(ctx context.Context, w http.ResponseWriter, r *http.Request, v *consolePage) error {
	storeID, key := r.PostForm.Get("store"), r.PostForm.Get("k")
	// The redelivery waits for the backend: give it the admin API's bound,
	// not the page's.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admin.RedeliverTimeout)
	defer cancel()
	// An answered key's form asks for again: the operator confirms, on a
	// box that says the backend already ran it, that it runs a second
	// time; that confirmation is the force too.
	again := r.PostForm.Get("again") == "yes"
	res, err := c.data.redeliver(ctx, storeID, key, r.PostForm.Get("force") == "yes" || again, again, c.logger, r.RemoteAddr)
	if err != nil {
		return err
	}
	note := url.Values{"store": {storeID}, "k": {key}, "note": {"redelivered"}, "status": {strconv.Itoa(res.Status)}, "state": {res.State}}
	if res.Replayed {
		note.Set("note", "replayed")
	}
	http.Redirect(w, r, v.Base+"key?"+note.Encode(), http.StatusSeeOther)
	return nil
}

// noteText is the message a redirect after an action asks for: fixed
// texts, so a crafted link cannot put words on the page.
func noteText(q url.Values) string {
	switch q.Get("note") {
	case "purged":
		return "Purged: the key's next copy will be forwarded to the backend."
	case "redelivered":
		return "Redelivered through the notification's route: it answered " + strconv.Itoa(atoiOr0(q.Get("status"))) +
			"; the key is now " + stateWord(q.Get("state")) + "."
	case "paused":
		return "Deliveries paused: notifications are still acknowledged and queued."
	case "resumed":
		return "Deliveries resumed: the queue drains."
	case "replayed":
		return "Redelivered, but the route replayed a remembered answer (" + strconv.Itoa(atoiOr0(q.Get("status"))) + "): the backend did not run."
	}
	return ""
}

// stateWord is a state named in a redirect, from the states there are.
func stateWord(s string) string {
	switch s {
	case "answered", "failed", "dead", "in_flight", admin.StateQueued, admin.StateRetrying, admin.StateDelivering:
		return s
	}
	return "unknown"
}

func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func errStatus(err error) int {
	var ce *consoleError
	switch {
	case errors.As(err, &ce):
		return ce.status
	case errors.Is(err, store.ErrNotFound), errors.Is(err, errConsoleStore):
		return http.StatusNotFound
	}
	return http.StatusServiceUnavailable
}

// parseConsoleCaddyfile sets up the handler from Caddyfile tokens.
func parseConsoleCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	c := new(Console)
	err := c.UnmarshalCaddyfile(h.Dispenser)
	return c, err
}

// UnmarshalCaddyfile sets up the console from Caddyfile tokens. Syntax:
//
//	idempotency_console [<matcher>] {
//		refresh <duration> | off
//		show_decrypted
//		hosts <host>...
//	}
func (c *Console) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	return cfparse.Block(d, 0, "", func(name string) error {
		switch name {
		case "refresh":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if d.Val() == "off" {
				c.Refresh = -1
			} else {
				dur, err := caddy.ParseDuration(d.Val())
				if err != nil || dur <= 0 {
					return d.Errf("refresh: a positive duration or off, not %q", d.Val())
				}
				c.Refresh = caddy.Duration(dur)
			}
			return cfparse.NoArgs(d)
		case "show_decrypted":
			c.ShowDecrypted = true
			return cfparse.NoArgs(d)
		case "hosts":
			return cfparse.ListArg(d, &c.Hosts)
		}
		return d.Errf("unknown subdirective %q (idempotency_console takes: refresh, show_decrypted, hosts)", name)
	})
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Console)(nil)
	_ caddyhttp.MiddlewareHandler = (*Console)(nil)
	_ caddyfile.Unmarshaler       = (*Console)(nil)
)
