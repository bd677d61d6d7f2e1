package caddymodule

import (
	"context"
	"net/url"
	"strings"
	"sync"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/keying"
)

// routes maps a scope to a provisioned handler of it, so the console can
// read a journaled notification as its route does (WeChat Pay's encrypted
// resource needs the route's APIv3 key, which the console never sees).
var routes sync.Map // scope → *Handler

func registerRoute(h *Handler) { routes.Store(h.scope(), h) }

func unregisterRoute(h *Handler) { routes.CompareAndDelete(h.scope(), h) }

// decryptedResource returns the plaintext of a journaled encrypted
// notification, verified as its route verifies it (judged against its
// first receipt), or nil when there is none or it does not verify.
func decryptedResource(ctx context.Context, rec *cache.Record) []byte {
	n := rec.Notification
	if n == nil || n.Truncated() {
		return nil
	}
	scope, _, ok := strings.Cut(rec.Key, ":")
	if !ok {
		return nil
	}
	v, ok := routes.Load(scope)
	if !ok {
		return nil
	}
	h := v.(*Handler)
	u, err := url.ParseRequestURI(n.URI)
	if err != nil {
		return nil
	}
	got, err := h.platform.Verify(&keying.Request{Method: n.Method, URL: u, Header: n.Header.Clone(),
		Body: n.Body, Now: rec.FirstSeen, Context: ctx})
	if err != nil {
		return nil
	}
	return got.Decrypted
}
