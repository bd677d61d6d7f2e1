package stripe

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestPlatformEventMoney: Stripe, PayPal and Standard Webhooks keep one
// business event per event id (no order), with the amount their events
// carry.
func TestPlatformEventMoney(t *testing.T) {
	now := presettest.Now
	stripe := presettest.MustNew(t, New, Config{Secret: "whsec_money"})
	for _, c := range []struct {
		amount int
		cur    string
		want   keying.Money
	}{{990, "usd", keying.Money{Amount: "9.90", Currency: "USD"}}, {500, "jpy", keying.Money{Amount: "500", Currency: "JPY"}}} {
		body := []byte(strings.Replace(string(platformtest.StripeEventAt("evt_m", "charge.succeeded", "ch_1", c.amount, now)), `"usd"`, `"`+c.cur+`"`, 1))
		n, err := stripe.Verify(&keying.Request{Method: http.MethodPost, Header: platformtest.StripeHeader(body, "whsec_money", now), Body: body, Now: now})
		if err != nil || n.Key != "evt_m" || n.Order != "" || n.Event != "" || n.Money != c.want {
			t.Errorf("stripe %d %s: %+v %v", c.amount, c.cur, n, err)
		}
	}
}
