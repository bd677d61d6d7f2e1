// Package keying turns a payment notification into what idemgate needs to
// deduplicate it: a verified signature, an idempotency key, a fingerprint of
// what must not change between copies of one key, and the platform's rule for
// what counts as a successful answer.
//
// A [Platform] (a platform's configured check, built by its package from
// its own Config; the platforms live in the platforms/ folders, one package
// each, listed by package platforms) verifies the raw bytes of a [Request] first and only then parses it, so
// a key is never taken from content the platform did not sign. A [Preset]
// describes a platform beyond that check. [Fields] gives lazy, read-only
// access to a body as JSON, form or XML for key templates.
//
// This package must not import Caddy: the Caddy adapter maps its placeholders
// onto [Fields] and [Notification].
package keying

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"time"
)

// Errors a Platform returns; callers branch on them with errors.Is.
var (
	// ErrSignature: the signature is missing or wrong, or the timestamp is
	// outside the tolerance. The gateway answers 401 and claims nothing.
	ErrSignature = errors.New("signature verification failed")
	// ErrMalformed: the notification cannot be parsed or lacks a field the
	// key needs. The gateway answers 400 with the reason.
	ErrMalformed = errors.New("malformed notification")
	// ErrMerchant: the signature verifies, but the notification is for a
	// merchant the route does not accept (app_id, mchid pinning). The
	// gateway answers 403 "merchant not accepted" and claims nothing: it
	// is no signature problem, and no key to rotate.
	ErrMerchant = errors.New("merchant not accepted")
	// ErrUnavailable: something the check needs (the PayPal transmission
	// log in the store) did not answer. The gateway treats it as a store
	// error (503 by default) and claims nothing.
	ErrUnavailable = errors.New("check unavailable")
	// ErrChannel: the notification came by a channel the route does not
	// take (Alipay's signed browser return on a route that says neither
	// `return business` nor `return display`). The gateway answers 405
	// and claims nothing; see ChannelError.
	ErrChannel = errors.New("channel not taken by this route")
)

// ChannelError is a notification refused for the channel it came by: Msg
// is the short line its sender is told (it names the settings that take
// the channel), Detail the full reason for the log.
type ChannelError struct{ Msg, Detail string }

func (e *ChannelError) Error() string { return e.Msg + ": " + e.Detail }
func (e *ChannelError) Unwrap() error { return ErrChannel }

// Request is a notification as received. Body holds the raw bytes, already
// bounded by the gateway's max_body; nothing here may modify them, because the
// same bytes go on to the backend.
type Request struct {
	Method string
	URL    *url.URL
	Header http.Header
	Body   []byte
	// Now is the time to judge timestamps and certificates against.
	Now time.Time
	// Context bounds what a check waits for (a PayPal certificate fetch,
	// the transmission log); nil means context.Background().
	Context context.Context
}

// Ctx returns r's context or the background one.
func (r *Request) Ctx() context.Context {
	if r.Context != nil {
		return r.Context
	}
	return context.Background()
}

