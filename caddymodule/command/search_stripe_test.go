package command

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestSearchStripePaymentByOrderID: a Stripe payment's events sent as
// Stripe sends them: only the PaymentIntent's carry the merchant's
// metadata.order_id; its charges and refund name the intent. Searching the
// order id or the intent finds every event of the payment, and search,
// list and the order page show each event's type, not "-".
func TestSearchStripePaymentByOrderID(t *testing.T) {
	keys := t.TempDir()
	if out, err := runIdem(t, "keygen", "--platform", "stripe", "--dir", keys); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	be := gatewaytest.NewBackend(t)
	g := gatewaytest.StartGateway(t, `
	handle /webhooks/stripe {
		idempotency {
			platform stripe
			secret {file.{keys}/stripe_webhook_secret}
			store memory
		}
		reverse_proxy {backend}
	}`, "{keys}", keys, "{backend}", be.Addr())
	addr := []string{"--address", g.Admin}
	const order = "ORDER-2026-0042"
	events := map[string]string{ // event id → type
		"evt_pi42":     "payment_intent.succeeded",
		"evt_ch42":     "charge.succeeded",
		"evt_refund42": "charge.refunded",
		"evt_re42":     "refund.created",
	}
	for _, id := range []string{"evt_pi42", "evt_ch42", "evt_refund42", "evt_re42"} {
		out, err := runIdem(t, "send", "--platform", "stripe", "--url", g.Base+"/webhooks/stripe", "--dir", keys,
			"--event", events[id], "--id", id, "--order", order, "--amount", "4200")
		if err != nil || !strings.Contains(out, " 200 OK") {
			t.Fatalf("send %s: %v\n%s", events[id], err, out)
		}
	}
	for _, q := range []string{order, "pi_" + order} {
		out, err := runCLI(t, append([]string{"search", q, "--json"}, addr...)...)
		var v admin.SearchView
		if err != nil || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("search %s: %v\n%s", q, err, out)
		}
		var found []string
		for _, m := range v.Matches {
			found = append(found, m.Key)
			if want := events[strings.TrimPrefix(m.Key, "stripe:")]; m.Event != want {
				t.Errorf("search %s: %s has event %q, want %q", q, m.Key, m.Event, want)
			}
		}
		slices.Sort(found)
		if want := []string{"stripe:evt_ch42", "stripe:evt_pi42", "stripe:evt_re42", "stripe:evt_refund42"}; !slices.Equal(found, want) {
			t.Errorf("search %s found %v, want every event of the payment %v", q, found, want)
		}
		out, err = runCLI(t, append([]string{"search", q}, addr...)...)
		if err != nil || !regexp.MustCompile(`(?m) charge\.refunded +\S+ USD +.* stripe:evt_refund42$`).MatchString(out) {
			t.Errorf("search %s: %v\n%s", q, err, out)
		}
	}
	out, err := runCLI(t, append([]string{"list", "--state", "answered"}, addr...)...)
	if err != nil || !regexp.MustCompile(`(?m)^stripe:evt_ch42 +answered +200 +.* charge\.succeeded +ch_`+order+` pi_`+order+` +42\.00 USD`).MatchString(out) {
		t.Errorf("list: %v\n%s", err, out)
	}
	out, err = runCLI(t, append([]string{"order", "stripe:evt_re42"}, addr...)...)
	if err != nil || !regexp.MustCompile(`(?m)^refund\.created +answered `).MatchString(out) {
		t.Errorf("order: %v\n%s", err, out)
	}
}
