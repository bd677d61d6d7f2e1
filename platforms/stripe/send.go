package stripe

import (
	"fmt"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// fileSecret is the file keygen writes for Stripe.
const fileSecret = "stripe_webhook_secret"

// sender signs Stripe events by type with a test secret; the body
// depends on the id, type, order, refund and amounts only, as a retry's
// does. The order's objects are pi_<order>, ch_<order> and
// cs_test_<order>, a refund re_<refund>.
var sender = &keying.Sender{
	Summary: "Stripe-Signature (HMAC-SHA256), events by type",
	Files:   []string{fileSecret},
	Keygen: func() ([]keying.KeyFile, error) {
		return []keying.KeyFile{{Name: fileSecret, Data: []byte("whsec_test" + signer.Nonce(32))}}, nil
	},
	NewID: func() string { return "evt_test_" + signer.Nonce(20) },
	Events: []keying.SendEvent{
		{Name: "payment_intent.succeeded", About: "the order's payment intent succeeded"},
		{Name: "payment_intent.payment_failed", About: "a payment attempt failed"},
		{Name: "charge.succeeded", About: "the order's charge"},
		{Name: "charge.refunded", About: "the charge refunded (its refunds listed)"},
		{Name: "refund.created", About: "a refund of the charge"},
		{Name: "checkout.session.completed", About: "the order's Checkout session"},
	},
	RefundEvent: "charge.refunded",
	Sign: func(in keying.SendInput) (keying.Signed, error) {
		secret, err := in.Value(in.Secret, fileSecret, "--secret")
		if err != nil {
			return keying.Signed{}, err
		}
		object, err := stripeObject(in)
		if err != nil {
			return keying.Signed{}, err
		}
		var previous string
		if in.Event == "charge.refunded" {
			// The charge before this refund: what the earlier ones
			// refunded (send keeps no record: --refunded-before).
			previous = fmt.Sprintf(`{"amount_refunded": %d, "refunded": false}`, in.RefundedBefore)
		}
		body := signer.StripeChangeEvent(in.ID, in.Event, object, previous, keying.SendEventTime)
		return keying.Signed{Body: body, Header: signer.StripeHeader(body, secret, in.Now)}, nil
	},
}

// stripeObject is in's event's data.object, as Stripe's API reference
// shows the object.
func stripeObject(in keying.SendInput) (string, error) {
	pi, ch, re := "pi_"+in.Order, "ch_"+in.Order, "re_"+in.Refund
	refund := fmt.Sprintf(`{"id": %q, "object": "refund", "amount": %d, "charge": %q, "payment_intent": %q, "currency": "usd", "reason": "requested_by_customer", "status": "succeeded"}`,
		re, in.RefundAmount, ch, pi)
	switch in.Event {
	case "payment_intent.succeeded":
		return fmt.Sprintf(`{"id": %q, "object": "payment_intent", "amount": %d, "amount_received": %d, "currency": "usd", "latest_charge": %q, "metadata": {"order_id": %q}, "status": "succeeded"}`,
			pi, in.Amount, in.Amount, ch, in.Order), nil
	case "payment_intent.payment_failed":
		return fmt.Sprintf(`{"id": %q, "object": "payment_intent", "amount": %d, "amount_received": 0, "currency": "usd", "last_payment_error": {"code": "card_declined", "decline_code": "insufficient_funds", "message": "Your card has insufficient funds.", "type": "card_error"}, "metadata": {"order_id": %q}, "status": "requires_payment_method"}`,
			pi, in.Amount, in.Order), nil
	case "charge.succeeded":
		return fmt.Sprintf(`{"id": %q, "object": "charge", "amount": %d, "amount_captured": %d, "amount_refunded": 0, "captured": true, "currency": "usd", "paid": true, "payment_intent": %q, "refunded": false, "status": "succeeded"}`,
			ch, in.Amount, in.Amount, pi), nil
	case "charge.refunded":
		return fmt.Sprintf(`{"id": %q, "object": "charge", "amount": %d, "amount_captured": %d, "amount_refunded": %d, "captured": true, "currency": "usd", "paid": true, "payment_intent": %q, "refunded": %t, "refunds": {"object": "list", "data": [%s], "has_more": false, "total_count": 1, "url": "/v1/charges/%s/refunds"}, "status": "succeeded"}`,
			ch, in.Amount, in.Amount, in.RefundedBefore+in.RefundAmount, pi, in.RefundedBefore+in.RefundAmount == in.Amount, refund, ch), nil
	case "refund.created":
		return refund, nil
	case "checkout.session.completed":
		return fmt.Sprintf(`{"id": %q, "object": "checkout.session", "amount_subtotal": %d, "amount_total": %d, "client_reference_id": %q, "currency": "usd", "mode": "payment", "payment_intent": %q, "payment_status": "paid", "status": "complete"}`,
			"cs_test_"+in.Order, in.Amount, in.Amount, in.Order, pi), nil
	}
	return "", fmt.Errorf("no event %q", in.Event)
}
