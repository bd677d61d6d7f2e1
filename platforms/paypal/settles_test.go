package paypal

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
	cases := []struct {
		name    string
		cfg     Config
		req     *keying.Request
		settles keying.Settlement
		at      time.Time
		refs    []string
	}{
		{"paypal capture", Config{NoVerify: true},
			presettest.Post([]byte(`{"id":"WH-1","create_time":"2026-03-14T09:26:50.000Z","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"42311647XV020574X","create_time":"2026-03-14T09:26:49Z","amount":{"currency_code":"USD","value":"7.47"}}}`), nil),
			keying.SettlesPayment, time.Date(2026, 3, 14, 9, 26, 49, 0, time.UTC), []string{"42311647XV020574X"}},
		{"paypal refund, event time", Config{NoVerify: true},
			presettest.Post([]byte(`{"id":"WH-2","create_time":"2026-03-15T01:00:00Z","event_type":"PAYMENT.CAPTURE.REFUNDED","resource":{"id":"1JU08902781691411","amount":{"currency_code":"USD","value":"2.00"}}}`), nil),
			keying.SettlesRefund, time.Date(2026, 3, 15, 1, 0, 0, 0, time.UTC), []string{"1JU08902781691411"}},
		{"paypal plan: no money", Config{NoVerify: true},
			presettest.Post(ppEvent("WH-3", "BILLING.PLAN.CREATED", "P-1"), nil), "", time.Time{}, nil},
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
