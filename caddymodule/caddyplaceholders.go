package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Caddy's replacer keeps a placeholder it does not know as literal text:
// `key {http.request.heder.X-Order}` renders "{http.request.heder.X-Order}"
// on every request, or an empty key where the route refuses one, and so
// every notification is a 400 — yet `validate` said "Valid configuration".
// The {http.request.*} names are asked of Caddy's own replacer, so the
// check knows exactly what the running server knows. Open families
// ({http.request.header.*}, {http.request.uri.query.*}, …) answer for any
// field; {http.vars.*}, {http.regexp.*}, `map` outputs and other modules'
// placeholders are not judged here: they are set by handlers that run
// before this one.

// checkCaddyPlaceholder says why {name} is not a placeholder Caddy knows,
// or nil.
func checkCaddyPlaceholder(name string) error {
	rest, ok := strings.CutPrefix(name, "http.request.")
	if !ok {
		return nil
	}
	if _, known := probeReplacer().Get(name); known {
		return nil
	}
	msg := fmt.Sprintf("Caddy has no placeholder {%s}", name)
	if fix := nearestRequestPlaceholder(rest); fix != "" {
		msg += fmt.Sprintf("; did you mean {http.request.%s}?", fix)
	}
	return fmt.Errorf("%s (Caddy would keep it as literal text)", msg)
}

// probeReplacer is a replacer over a request that has what Caddy's
// request placeholders read (a path, a host with labels, an original
// request), so that a known name answers known.
func probeReplacer() interface {
	Get(string) (any, bool)
} {
	req, err := http.NewRequest(http.MethodPost, "http://pay.example.com/a/b/c?x=1", http.NoBody)
	if err != nil {
		panic(err) // a constant URL
	}
	req.RemoteAddr = "127.0.0.1:1234"
	ctx := context.WithValue(req.Context(), caddyhttp.VarsCtxKey, map[string]any{})
	ctx = context.WithValue(ctx, caddyhttp.OriginalRequestCtxKey, *req)
	ctx = context.WithValue(ctx, caddyhttp.ExtraLogFieldsCtxKey, new(caddyhttp.ExtraLogFields))
	req = req.WithContext(ctx)
	return caddyhttp.NewTestReplacer(req)
}

// requestFamilies are the {http.request.*} names and families a typo is
// compared with.
var requestFamilies = []string{
	"header.", "cookie.", "uri.query.", "uri.path.", "host.labels.", "tls.", "remote.host",
	"method", "scheme", "proto", "host", "port", "hostport", "remote", "uri", "uri.path", "uri.query",
	"body", "uuid", "orig_uri", "orig_method",
}

// nearestRequestPlaceholder suggests the known name a typo meant: the
// family within two edits of the typo's first segment, with the rest of
// the name kept (heder.X-Order → header.X-Order).
func nearestRequestPlaceholder(rest string) string {
	best, bestDist := "", 3
	for _, fam := range requestFamilies {
		head, tail := rest, ""
		if strings.HasSuffix(fam, ".") {
			// Compare as many segments as the family has.
			n := strings.Count(fam, ".")
			parts := strings.SplitN(rest, ".", n+1)
			if len(parts) <= n {
				continue
			}
			head, tail = strings.Join(parts[:n], ".")+".", parts[n]
		}
		if d := editDistance(head, fam); d < bestDist {
			best, bestDist = fam+tail, d
		}
	}
	return best
}

// editDistance is Levenshtein's distance between two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
