package reconcile

import (
	"slices"
	"testing"

	"github.com/idemgate/idemgate/platforms"
)

// TestBillRefs: a journaled body gives the objects its verified
// notification would have named.
func TestBillRefs(t *testing.T) {
	stripe := []byte(`{"id":"evt_1","type":"charge.failed","data":{"object":{"id":"ch_1","payment_intent":"pi_1","metadata":{}}}}`)
	paypal := []byte(`{"id":"WH-1","event_type":"PAYMENT.CAPTURE.DENIED","resource":{"id":"CAP1","amount":{"value":"1.00"}}}`)
	for _, c := range []struct {
		platform string
		body     []byte
		want     []string
	}{
		{"stripe", stripe, []string{"ch_1", "pi_1"}},
		{"paypal", paypal, []string{"CAP1"}},
		{"alipay", []byte("trade_no=1"), nil},
		{"stripe", []byte("not json"), nil},
	} {
		if got := billRefs(platforms.BillOf(c.platform), c.body); !slices.Equal(got, c.want) {
			t.Errorf("%s %s: %q, want %q", c.platform, c.body, got, c.want)
		}
	}
}
