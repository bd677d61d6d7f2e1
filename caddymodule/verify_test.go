package caddymodule

import (
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	adminapi "github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
)

// TestRedeliverAfterTolerance: a Stripe event that failed is redelivered
// an hour later, long past the signature's 5-minute tolerance. The
// platform's bytes still verify — judged against when they were first
// received — and the backend runs once more. The same headers forged from
// outside change nothing: the stale copy is still a 401.
func TestRedeliverAfterTolerance(t *testing.T) {
	const secret = "whsec_redeliver_test"
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 503, "down", 0
		}
		return 200, "ok", 0
	})
	g := gatewaytest.StartGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret `+secret+`
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())

	body := platformtest.StripeEvent("evt_redeliver", "charge.succeeded", "ch_1", 990)
	hdr := platformtest.StripeHeader(body, secret, time.Now())
	hdr.Set("X-Order", "evt_redeliver")
	hdr.Set("Content-Type", "application/json")
	if r := gatewaytest.Post(t, g.Base+"/stripe", "application/json", string(body), hdr); r.Status != 503 {
		t.Fatalf("first copy: %d, want the backend's 503", r.Status)
	}

	// An hour later.
	hs := runningHandlers(t)
	if len(hs) != 1 {
		t.Fatalf("%d idempotency handlers running, want 1", len(hs))
	}
	configure(hs[0], withClock(func() time.Time { return time.Now().Add(time.Hour) }))

	forged := hdr.Clone()
	forged.Set("Idemgate-Redelivery", "not-the-token")
	forged.Set("Idemgate-Received-At", time.Now().UTC().Format(time.RFC3339Nano))
	if r := gatewaytest.Post(t, g.Base+"/stripe", "application/json", string(body), forged); r.Status != http.StatusUnauthorized {
		t.Fatalf("stale copy with forged redelivery headers: %d, want 401", r.Status)
	}
	var red adminapi.RedeliveryView
	g.AdminJSON(t, http.MethodPost, gatewaytest.KeyURI("stripe:evt_redeliver")+"/redeliver", &red)
	if red.Status != 200 || red.Body != "ok" {
		t.Fatalf("redelivery an hour later: %+v, want the backend's 200", red)
	}
	if n := be.Count("evt_redeliver"); n != 2 {
		t.Fatalf("backend ran %d times, want 2 (the failed copy, the redelivery)", n)
	}
}

// runningHandlers are the idempotency handlers of the config Caddy runs,
// as provisioned: a test sets what only a test may (their clock).
func runningHandlers(t *testing.T) []*Handler {
	t.Helper()
	app, err := caddy.ActiveContext().App("http")
	if err != nil {
		t.Fatal(err)
	}
	var hs []*Handler
	var walk func(caddyhttp.RouteList)
	walk = func(routes caddyhttp.RouteList) {
		for _, rt := range routes {
			for _, mh := range rt.Handlers {
				switch v := mh.(type) {
				case *Handler:
					hs = append(hs, v)
				case *caddyhttp.Subroute:
					walk(v.Routes)
				}
			}
		}
	}
	for _, srv := range app.(*caddyhttp.App).Servers {
		walk(srv.Routes)
	}
	return hs
}
