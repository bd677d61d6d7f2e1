package stripe

import (
	"slices"
	"testing"

	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestStripeMerchantRefs: the object's id, the intent and charge behind
// it, and the merchant's own references (client_reference_id, metadata
// order_id); nested objects and non-strings are not references.
func TestStripeMerchantRefs(t *testing.T) {
	cfg := Config{Secret: stripeSecret}
	session := []byte(`{"id":"evt_1","object":"event","type":"checkout.session.completed","created":1773480000,` +
		`"data":{"object":{"id":"cs_test_a1","object":"checkout.session","payment_intent":"pi_3Mt",` +
		`"client_reference_id":"ORDER-42","metadata":{"order_id":"ORDER-42","note":"x"},"amount_total":2000,"currency":"usd"}}}`)
	charge := []byte(`{"id":"evt_2","object":"event","type":"charge.refunded","created":1773480000,` +
		`"data":{"object":{"id":"ch_3Mt","object":"charge","payment_intent":"pi_3Mt","metadata":{},"amount":2000,"currency":"usd"}}}`)
	expanded := []byte(`{"id":"evt_3","object":"event","type":"payment_intent.succeeded","created":1773480000,` +
		`"data":{"object":{"id":"pi_3Mt","object":"payment_intent","latest_charge":{"id":"ch_x"},"metadata":{"order_id":7},"amount":2000,"currency":"usd"}}}`)
	cases := []presettest.VerifyCase[Config]{
		{Name: "session", Cfg: cfg, Req: stripeReq(session, stripeSecret, presettest.Now), Key: "evt_1"},
		{Name: "charge", Cfg: cfg, Req: stripeReq(charge, stripeSecret, presettest.Now), Key: "evt_2"},
		{Name: "expanded", Cfg: cfg, Req: stripeReq(expanded, stripeSecret, presettest.Now), Key: "evt_3"},
	}
	want := map[string][]string{
		"session":  {"cs_test_a1", "pi_3Mt", "ORDER-42"},
		"charge":   {"ch_3Mt", "pi_3Mt"},
		"expanded": {"pi_3Mt", "7"},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if !slices.Equal(n.MerchantRefs, want[c.Name]) {
			t.Fatalf("MerchantRefs = %q, want %q", n.MerchantRefs, want[c.Name])
		}
	})
}
