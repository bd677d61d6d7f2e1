package stripe

import (
	"net/http"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// fileSecret is the file keygen writes for Stripe.
const fileSecret = "stripe_webhook_secret"

// sender signs a payment_intent.succeeded event with a test secret; the
// body depends on the id, order and amount only, as a retry's does.
var sender = &keying.Sender{
	Summary: "Stripe-Signature (HMAC-SHA256), payment_intent.succeeded",
	Files:   []string{fileSecret},
	Keygen: func() ([]keying.KeyFile, error) {
		return []keying.KeyFile{{Name: fileSecret, Data: []byte("whsec_test" + signer.Nonce(32))}}, nil
	},
	NewID: func() string { return "evt_test_" + signer.Nonce(20) },
	Sign: func(in keying.SendInput) ([]byte, http.Header, error) {
		secret, err := in.Value(in.Secret, fileSecret, "--secret")
		if err != nil {
			return nil, nil, err
		}
		body := signer.StripeEventAt(in.ID, "payment_intent.succeeded", "pi_"+in.Order, in.Amount, keying.SendEventTime)
		return body, signer.StripeHeader(body, secret, in.Now), nil
	},
}
