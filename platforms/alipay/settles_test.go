package alipay

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
		{"alipay notify", Config{NoVerify: true}, alipayPost(alipayNotify()), keying.SettlesPayment,
			time.Date(2026, 3, 14, 17, 26, 32, 0, bj), nil},
		{"alipay return", Config{NoVerify: true, Return: ReturnBusiness}, alipayGet(alipayReturn().Encode()), keying.SettlesPayment,
			time.Date(2026, 3, 14, 17, 26, 40, 0, bj), nil},
		{"alipay partial refund", Config{NoVerify: true},
			alipayPost(with(alipayNotify(), "out_biz_no", "R1", "refund_fee", "8.00", "gmt_refund", "2026-03-20 10:00:01.320")), keying.SettlesRefund,
			time.Date(2026, 3, 20, 10, 0, 1, 320e6, bj), nil},
		{"alipay closed", Config{NoVerify: true},
			alipayPost(with(alipayNotify(), "trade_status", "TRADE_CLOSED", "gmt_close", "2026-03-14 18:00:00")), "",
			time.Date(2026, 3, 14, 18, 0, 0, 0, bj), nil},
		{"alipay unparsable time", Config{NoVerify: true}, alipayPost(with(alipayNotify(), "gmt_payment", "soon")), keying.SettlesPayment,
			time.Time{}, nil},
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
