package platformtest

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemgate/idemgate/internal/signer"
)

// StripeEvent is a Stripe event shaped as Stripe's API reference shows one,
// created now, whose object is a payment intent of amount.
func StripeEvent(id, eventType, objectID string, amount int) []byte {
	return StripeEventAt(id, eventType, objectID, amount, time.Now())
}

// StripeEventAt is StripeEvent created at the given time.
func StripeEventAt(id, eventType, objectID string, amount int, created time.Time) []byte {
	object := fmt.Sprintf(`{"id": %q, "object": "payment_intent", "amount": %d, "currency": "usd", "status": "succeeded"}`, objectID, amount)
	return signer.StripeChangeEvent(id, eventType, object, "", created)
}

// StripeHeader signs body at ts with the endpoint's whsec_… secret, using
// stripe-go's own test signer: Stripe-Signature "t=…,v1=…". (signer's
// StripeHeader is a hand-written one, for the CLI; this one stays with
// Stripe's library so that tests check the verifier independently.)
func StripeHeader(body []byte, secret string, ts time.Time) http.Header {
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: ts})
	return http.Header{"Stripe-Signature": {sp.Header}, "Content-Type": {"application/json"}}
}

// StandardWebhooksHeader signs body for message id at ts with a whsec_…
// secret, using the Standard Webhooks reference library: webhook-id,
// webhook-timestamp, webhook-signature. (signer's StandardWebhooksHeader is
// a hand-written one, for the CLI; this one stays with the reference
// library so that tests check the verifier independently.)
func StandardWebhooksHeader(t testing.TB, secret, id string, ts time.Time, body []byte) http.Header {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	return http.Header{
		"Webhook-Id":        {id},
		"Webhook-Timestamp": {strconv.FormatInt(ts.Unix(), 10)},
		"Webhook-Signature": {sig},
		"Content-Type":      {"application/json"},
	}
}
