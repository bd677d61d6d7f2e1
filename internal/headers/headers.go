// Package headers copies HTTP headers the way the request path needs them.
package headers

import "net/http"

// CloneWithout is a copy of h without the names drop reports, made in one
// pass; the values share one array, as http.Header.Clone's do (one
// allocation, not one per header). Names are matched as h holds them
// (the server canonicalizes the names it reads).
func CloneWithout(h http.Header, drop func(name string) bool) http.Header {
	nv := 0
	for _, v := range h {
		nv += len(v)
	}
	vals := make([]string, 0, nv)
	out := make(http.Header, len(h))
	for k, v := range h {
		if drop(k) {
			continue
		}
		if len(v) == 0 {
			out[k] = nil
			continue
		}
		vals = append(vals, v...)
		out[k] = vals[len(vals)-len(v) : len(vals) : len(vals)]
	}
	return out
}
