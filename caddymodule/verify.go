package caddymodule

import (
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
)

// verifyTime is the clock a request's signature is judged against: now, or
// the first receipt of a notification redelivered with its platform's own
// signature (redeliver.go: only a redelivery in process carries the mark,
// so no request from outside can claim one).
func (h *Handler) verifyTime(r *http.Request) time.Time {
	if rd := redeliveryOf(r.Context()); rd != nil && !rd.resigned {
		return rd.firstSeen
	}
	return h.now()
}

// backendTolerance is how old a signed timestamp the platforms' own SDKs
// accept (WeChat Pay's wechatpay-go and PayPal's verification: 5 minutes):
// what a backend that checks the signature itself allows.
const backendTolerance = 5 * time.Minute

// resigner signs a redelivery afresh where the route holds the platform's
// signing secret, with the current time over the same body; nil where the
// platform signs with its own private key (Alipay, WeChat Pay v3) or a
// certificate (PayPal), or the route does not verify.
func resigner(platform, secret string, verifyOff bool) func(http.Header, []byte, time.Time) error {
	if secret == "" || verifyOff {
		return nil
	}
	switch platform {
	case "stripe":
		return func(hdr http.Header, body []byte, at time.Time) error {
			hdr.Set("Stripe-Signature", signer.StripeHeader(body, secret, at).Get("Stripe-Signature"))
			return nil
		}
	case "standard_webhooks":
		return func(hdr http.Header, body []byte, at time.Time) error {
			sh, err := signer.StandardWebhooksHeader(secret, hdr.Get("Webhook-Id"), at, body)
			if err != nil {
				return err
			}
			hdr.Set("Webhook-Timestamp", sh.Get("Webhook-Timestamp"))
			hdr.Set("Webhook-Signature", sh.Get("Webhook-Signature"))
			return nil
		}
	}
	return nil
}

// signedFor is how long after its signed time a backend's own check
// refuses this route's notifications sent as they are: WeChat Pay v3's
// Wechatpay-Timestamp and PayPal's transmission time; 0 where the platform
// signs no time (Alipay, WeChat Pay v2) or nothing is signed.
func (h *Handler) signedFor() time.Duration {
	switch h.Platform {
	case "wechatpay", "paypal":
		return backendTolerance
	}
	return 0
}
