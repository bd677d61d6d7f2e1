package app

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// Route is one provisioned idempotency handler as the operator surfaces
// see it: the scope of its keys, its platform (the console verifies and
// decrypts a journaled notification as its route does, with keys it never
// sees), how long it keeps records and how long its platform retries.
type Route struct {
	Scope    string
	Platform keying.Platform
	// TTL is how long the route remembers answers and journals.
	TTL time.Duration
	// RetryWindow is how long the platform keeps retrying a notification
	// (for async routes: give_up): past it, a failed key is dead.
	RetryWindow time.Duration
	// Merchants are the route's pinned merchants (Alipay app_id, WeChat
	// Pay mchid), resolved: a reconciliation of an Alipay bill, which
	// names no app_id, takes the one a scope pins.
	Merchants []string
	// Emit sends an event that concerns the route but no single key
	// (idempotency.reconcile) as the route sends its own: a Caddy event
	// and its alert, if configured. Nil in tests without a handler.
	Emit func(name string, data map[string]any)

	// Name tells the route's handlers of one scope apart: "<scope>#<n>",
	// n counting the config's handlers of that scope in provision order,
	// so the same config (reloaded, or after a restart) names its
	// handlers alike. The journal keeps it with each notification.
	Name string
	// Async: the route acknowledges and delivers from its queue.
	Async bool
	// Concurrency is how many redeliveries a bulk run sends at a time:
	// the async route's concurrency, 4 for a sync route.
	Concurrency int
	// Schedule is the platform's retry schedule (keying.Preset.Schedule);
	// nil for async routes (the platform has its ack) and generic ones.
	Schedule keying.Schedule
	// Resigns: a redelivery carries a fresh signature (the route holds
	// the platform's signing secret: Stripe, Standard Webhooks).
	Resigns bool
	// SignedFor is how long a signed timestamp stays acceptable to a
	// backend that checks it itself (WeChat Pay v3, PayPal: 5 minutes),
	// for routes that cannot re-sign; 0 when the platform signs no time
	// the backend could check (Alipay) or the route re-signs.
	SignedFor time.Duration
	// Redeliver sends n into this route's handler (not through the site's
	// routing), as a copy first received at firstSeen; before runs once the
	// route is known to be reachable, right before anything is sent (a
	// forced redelivery reopens the key there), and its error stops it.
	// Set by the handler.
	Redeliver func(ctx context.Context, n *store.Notification, firstSeen time.Time, before func() error) (Answer, error)
	// OrderRun is what key's order remembers once the route ran its
	// notification n (the settle's Answer.Order; nil: none): a read that
	// finds an answered record whose order lacks its event writes it
	// back with it (store.OrderRepairer). Nil: the route keeps no order.
	OrderRun func(key string, n *keying.Notification) *store.OrderRun
	// Query asks the platform about one order now (catch_up's engine); nil
	// where the route has no catch_up.
	Query func(ctx context.Context, q keying.OrderQuery) (store.Missing, error)
}

// Answer is what a redelivery was answered: by the backend, or by the
// route itself (a replay, a refusal).
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
	// Resigned: the redelivery carried a fresh signature.
	Resigned bool
	// ByGateway: the route's chain failed before any answer (the backend
	// unreachable, a handler's error), and the gateway answered.
	ByGateway bool
}

// DefaultTTL is the handler's default ttl, for keys whose scope has no
// loaded route.
const DefaultTTL = 72 * time.Hour

// AddRoute adds r; its handler calls RemoveRoute when it is cleaned up.
func (a *App) AddRoute(r *Route) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.routes == nil {
		a.routes = map[string][]*Route{}
	}
	a.routes[r.Scope] = append(a.routes[r.Scope], r)
}

// RemoveRoute removes r, and its scope once no route has it.
func (a *App) RemoveRoute(r *Route) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rs := a.routes[r.Scope]
	for i, o := range rs {
		if o == r {
			rs = append(rs[:i:i], rs[i+1:]...)
			break
		}
	}
	if len(rs) == 0 {
		delete(a.routes, r.Scope)
		return
	}
	a.routes[r.Scope] = rs
}

// RouteOf returns the newest route of scope.
func (a *App) RouteOf(scope string) (*Route, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	rs := a.routes[scope]
	if len(rs) == 0 {
		return nil, false
	}
	return rs[len(rs)-1], true
}

// RoutesOf returns every registered route of scope, oldest first.
func (a *App) RoutesOf(scope string) []*Route {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return append([]*Route(nil), a.routes[scope]...)
}

// RouteNamed returns the newest route called name, else the newest of
// scope (a record from before routes had names, or a config that no
// longer has that handler).
func (a *App) RouteNamed(name, scope string) (*Route, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	rs := a.routes[scope]
	for i := len(rs) - 1; i >= 0; i-- {
		if name != "" && rs[i].Name == name {
			return rs[i], true
		}
	}
	if len(rs) == 0 {
		return nil, false
	}
	return rs[len(rs)-1], true
}

// RouteOfKey returns the newest route of a full key's scope
// ("<scope>:<key>").
func (a *App) RouteOfKey(key string) (*Route, bool) {
	scope, _, ok := strings.Cut(key, ":")
	if !ok {
		return nil, false
	}
	return a.RouteOf(scope)
}

// WindowOf is the retry window of a full key's scope; 0 (never dead) when
// no route of the config has that scope.
func (a *App) WindowOf(key string) time.Duration {
	if r, ok := a.RouteOfKey(key); ok {
		return r.RetryWindow
	}
	return 0
}

// TTLOf is how long the route of a full key's scope keeps records, or
// DefaultTTL when no route of the config has that scope.
func (a *App) TTLOf(key string) time.Duration {
	if r, ok := a.RouteOfKey(key); ok {
		return r.TTL
	}
	return DefaultTTL
}

// ScopeNames are the scopes with a registered route, sorted.
func (a *App) ScopeNames() []string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]string, 0, len(a.routes))
	for s := range a.routes {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
