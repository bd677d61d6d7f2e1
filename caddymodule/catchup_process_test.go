package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
)

// missingAlerts are the sink's idempotency.missing events.
func missingAlerts(s *alertSink) []alertEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []alertEvent
	for _, e := range s.events {
		if e.Event == "idempotency.missing" {
			out = append(out, e)
		}
	}
	return out
}

// missingOf reads GET /idempotency/missing.
func missingOf(t *testing.T, g gateway, query string) admin.MissingView {
	t.Helper()
	var v admin.MissingView
	g.of().AdminJSON(t, http.MethodGet, "/idempotency/missing"+query, &v)
	return v
}

// TestCatchUpStripeResend: a Stripe route with catch_up, against a local
// Stripe stand-in: the event Stripe holds but never delivered is resent by
// the running engine, arrives Stripe-signed through the gate and runs
// once; the event already delivered is never resent; the event inside
// grace is left alone. The missing list, the `missing` alert and
// idemgate_missing_total say so.
func TestCatchUpStripeResend(t *testing.T) {
	if testing.Short() {
		t.Skip("real module test")
	}
	const key = "rk_test_51CatchUp0000000000wxyz"
	be := newBackend(t)
	api := platformapi.NewStripe(key, "we_catchup", testStripeSecret, "")
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	sink := newAlertSink(t)
	t.Setenv("CATCHUP_STRIPE_KEY", key)
	g := startGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret `+testStripeSecret+`
			store memory
			alert {alerts} missing
			catch_up {
				api {api}
				api_key {env.CATCHUP_STRIPE_KEY}
				endpoint we_catchup
				every 200ms
				grace 30s
				recover resend
			}
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr(), "{api}", srv.URL, "{alerts}", sink.url)
	api.URL = g.base + "/stripe"

	// Delivered before: through the gate, as Stripe did.
	obj := `{"id": "pi_%s", "object": "payment_intent", "amount": 2500, "currency": "usd", "metadata": {"order_id": "o-%s"}}`
	past := time.Now().Add(-time.Hour)
	seen := platformapi.StripeEvent("evt_seen", "payment_intent.succeeded", past, strings.ReplaceAll(obj, "%s", "seen"), "", 1)
	if r := gatewaytest.Post(t, g.base+"/stripe", "application/json", string(seen), platformtest.StripeHeader(seen, testStripeSecret, time.Now())); r.Status != 200 || be.totalHits() != 1 {
		t.Fatalf("the first delivery: %d, backend %d", r.Status, be.totalHits())
	}
	if err := api.Add(seen); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []struct {
		id string
		at time.Time
	}{{"evt_missed", past}, {"evt_fresh", time.Now()}} {
		if err := api.Add(platformapi.StripeEvent(ev.id, "payment_intent.succeeded", ev.at, strings.ReplaceAll(obj, "%s", ev.id), "", 1)); err != nil {
			t.Fatal(err)
		}
	}
	gatewaytest.Eventually(t, 10*time.Second, "the missing event resent and answered", func() bool {
		return api.LastStatus("evt_missed") == 200
	})
	gatewaytest.Eventually(t, 10*time.Second, "the missing entry recovered", func() bool {
		v := missingOf(t, g, "?scope=stripe")
		return len(v.Missing) == 1 && v.Missing[0].Outcome == "recovered"
	})
	time.Sleep(time.Second) // a few more passes
	if be.totalHits() != 2 || api.Resends("evt_missed") != 1 || api.Resends("evt_seen") != 0 || api.Resends("evt_fresh") != 0 {
		t.Fatalf("backend ran %d times; resends: missed %d, seen %d, fresh %d", be.totalHits(),
			api.Resends("evt_missed"), api.Resends("evt_seen"), api.Resends("evt_fresh"))
	}
	v := missingOf(t, g, "")
	m := v.Missing[0]
	if m.ID != "evt_missed" || m.Action != "resent" || m.Key != "stripe:evt_missed" || m.MerchantRef != "o-evt_missed" || m.Amount == "" {
		t.Fatalf("missing entry %+v", m)
	}
	gatewaytest.Eventually(t, 5*time.Second, "the missing alert", func() bool { return len(missingAlerts(sink)) > 0 })
	if ev := missingAlerts(sink)[0]; ev.Platform != "stripe" || ev.Details["id"] != "evt_missed" {
		t.Fatalf("alert %v", ev)
	}
	_, metrics := g.adminDo(t, http.MethodGet, "/metrics")
	if !strings.Contains(metrics, `idemgate_missing_total{`) || !strings.Contains(metrics, `outcome="recovered"`) {
		t.Fatalf("no idemgate_missing_total recovered in /metrics")
	}
}
