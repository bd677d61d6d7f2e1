package stripe

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
	stripeAt := presettest.Now.Truncate(time.Second)
	stripeBody := func(typ, object string) []byte {
		return []byte(`{"id":"evt_1","object":"event","created":` + itoa(stripeAt.Unix()) + `,"type":"` + typ + `","data":{"object":` + object + `}}`)
	}
	cases := []struct {
		name    string
		cfg     keying.Config
		req     *keying.Request
		settles keying.Settlement
		at      time.Time
		refs    []string
	}{
		{"stripe charge", keying.Config{NoVerify: true},
			presettest.Post(stripeBody("charge.succeeded", `{"id":"ch_1","object":"charge","amount":500,"currency":"usd","payment_intent":"pi_1"}`), nil),
			keying.SettlesPayment, stripeAt, []string{"ch_1", "pi_1"}},
		{"stripe payment intent, its charge", keying.Config{NoVerify: true},
			presettest.Post(stripeBody("payment_intent.succeeded", `{"id":"pi_2","object":"payment_intent","amount":500,"currency":"usd","latest_charge":"ch_2"}`), nil),
			keying.SettlesPayment, stripeAt, []string{"pi_2", "ch_2"}},
		{"stripe payment intent, charges list (older API)", keying.Config{NoVerify: true},
			presettest.Post(stripeBody("payment_intent.succeeded", `{"id":"pi_3","amount":500,"currency":"usd","charges":{"data":[{"id":"ch_3"}]}}`), nil),
			keying.SettlesPayment, stripeAt, []string{"pi_3", "ch_3"}},
		{"stripe refund", keying.Config{NoVerify: true},
			presettest.Post(stripeBody("refund.created", `{"id":"re_1","object":"refund","amount":200,"currency":"usd","charge":"ch_1","payment_intent":"pi_1"}`), nil),
			keying.SettlesRefund, stripeAt, []string{"re_1", "ch_1", "pi_1"}},
		{"stripe charge refunded", keying.Config{NoVerify: true},
			presettest.Post(stripeBody("charge.refunded", `{"id":"ch_1","object":"charge","amount":500,"amount_refunded":200,"currency":"usd"}`), nil),
			keying.SettlesRefund, stripeAt, []string{"ch_1"}},
		{"stripe customer: no money", keying.Config{NoVerify: true},
			presettest.Post(stripeBody("customer.created", `{"id":"cus_1","object":"customer"}`), nil), "", time.Time{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := presettest.MustNew(t, Preset, c.cfg)
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
