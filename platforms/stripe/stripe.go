// Package stripe is the Stripe preset: Stripe-Signature's HMAC over the
// event, each event id its own business event, re-signed on redelivery.
package stripe

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// Preset is Stripe's: answered 200, each event its own, re-signed
// with the endpoint's secret on redelivery.
var Preset = &keying.Preset{
	Name: "stripe", Title: "Stripe",
	Ack: keying.Ack{Status: 200},
	// Stripe, "Retry behavior" (docs.stripe.com/webhooks#retries): "In live
	// mode, Stripe attempts to deliver a given event to your webhook
	// endpoint for up to 3 days with an exponential back off." The waits
	// are not published: doubling from one hour, at most a day, ending
	// within the three days.
	Schedule:  keying.ExpBackoff(time.Hour, 24*time.Hour, 72*time.Hour-10*time.Minute),
	OwnEvents: true,
}

// resigner signs a redelivered copy afresh with the endpoint's secret.
func resigner(secret string) keying.Resigner {
	return func(hdr http.Header, body []byte, at time.Time) error {
		hdr.Set("Stripe-Signature", signer.StripeHeader(body, secret, at).Get("Stripe-Signature"))
		return nil
	}
}

// Stripe verifies Stripe webhook events.
//
// Signature: Stripe-Signature "t=<unix>,v1=<hex>[,v1=<hex>…]"; each v1 is
// the HMAC-SHA256 of "<t>.<body>" keyed by the whole whsec_… secret, and any
// one may match (Stripe sends two while a secret is being rolled). A t older
// than the tolerance (5 min) is rejected; v0 and unknown schemes are ignored.
//
// Key: {id} (the event id, the same on every retry: its own business
// event). Money: data.object.amount in minor units with
// data.object.currency. Fingerprint: type, data.object.id. Success: 2xx. No Extra: {idempotency.json.*} reads
// the event.
type Stripe struct {
	secret   []byte
	noVerify bool
	tol      time.Duration
}

// Config is what a route configures Stripe's check with.
type Config struct {
	// Secret is the endpoint's signing secret (whsec_…).
	Secret string
	// NoVerify runs the check without signatures (`verify off`).
	NoVerify bool
	// Tolerance for the signed t; 0 means keying.DefaultTolerance.
	Tolerance time.Duration
}

// New returns Stripe's check configured with cfg. Errors read
// "stripe: <what>" and wrap keying.ErrNeedsSecret when the secret is
// missing.
func New(cfg Config) (keying.Platform, error) {
	if cfg.Secret == "" && !cfg.NoVerify {
		return nil, keying.NeedsSecret("stripe", "secret (the endpoint's whsec_… signing secret)")
	}
	return &Stripe{secret: []byte(cfg.Secret), noVerify: cfg.NoVerify, tol: keying.TimeTolerance(cfg.Tolerance)}, nil
}

func (*Stripe) Name() string { return "stripe" }

// maxStripeSignatures bounds the v1 entries checked in one header.
const maxStripeSignatures = 8

func (s *Stripe) Verify(r *keying.Request) (*keying.Notification, error) {
	if !s.noVerify {
		if err := s.verify(r); err != nil {
			return nil, err
		}
	}
	f := keying.NewFields(r)
	id, err := keying.RequireJSON("stripe", f, "id")
	if err != nil {
		return nil, err
	}
	fp, err := keying.JSONFields("stripe", f, "type", "data.object.id", "data.object.amount", "data.object.currency")
	if err != nil {
		return nil, err
	}
	n := &keying.Notification{Fields: f, Key: id, Fingerprint: keying.Material(fp[:2]...)}
	if fp[2] != "" && fp[3] != "" {
		// Charges, payment intents and refunds carry amount in the
		// currency's smallest unit (stripe.com/docs/currencies).
		if n.Money, err = keying.FromMinor(fp[2], fp[3]); err != nil {
			return nil, keying.Malformed("stripe", "data.object.amount: %v", err)
		}
	}
	if fp[0] == "charge.refunded" {
		if m, ok := refundedNow(f, fp[3]); ok {
			n.Money = m
		}
	}
	stripeSettles(n, fp[0])
	n.MerchantRefs = keying.SearchRefsAt(f, stripeSearchPaths...)
	n.Type, n.Payment = fp[0], paymentOf(f)
	return n, nil
}

// paymentOf is the PaymentIntent an event's object is or names (a
// charge's, a refund's, a Checkout session's payment_intent): every event
// of one payment names it, where only the intent's own carry the
// merchant's metadata.order_id.
func paymentOf(f *keying.Fields) string {
	if obj, _, _ := f.JSON("data.object.object"); obj == "payment_intent" {
		id, _, _ := f.JSON("data.object.id")
		return id
	}
	if refs := keying.SearchRefsAt(f, "data.object.payment_intent"); len(refs) == 1 {
		return refs[0]
	}
	return ""
}

