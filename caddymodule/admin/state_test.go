package admin

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/platforms/guest"
	"github.com/idemgate/idemgate/store"
)

// TestSignatureNote: a record says what its redelivery carries — a fresh
// signature where the route re-signs (Stripe), else the platform's own,
// and from when a backend checking its signed time refuses it (WeChat Pay
// v3: 5 minutes after it was signed); nothing for a generic route.
func TestSignatureNote(t *testing.T) {
	first := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, c := range []struct {
		platform string
		route    app.Route
		resigned bool
		refused  time.Time
	}{
		{"stripe", app.Route{Resigns: true}, true, time.Time{}},
		{"wechatpay", app.Route{SignedFor: 5 * time.Minute}, false, first.Add(5 * time.Minute)},
		{"alipay", app.Route{}, false, time.Time{}},
		{"generic", app.Route{}, false, time.Time{}},
	} {
		t.Run(c.platform, func(t *testing.T) {
			p, err := unverified(c.platform)
			if err != nil {
				t.Fatal(err)
			}
			rt := c.route
			rt.Scope, rt.Platform, rt.Name = "sig"+c.platform, p, "sig"+c.platform+"#1"
			a := app.New()
			a.AddRoute(&rt)
			rec := &store.Record{Key: rt.Scope + ":k", State: store.StateFailed, FirstSeen: first, LastSeen: first}
			v := NewRecordView(a, "memory", rec, false)
			switch {
			case c.platform == "generic":
				if v.Signature != nil {
					t.Fatalf("generic: %+v", v.Signature)
				}
			case v.Signature == nil || v.Signature.Resigned != c.resigned:
				t.Fatalf("signature %+v, want resigned %v", v.Signature, c.resigned)
			case c.refused.IsZero() != (v.Signature.RefusedAfter == nil):
				t.Fatalf("refused_after %v, want %v", v.Signature.RefusedAfter, c.refused)
			case v.Signature.RefusedAfter != nil && !v.Signature.RefusedAfter.Equal(c.refused):
				t.Fatalf("refused_after %v, want %v", v.Signature.RefusedAfter, c.refused)
			}
		})
	}
}

// unverified is the named platform, without settings, on a route with
// `verify off`.
func unverified(name string) (keying.Platform, error) {
	same := func(_, v string) (string, error) { return v, nil }
	return platforms.Module(name).Build(guest.Route{NoVerify: true, Secret: same, Resolve: func(v string) string { return v },
		PEM: func(_, v string) ([]byte, error) { return []byte(v), nil }})
}
