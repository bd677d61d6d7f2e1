package registry

import (
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/keying"
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
}

// DefaultTTL is the handler's default ttl, for keys whose scope has no
// loaded route.
const DefaultTTL = 72 * time.Hour

var (
	routesMu sync.RWMutex
	// routes holds every registered route of a scope, oldest first: the
	// newest answers for the scope, and dropping one (a failed provision,
	// the old config of a reload) leaves the others.
	routes = map[string][]*Route{}
)

// RegisterRoute adds r; its handler calls UnregisterRoute when it is
// cleaned up.
func RegisterRoute(r *Route) {
	routesMu.Lock()
	defer routesMu.Unlock()
	routes[r.Scope] = append(routes[r.Scope], r)
}

// UnregisterRoute removes r, and its scope once no route has it.
func UnregisterRoute(r *Route) {
	routesMu.Lock()
	defer routesMu.Unlock()
	rs := routes[r.Scope]
	for i, o := range rs {
		if o == r {
			rs = append(rs[:i:i], rs[i+1:]...)
			break
		}
	}
	if len(rs) == 0 {
		delete(routes, r.Scope)
		return
	}
	routes[r.Scope] = rs
}

// RouteOf returns the newest route of scope.
func RouteOf(scope string) (*Route, bool) {
	routesMu.RLock()
	defer routesMu.RUnlock()
	rs := routes[scope]
	if len(rs) == 0 {
		return nil, false
	}
	return rs[len(rs)-1], true
}

// RoutesOf returns every registered route of scope, oldest first.
func RoutesOf(scope string) []*Route {
	routesMu.RLock()
	defer routesMu.RUnlock()
	return append([]*Route(nil), routes[scope]...)
}

// RouteOfKey returns the newest route of a full key's scope
// ("<scope>:<key>").
func RouteOfKey(key string) (*Route, bool) {
	scope, _, ok := strings.Cut(key, ":")
	if !ok {
		return nil, false
	}
	return RouteOf(scope)
}

// WindowOf is the retry window of a full key's scope; 0 (never dead) when
// no loaded route has that scope.
func WindowOf(key string) time.Duration {
	if r, ok := RouteOfKey(key); ok {
		return r.RetryWindow
	}
	return 0
}

// TTLOf is how long the route of a full key's scope keeps records, or
// DefaultTTL when no route of that scope is loaded.
func TTLOf(key string) time.Duration {
	if r, ok := RouteOfKey(key); ok {
		return r.TTL
	}
	return DefaultTTL
}

// Scopes counts the scopes with a registered route (tests of reloads).
func Scopes() int {
	routesMu.RLock()
	defer routesMu.RUnlock()
	return len(routes)
}

// Now is the clock that tells failed from dead; tests move it.
var Now = time.Now
