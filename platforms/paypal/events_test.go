package paypal

import (
	"net/http"
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
	n, err := presettest.MustNew(t, New, Config{NoVerify: true}).Verify(&keying.Request{Method: http.MethodPost, Header: http.Header{},
		Body: platformtest.PayPalEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "CAP-1", "12.34"), Now: now})
	if err != nil || n.Key != "WH-1" || n.Order != "" || n.Money != (keying.Money{Amount: "12.34", Currency: "USD"}) {
		t.Errorf("paypal: %+v %v", n, err)
	}
}
