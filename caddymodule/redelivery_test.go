package caddymodule

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// TestRedeliverAfterTolerance: a Stripe event that failed is redelivered
// an hour later, long past the signature's 5-minute tolerance. The
// platform's bytes still verify — judged against when they were first
// received — and the backend runs once more. The same headers forged from
// outside change nothing: the stale copy is still a 401.
func TestRedeliverAfterTolerance(t *testing.T) {
	const secret = "whsec_redeliver_test"
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 503, "down", 0
		}
		return 200, "ok", 0
	})
	g := startGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret `+secret+`
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())

	body := platformtest.StripeEvent("evt_redeliver", "charge.succeeded", "ch_1", 990)
	hdr := platformtest.StripeHeader(body, secret, time.Now())
	hdr.Set("X-Order", "evt_redeliver")
	hdr.Set("Content-Type", "application/json")
	if r := post(t, g.base+"/stripe", "application/json", string(body), hdr); r.status != 503 {
		t.Fatalf("first copy: %d, want the backend's 503", r.status)
	}

	// An hour later.
	old := now
	now = func() time.Time { return time.Now().Add(time.Hour) }
	t.Cleanup(func() { now = old })

	forged := hdr.Clone()
	forged.Set(headerRedelivery, "not-the-token")
	forged.Set(headerReceivedAt, time.Now().UTC().Format(time.RFC3339Nano))
	if r := post(t, g.base+"/stripe", "application/json", string(body), forged); r.status != http.StatusUnauthorized {
		t.Fatalf("stale copy with forged redelivery headers: %d, want 401", r.status)
	}
	var red redeliveryView
	g.adminJSON(t, http.MethodPost, keyURI("stripe:evt_redeliver")+"/redeliver", &red)
	if red.Status != 200 || red.Body != "ok" {
		t.Fatalf("redelivery an hour later: %+v, want the backend's 200", red)
	}
	if n := be.count("evt_redeliver"); n != 2 {
		t.Fatalf("backend ran %d times, want 2 (the failed copy, the redelivery)", n)
	}
}
