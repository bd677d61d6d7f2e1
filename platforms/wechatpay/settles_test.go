package wechatpay

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestSettles: what reconciliation reads of each preset's notification —
// payment or refund (or neither), the platform's time of the event and,
// for Stripe and PayPal, the objects a bill names. Signatures are off: the
// verifiers have their own tests; the bodies are the platforms' shapes.
func TestSettles(t *testing.T) {
	bj := time.FixedZone("CST", 8*3600)
	wx := func(eventType, resource string) *keying.Request {
		body := platformtest.WechatPay{APIv3Key: wxAPIv3Key}.Body(t, platformtest.WechatPayEvent{ID: "EV-1", EventType: eventType, Resource: resource})
		return presettest.Post(body, http.Header{"Content-Type": {"application/json"}})
	}
	refundRes := platformtest.WechatPayRefund("1008450740201411110005820873", "20150806125346", "50200207182018070300011301001", "SUCCESS", 999, 999)
	cases := []struct {
		name    string
		cfg     Config
		req     *keying.Request
		settles keying.Settlement
		at      time.Time
		refs    []string
	}{
		{"wechatpay payment", Config{Secret: wxAPIv3Key, NoVerify: true}, wx("TRANSACTION.SUCCESS", wxTransaction("SUCCESS", 100)),
			keying.SettlesPayment, time.Date(2026, 3, 14, 17, 26, 32, 0, bj), nil},
		{"wechatpay refund", Config{Secret: wxAPIv3Key, NoVerify: true}, wx("REFUND.SUCCESS", refundRes),
			keying.SettlesRefund, time.Date(2026, 3, 14, 17, 30, 0, 0, bj), nil},
		{"wechatpay refund abnormal", Config{Secret: wxAPIv3Key, NoVerify: true}, wx("REFUND.ABNORMAL", refundRes),
			"", time.Date(2026, 3, 14, 17, 30, 0, 0, bj), nil},
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
