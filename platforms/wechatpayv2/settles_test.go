package wechatpayv2

import (
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestSettles: what reconciliation reads of each preset's notification —
// payment or refund (or neither), the platform's time of the event and,
// for Stripe and PayPal, the objects a bill names. Signatures are off: the
// verifiers have their own tests; the bodies are the platforms' shapes.
func TestSettles(t *testing.T) {
	bj := time.FixedZone("CST", 8*3600)
	cases := []struct {
		name    string
		cfg     Config
		req     *keying.Request
		settles keying.Settlement
		at      time.Time
		refs    []string
	}{
		{"wechatpay_v2 payment", Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}, v2req(wxV2XML(wxV2MD5.Sign(wxV2Fields()))),
			keying.SettlesPayment, time.Date(2014, 9, 3, 13, 15, 40, 0, bj), nil},
		{"wechatpay_v2 refund", Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}, v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS"))),
			keying.SettlesRefund, time.Date(2018, 11, 19, 16, 24, 13, 0, bj), nil},
		{"wechatpay_v2 refund closed", Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}, v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("REFUNDCLOSE"))),
			"", time.Date(2018, 11, 19, 16, 24, 13, 0, bj), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := presettest.MustNew(t, New, c.cfg)
			n, err := p.Verify(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if n.Settles != c.settles || !n.At.Equal(c.at) || !slices.Equal(n.Refs, c.refs) {
				t.Fatalf("Settles %q At %v Refs %q, want %q %v %q", n.Settles, n.At, n.Refs, c.settles, c.at, c.refs)
			}
		})
	}
}
