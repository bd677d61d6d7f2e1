package paypal

import (
	"slices"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestPayPalMerchantRefs: the resource's id, the merchant's invoice_id
// and custom_id, and the PayPal order it belongs to.
func TestPayPalMerchantRefs(t *testing.T) {
	k, _ := platformtest.Keys(t)
	cfg := Config{WebhookID: ppWebhookID, Certificates: [][]byte{presettest.Cert(t, k, presettest.BigInt(3), "messageverificationcerts.sandbox.paypal.com")},
		HTTPClient: noNetwork(t)}
	capture := []byte(`{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"42311647XV020574X",` +
		`"invoice_id":"INV-2026-0042","custom_id":"ORDER-42","amount":{"value":"7.47","currency_code":"USD"},` +
		`"supplementary_data":{"related_ids":{"order_id":"5O190127TN364715T"}}}}`)
	plain := ppEvent("WH-2", "PAYMENT.CAPTURE.COMPLETED", "42311647XV020574X")
	cases := []presettest.VerifyCase[Config]{
		{Name: "capture", Cfg: cfg, Req: ppReq(t, k, ppWebhookID, "t1", ppCertURL, capture), Key: "WH-1"},
		{Name: "plain", Cfg: cfg, Req: ppReq(t, k, ppWebhookID, "t2", ppCertURL, plain), Key: "WH-2"},
	}
	want := map[string][]string{
		"capture": {"42311647XV020574X", "INV-2026-0042", "ORDER-42", "5O190127TN364715T"},
		"plain":   {"42311647XV020574X"},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if !slices.Equal(n.MerchantRefs, want[c.Name]) {
			t.Fatalf("MerchantRefs = %q, want %q", n.MerchantRefs, want[c.Name])
		}
	})
}