func (s *Stripe) verify(r *keying.Request) error {
	const p = "stripe"
	h, err := keying.SignatureHeader(p, r, "Stripe-Signature")
	if err != nil {
		return err
	}
	var ts string
	var sigs [][]byte
	malformed := 0 // v1 values that are not 32 bytes of hex
	for _, item := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			if ts != "" {
				return keying.SigErr(p, "Stripe-Signature has two timestamps")
			}
			ts = v
		case "v1":
			if len(sigs) >= maxStripeSignatures {
				return keying.SigErr(p, "Stripe-Signature has too many signatures")
			}
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				malformed++
				continue
			}
			sigs = append(sigs, b)
		}
	}
	if ts == "" {
		return keying.SigErr(p, "Stripe-Signature has no timestamp")
	}
	if len(sigs) == 0 && malformed > 0 {
		return keying.SigErr(p, "Stripe-Signature's v1 signature is malformed (want 64 hex digits, an HMAC-SHA256)")
	}
	if len(sigs) == 0 {
		return keying.SigErr(p, "Stripe-Signature has no v1 signature")
	}
	if _, err := keying.UnixTimestamp(p, "Stripe-Signature timestamp", ts, r.Now, s.tol, true); err != nil {
		return err
	}
	mac := hmac.New(sha256.New, s.secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(r.Body)
	want := mac.Sum(nil)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return keying.SigErr(p, "no v1 signature matches")
}

// Success: any 2xx.
func (*Stripe) Success(status int, _ http.Header, _ []byte) bool { return keying.Is2xx(status) }

// RetryWindow: Stripe retries live-mode events for up to 3 days.
func (*Stripe) RetryWindow() time.Duration { return 72 * time.Hour }

// Stripe's event types whose object is money in or money back
// (docs.stripe.com/api/events/types). charge.refunded names the charge,
// whose amount is the charge's: its money is the refund's (refundedNow),
// but reconciliation, matching by the charge every refund of it names,
// compares no amount for it (see the reconcile report).
var (
	stripePaymentEvents = map[string]bool{
		"charge.succeeded": true, "charge.captured": true, "payment_intent.succeeded": true,
		"checkout.session.completed": true, "invoice.paid": true, "invoice.payment_succeeded": true,
	}
	stripeRefundEvents = map[string]bool{
		"charge.refunded": true, "charge.refund.updated": true, "refund.created": true, "refund.updated": true,
	}
)

// stripeRefPaths are where a Stripe event's object names what a
// balance-transaction export names: its own id, and for a payment intent,
// a Checkout session or an invoice the charge or intent behind it (a
// charge.refunded's object is the charge itself; a refund's, the refund,
// whose charge a Dashboard export names as the refund row's source).
var stripeRefPaths = []string{"data.object.id", "data.object.latest_charge", "data.object.charges.data.0.id",
	"data.object.charge", "data.object.payment_intent"}

// stripeSearchPaths are where an event names what a merchant and its
// customer call the payment: the object's id, the intent and the charge
// behind it, a Checkout session's client_reference_id and the order id a
// merchant commonly puts in metadata. The whole body is signed.
var stripeSearchPaths = []string{"data.object.id", "data.object.payment_intent", "data.object.charge",
	"data.object.latest_charge", "data.object.client_reference_id", "data.object.metadata.order_id"}

// stripeSettles sets n's reconciliation fields from a verified event.
func stripeSettles(n *keying.Notification, typ string) {
	switch {
	case stripePaymentEvents[typ]:
		n.Settles = keying.SettlesPayment
	case stripeRefundEvents[typ]:
		n.Settles = keying.SettlesRefund
	default:
		return
	}
	created, _, _ := n.Fields.JSON("created")
	n.At = unixTime(created)
	n.Refs = keying.RefsAt(n.Fields, stripeRefPaths, n.Refs)
}

// refundedNow is what a charge.refunded event refunded: its object is the
// charge, whose amount is the charge's and amount_refunded the total
// refunded so far, so this refund is amount_refunded less the one in
// data.previous_attributes (as Stripe sends it). Without that, the total
// refunded: exact for a first refund, and never more than was refunded.
// false: the event names no amount_refunded (the charge's amount stays).
func refundedNow(f *keying.Fields, currency string) (keying.Money, bool) {
	total, err := jsonInt(f, "data.object.amount_refunded")
	if err != nil || currency == "" {
		return keying.Money{}, false
	}
	if before, err := jsonInt(f, "data.previous_attributes.amount_refunded"); err == nil && before <= total {
		total -= before
	}
	m, err := keying.FromMinor(strconv.FormatInt(total, 10), currency)
	return m, err == nil
}

// jsonInt is the whole number at path, an error when it is absent or not one.
func jsonInt(f *keying.Fields, path string) (int64, error) {
	s, ok, err := f.JSON(path)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%s: absent", path)
	}
	return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
}

// unixTime reads Stripe's created (seconds).
func unixTime(s string) time.Time {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}