// Notification is what a verified request yields.
type Notification struct {
	// Fields reads the body (JSON, form or XML) for key templates.
	Fields *Fields
	// Key is the preset's default idempotency key, built from signed
	// content, without a platform prefix (the caller puts the route's
	// scope in front); "" for generic, where the key template is required.
	// For a preset that classifies business events it is
	// Order + ":" + Event.
	Key string
	// Order is the order this notification reports on, "<merchant or
	// app>:<order>" (Alipay "<app_id>:<trade_no>", WeChat Pay
	// "<mchid>:<transaction_id>"), and Event its business event in that
	// order ("paid", "refund:<id>", "closed"; see EventPaid); both "" for
	// the presets whose platform names each event itself (Stripe, PayPal,
	// Standard Webhooks: the event id is its own business event).
	Order, Event string
	// Money is the amount and currency the signed content names (Alipay
	// total_amount or refund_fee, WeChat Pay amount.total or
	// amount.refund, Stripe data.object.amount, PayPal resource.amount),
	// in major units; zero when it names none.
	Money Money
	// RefundTotal: Money is what the order's refunds add up to so far
	// (Alipay's refund_fee), not this refund's own amount, which is its
	// increase over the order's other refunds (RefundIncrease): what
	// every surface shows.
	RefundTotal bool
	// Settles, At and Refs are what reconciliation with the platform's
	// bill needs (settles.go): whether the event shows there as a payment
	// or a refund ("" for one that moves no money: closed, a refund that
	// failed), when the platform says it happened (Alipay gmt_payment,
	// gmt_refund; WeChat Pay success_time, v2 time_end; Stripe the
	// event's created; PayPal the resource's create_time; zero when the
	// notification names none), and the objects the bill names for a
	// platform whose key is an event id (Stripe data.object.id and the
	// charge or intent behind it; PayPal resource.id).
	Settles Settlement
	At      time.Time
	Refs    []string
	// MerchantRefs are the merchant's own names for what the
	// notification reports on, from its signed content only: the order
	// number a customer quotes to support (Alipay and WeChat Pay
	// out_trade_no), a refund's (out_biz_no, out_refund_no), Stripe's and
	// PayPal's object ids and the merchant's references they carry. The
	// gateway finds keys by them (search.go); nil when there are none.
	MerchantRefs []string
	// Type is the platform's own name of the event when the key is the
	// event's id and so names no event (Stripe's type,
	// "charge.refunded"); "" elsewhere. The operator's views show it as
	// the event.
	Type string
	// Payment is the platform's id of the payment the event is about when
	// each event of it has an id of its own (Stripe's PaymentIntent, which
	// its charges and refunds name): search finds the payment's other
	// events by it. "" when there is none.
	Payment string
	// Fingerprint is the material (not yet hashed) that must be equal
	// between copies of one key; "" means no check. Read it with
	// FingerprintOf.
	Fingerprint string
	// BodyFingerprint says the material is the raw body's digest
	// (generic), taken by FingerprintOf only when a route checks it: a
	// route keyed on the body, whose fingerprint is off by default, never
	// hashes the body.
	BodyFingerprint bool
	// Extra resolves platform fields that are not in the raw body, such as
	// WeChat Pay's decrypted resource: {idempotency.<platform>.<path>}.
	// Nil when the platform has none.
	Extra func(path string) (string, bool)
	// Via names the channel a business event ran by when it is not the
	// platform's server notification ("GET /alipay/return": Alipay's
	// browser return on a route with `return business`), so the order
	// page and reconciliation can say the notify was answered from it;
	// "" for the notify.
	Via string
	// Page: the notification is a page view, no business event (Alipay's
	// browser return on a route with `return display`): Key is its own,
	// nothing of it goes into its order's state, and it moves no money.
	Page bool
	// Decrypted is the plaintext of an encrypted notification (WeChat Pay
	// v3's resource, with the APIv3 key), for an operator's opt-in view;
	// nil otherwise. Never logged.
	Decrypted []byte
}

// Platform is one notification format: a preset or generic.
type Platform interface {
	// Name is the preset's name as written after `platform`.
	Name() string
	// Verify checks r's signature on its raw bytes and parses it.
	// Errors wrap ErrSignature, ErrMalformed or ErrMerchant.
	Verify(r *Request) (*Notification, error)
	// Success tells whether the backend's answer means "handled": such an
	// answer is remembered, any other releases the key for a retry.
	Success(status int, header http.Header, body []byte) bool
	// RetryWindow is how long the platform keeps retrying one
	// notification; the answer TTL should be at least that.
	RetryWindow() time.Duration
}

// ErrNeedsSecret is wrapped by a platform's constructor when its secret or
// key is missing and it is not told to skip verification (`verify off`).
var ErrNeedsSecret = errors.New("needs its secret or key (or `verify off`)")

// Is2xx is the success rule of most webhook senders.
func Is2xx(status int) bool { return status >= 200 && status < 300 }

// FingerprintOf returns n's fingerprint material; body is the raw body n
// was verified from.
func (n *Notification) FingerprintOf(body []byte) string {
	if n.BodyFingerprint {
		return Digest(body)
	}
	return n.Fingerprint
}

// FingerprintDigest is Digest of n's fingerprint material (FingerprintOf),
// "" when it has none: a body's material is hashed again as its hex
// digest, here on the stack rather than as strings of its own.
func (n *Notification) FingerprintDigest(body []byte) string {
	if !n.BodyFingerprint {
		if n.Fingerprint == "" {
			return ""
		}
		var buf [256]byte
		return Digest(append(buf[:0], n.Fingerprint...))
	}
	var m [2 * sha256.Size]byte
	sum := sha256.Sum256(body)
	hex.Encode(m[:], sum[:])
	return Digest(m[:])
}

// Digest is a hex SHA-256, the form fingerprints and hashed keys take.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}
