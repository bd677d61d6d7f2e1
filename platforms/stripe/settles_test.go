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
		cfg     Config
		req     *keying.Request
		settles keying.Settlement
		at      time.Time
		refs    []string
	}{
		{"stripe charge", Config{NoVerify: true},
			presettest.Post(stripeBody("charge.succeeded", `{"id":"ch_1","object":"charge","amount":500,"currency":"usd","payment_intent":"pi_1"}`), nil),
			keying.SettlesPayment, stripeAt, []string{"ch_1", "pi_1"}},
		{"stripe payment intent, its charge", Config{NoVerify: true},
			presettest.Post(stripeBody("payment_intent.succeeded", `{"id":"pi_2","object":"payment_intent","amount":500,"currency":"usd","latest_charge":"ch_2"}`), nil),
			keying.SettlesPayment, stripeAt, []string{"pi_2", "ch_2"}},
		{"stripe payment intent, charges list (older API)", Config{NoVerify: true},
			presettest.Post(stripeBody("payment_intent.succeeded", `{"id":"pi_3","amount":500,"currency":"usd","charges":{"data":[{"id":"ch_3"}]}}`), nil),
			keying.SettlesPayment, stripeAt, []string{"pi_3", "ch_3"}},
		{"stripe refund", Config{NoVerify: true},
			presettest.Post(stripeBody("refund.created", `{"id":"re_1","object":"refund","amount":200,"currency":"usd","charge":"ch_1","payment_intent":"pi_1"}`), nil),
			keying.SettlesRefund, stripeAt, []string{"re_1", "ch_1", "pi_1"}},
		{"stripe charge refunded", Config{NoVerify: true},
			presettest.Post(stripeBody("charge.refunded", `{"id":"ch_1","object":"charge","amount":500,"amount_refunded":200,"currency":"usd"}`), nil),
			keying.SettlesRefund, stripeAt, []string{"ch_1"}},
		{"stripe customer: no money", Config{NoVerify: true},
			presettest.Post(stripeBody("customer.created", `{"id":"cus_1","object":"customer"}`), nil), "", time.Time{}, nil},
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

// TestChargeRefundedAmount: a charge.refunded event's money is what it
// refunded, not the charge's amount: amount_refunded less the amount
// refunded before (data.previous_attributes, as Stripe sends it).
func TestChargeRefundedAmount(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       keying.Money
	}{
		{"a second partial refund", `{"object":{"id":"ch_1","object":"charge","amount":1000,"amount_refunded":500,"currency":"usd"},` +
			`"previous_attributes":{"amount_refunded":200,"refunded":false}}`, keying.Money{Amount: "3.00", Currency: "USD"}},
		{"a first refund", `{"object":{"id":"ch_1","object":"charge","amount":1000,"amount_refunded":250,"currency":"usd"},` +
			`"previous_attributes":{"amount_refunded":0}}`, keying.Money{Amount: "2.50", Currency: "USD"}},
		{"no previous attributes: the total refunded", `{"object":{"id":"ch_1","object":"charge","amount":1000,"amount_refunded":400,"currency":"usd"}}`,
			keying.Money{Amount: "4.00", Currency: "USD"}},
		{"zero-decimal currency", `{"object":{"id":"ch_1","object":"charge","amount":5000,"amount_refunded":3000,"currency":"jpy"},` +
			`"previous_attributes":{"amount_refunded":1000}}`, keying.Money{Amount: "2000", Currency: "JPY"}},
		{"no amount_refunded: the charge's amount", `{"object":{"id":"ch_1","object":"charge","amount":1000,"currency":"usd"}}`,
			keying.Money{Amount: "10.00", Currency: "USD"}},
		{"a previous total above the total is not subtracted", `{"object":{"id":"ch_1","object":"charge","amount":1000,"amount_refunded":100,"currency":"usd"},` +
			`"previous_attributes":{"amount_refunded":900}}`, keying.Money{Amount: "1.00", Currency: "USD"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := `{"id":"evt_1","object":"event","type":"charge.refunded","created":1773480000,"data":` + c.data + `}`
			n, err := presettest.MustNew(t, New, Config{NoVerify: true}).Verify(presettest.Post([]byte(body), nil))
			if err != nil {
				t.Fatal(err)
			}
			if n.Money != c.want {
				t.Fatalf("Money %+v, want %+v", n.Money, c.want)
			}
		})
	}
	// Other events keep the object's amount.
	body := `{"id":"evt_2","object":"event","type":"refund.created","created":1773480000,"data":{"object":` +
		`{"id":"re_1","object":"refund","amount":200,"amount_refunded":999,"currency":"usd","charge":"ch_1"}}}`
	n, err := presettest.MustNew(t, New, Config{NoVerify: true}).Verify(presettest.Post([]byte(body), nil))
	if err != nil || n.Money.Amount != "2.00" {
		t.Fatalf("refund.created: %+v %v, want 2.00", n.Money, err)
	}
}
