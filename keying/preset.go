package keying

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// Preset is everything idemgate knows of one platform besides checking a
// notification: how its sender is named, what it takes as "received",
// when it retries, and which placeholders and pinning options a route of
// it may use (its settings, such as merchant pinning, are its module's).
// Each platform declares one; the registry (package
// platforms) lists them, and nothing else names a platform: a caller
// looks the preset up by the name a route gives and reads these values.
// What reconciliation with its bill must allow for is not here but in
// its bill.Traits, so that the gate does not pull in the bill readers.
type Preset struct {
	// Name is the preset's name as written after `platform`.
	Name string
	// Title is the platform as people name it, at the start of a sentence
	// ("Alipay", "WeChat Pay", "The sender").
	Title string
	// Ack is what the platform takes as "received, stop retrying": the
	// answer to a notification queued for asynchronous delivery, or to a
	// duplicate whose own answer is not at hand. Zero when the sender is
	// unknown (generic): a route must say.
	Ack Ack
	// Schedule is the platform's retry schedule (retries.go); nil when
	// the sender is unknown.
	Schedule Schedule
	// KeyRequired: the platform has no default key, so a route's key
	// template is required, and only a key written as an order's business
	// event has order state (generic).
	KeyRequired bool
	// OwnEvents: the platform names each business event itself (Stripe,
	// PayPal, Standard Webhooks: the event id is its own event), so there
	// are no orders to group events under and an event is kept as long as
	// the platform lets it be resent by hand. Reconciliation finds its
	// events by the objects the bill names (bill.Traits.RefPaths).
	OwnEvents bool

	// Orders: its notifications name an order and its business event,
	// {idempotency.order} and {idempotency.event}.
	Orders bool
	// Extra: its notifications offer fields that are not in the raw body,
	// {idempotency.<Name>.<path>} (Notification.Extra).
	Extra bool
	// SecretFor, when set, says Orders and Extra come from an encrypted
	// part that only `secret` opens, and names that secret ("the APIv3
	// key", WeChat Pay v3's resource).
	SecretFor string

	// SignedFor is how long after its signed time a backend's own check
	// refuses a notification sent as it is (WeChat Pay v3's
	// Wechatpay-Timestamp, PayPal's transmission time, as the platforms'
	// SDKs check them); 0 where the platform signs no time.
	SignedFor time.Duration
	// SignedAt reads the time the platform signed a notification from its
	// headers (WeChat Pay v3's Wechatpay-Timestamp, PayPal's
	// PAYPAL-TRANSMISSION-TIME): SignedFor counts from it, not from
	// receipt. Nil where the platform signs no time.
	SignedAt func(hdr http.Header) (time.Time, bool)

	// Channels, for a platform whose notifications come by more than one
	// way, each with its own success rule (Alipay: the notify POST, the
	// browser's signed return GET); the channel a request's method picks
	// judges the backend's answer, unless the route writes `success`
	// (one with body or header conditions does not judge a Page channel).
	// Nil: Platform.Success judges every request.
	Channels []Channel
}

// Ack is an answer: status, body and the body's content type ("" to
// guess it from the body).
type Ack struct {
	Status      int
	Body        string
	ContentType string
}

// Resigner signs body afresh at time at, setting the signature headers of
// hdr (a redelivery's copy of the original's).
type Resigner func(hdr http.Header, body []byte, at time.Time) error

// RefsAt appends to refs the distinct ids at paths of f.
func RefsAt(f *Fields, paths, refs []string) []string {
	for _, p := range paths {
		if v, _, _ := f.JSON(p); v != "" && !strings.HasPrefix(v, "{") && !slices.Contains(refs, v) {
			refs = append(refs, v)
		}
	}
	return refs
}
