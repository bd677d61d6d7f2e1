package console

import (
	"encoding/json"
	"net"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// A console with no authentication of its own trusts whoever reaches its
// port: its Host check (hosts.go) keeps a browser's rebinding page out,
// not a client that writes `Host: localhost` itself. On a server that
// listens beyond loopback, or that takes notifications (whatever carries
// them to the gateway, a proxy, a load balancer, reaches the console
// too), that is anyone. Provision says so at warn, so `validate` does.

// warnExposure logs a console with no authentication of its own on a
// server that listens beyond loopback or takes notifications. Caddy
// provisions a server's routes in order, so the site being provisioned is
// its first route whose handlers are still raw.
func (c *Console) warnExposure(ctx caddy.Context) {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || c.logger == nil {
		return
	}
	var site *caddyhttp.Route
	for i := range srv.Routes {
		if srv.Routes[i].HandlersRaw != nil {
			site = &srv.Routes[i]
			break
		}
	}
	if why := exposure(srv.Listen, srv.Routes, site); why != "" {
		c.logger.Warn("idempotency_console with no authentication of its own on a server that "+why+
			": anyone who reaches it can send Host: localhost and use the console (redeliver, purge); "+
			"mount it on a site of its own bound to loopback (http://localhost:2020 { bind 127.0.0.1 … }) or behind basic_auth",
			zap.Strings("listen", srv.Listen))
	}
}

// exposure says why a console without authentication in site, a route
// of a server listening on listen with routes, is reachable by more than
// the operator: "listens beyond loopback", "takes notifications"; "" when
// it is not, or when every console of site is behind basic_auth.
func exposure(listen []string, routes caddyhttp.RouteList, site *caddyhttp.Route) string {
	var why []string
	if beyondLoopback(listen) {
		why = append(why, "listens beyond loopback")
	}
	if hasIdempotency(routes) {
		why = append(why, "takes notifications")
	}
	if len(why) == 0 || (site != nil && consolesAuthenticated(site.HandlersRaw)) {
		return ""
	}
	return strings.Join(why, " and ")
}

// beyondLoopback tells whether a listener address reaches more than this
// machine: no host (every interface), or one not loopback.
func beyondLoopback(listen []string) bool {
	if len(listen) == 0 {
		return true // Caddy's default, :443
	}
	for _, l := range listen {
		na, err := caddy.ParseNetworkAddress(l)
		if err != nil {
			return true
		}
		if na.IsUnixNetwork() || na.IsFdNetwork() {
			continue
		}
		host := strings.Trim(na.Host, "[]")
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return true
		}
	}
	return false
}

// hasIdempotency tells whether routes hold an idempotency handler,
// provisioned or still raw.
func hasIdempotency(routes caddyhttp.RouteList) bool {
	for _, rt := range routes {
		for _, raw := range rt.HandlersRaw {
			if rawHasHandler(raw, "idempotency") {
				return true
			}
		}
		for _, h := range rt.Handlers {
			if caddy.GetModuleID(h) == "http.handlers.idempotency" {
				return true
			}
			if sub, ok := h.(*caddyhttp.Subroute); ok && hasIdempotency(sub.Routes) {
				return true
			}
		}
	}
	return false
}

// rawHasHandler tells whether a handler's JSON holds, at any depth, a
// handler named name.
func rawHasHandler(raw json.RawMessage, name string) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == name {
				return true
			}
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// consolesAuthenticated tells whether every console among a site's
// handlers (JSON) comes after an authentication handler (basic_auth) that
// guards it: earlier in its route, or in an earlier route of its list
// that matches every request.
func consolesAuthenticated(handlers []json.RawMessage) bool {
	var hs []any
	for _, raw := range handlers {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return false
		}
		hs = append(hs, v)
	}
	found, all := 0, true
	var walk func(routes []any, authed bool)
	walk = func(routes []any, authed bool) {
		for _, r := range routes {
			rm, _ := r.(map[string]any)
			handles, _ := rm["handle"].([]any)
			here := authed
			for _, h := range handles {
				hm, _ := h.(map[string]any)
				switch hm["handler"] {
				case "authentication":
					here = true
				case "idempotency_console":
					found++
					all = all && here
				case "subroute":
					sub, _ := hm["routes"].([]any)
					walk(sub, here)
				}
			}
			if _, matches := rm["match"]; here && !matches {
				authed = true
			}
		}
	}
	walk([]any{map[string]any{"handle": hs}}, false)
	return found > 0 && all
}
