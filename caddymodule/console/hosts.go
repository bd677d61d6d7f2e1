package console

import (
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The console answers only for the hosts its site names, so a web page
// that points its own name at the console's address (DNS rebinding) can
// neither read a page, and its token, nor post an action: its requests
// carry its own name in Host. A site that names no host (http://:2020)
// gives the console nothing to compare with: an unauthenticated request
// is then served for a loopback host only (localhost, 127.0.0.1, [::1]),
// one that passed Caddy's authentication (basic_auth) for any, as do the
// hosts the console's own `hosts` names.

// hostGuard is what the console knows of the hosts it serves, worked out
// on its first request from the server's provisioned routes.
type hostGuard struct {
	once sync.Once
	// site holds, for each route on the way from the server to this
	// console that matches on host only, the host matchers of its sets:
	// a request must pass one of each level's (Caddy already checked).
	site [][]caddyhttp.MatchHost
}

// loopbackHosts are the names an unauthenticated console on a site that
// names no host answers for.
var loopbackHosts = caddyhttp.MatchHost{"localhost", "127.0.0.1", "::1"}

// hostAllowed tells whether the console may answer r.
func (c *Console) hostAllowed(r *http.Request) bool {
	g := c.guard
	if g == nil {
		return false // never provisioned
	}
	g.once.Do(func() {
		if srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok {
			g.site = siteHosts(srv, c)
		}
	})
	if len(c.hosts) > 0 && c.hosts.Match(r) {
		return true
	}
	if len(g.site) > 0 {
		for _, level := range g.site {
			if !anyHostMatch(level, r) {
				return false
			}
		}
		return true
	}
	if loopbackHosts.Match(r) {
		return true
	}
	return authenticated(r)
}

func anyHostMatch(ms []caddyhttp.MatchHost, r *http.Request) bool {
	for _, m := range ms {
		if m.Match(r) {
			return true
		}
	}
	return false
}

// authenticated tells whether Caddy's authentication handler (basic_auth)
// let r through: it names the user it authenticated.
func authenticated(r *http.Request) bool {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return false
	}
	id, _ := repl.GetString("http.auth.user.id")
	return id != ""
}

// refuseHost answers a request for a host the console does not serve:
// no page, no token, no action.
func refuseHost(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if len(host) > 64 || strings.ContainsFunc(host, func(r rune) bool { return r < ' ' || r > '~' }) {
		host = "this host"
	}
	_, _ = w.Write([]byte("403 the console does not answer for " + host +
		": it serves the hosts its site names, or loopback (localhost, 127.0.0.1, [::1]) on a site that names none\n"))
}

// siteHosts finds the console c in srv's routes and returns the host
// matchers on its way; nil when c is not found there (it then serves
// loopback hosts only).
func siteHosts(srv *caddyhttp.Server, c *Console) [][]caddyhttp.MatchHost {
	lists := []caddyhttp.RouteList{srv.Routes}
	if srv.Errors != nil {
		lists = append(lists, srv.Errors.Routes)
	}
	for _, routes := range lists {
		if levels, ok := findIn(routes, c, nil); ok {
			return levels
		}
	}
	return nil
}

// findIn looks for c in routes, subroutes included, carrying the host
// levels seen on the way.
func findIn(routes caddyhttp.RouteList, c *Console, levels [][]caddyhttp.MatchHost) ([][]caddyhttp.MatchHost, bool) {
	for i := range routes {
		rt := &routes[i]
		here := levels
		if l := hostLevel(rt.MatcherSets); l != nil {
			here = append(append([][]caddyhttp.MatchHost(nil), levels...), l)
		}
		for _, h := range rt.Handlers {
			switch h := h.(type) {
			case *Console:
				if h == c {
					return here, true
				}
			case *caddyhttp.Subroute:
				if got, ok := findIn(h.Routes, c, here); ok {
					return got, true
				}
				if h.Errors != nil {
					if got, ok := findIn(h.Errors.Routes, c, here); ok {
						return got, true
					}
				}
			}
		}
	}
	return nil, false
}

// hostLevel is the host matchers of a route whose every matcher set
// matches on host (so no request for another host goes through it); nil
// otherwise.
func hostLevel(sets caddyhttp.MatcherSets) []caddyhttp.MatchHost {
	if len(sets) == 0 {
		return nil
	}
	var level []caddyhttp.MatchHost
	for _, set := range sets {
		var found bool
		for _, m := range set {
			switch m := m.(type) {
			case caddyhttp.MatchHost:
				level, found = append(level, m), true
			case *caddyhttp.MatchHost:
				level, found = append(level, *m), true
			}
		}
		if !found {
			return nil
		}
	}
	return level
}
