package signer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StripeHeader signs body at ts with the endpoint's whsec_… secret as
// Stripe does (https://docs.stripe.com/webhooks#verify-manually):
// Stripe-Signature "t=<unix ts>,v1=<hex HMAC-SHA256 of "<ts>.<body>">",
// keyed by the whole secret, whsec_ prefix included.
func StripeHeader(body []byte, secret string, ts time.Time) http.Header {
	t := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(t))
	m.Write([]byte("."))
	m.Write(body)
	return http.Header{
		"Stripe-Signature": {"t=" + t + ",v1=" + hex.EncodeToString(m.Sum(nil))},
		"Content-Type":     {"application/json"},
	}
}

// StandardWebhooksHeader signs body for message id at ts with a whsec_…
// secret as the Standard Webhooks specification describes
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):
// webhook-id, webhook-timestamp (unix seconds) and webhook-signature
// "v1,<base64 HMAC-SHA256 of "<id>.<ts>.<body>">", keyed by the base64
// decoding of the secret after its whsec_ prefix.
func StandardWebhooksHeader(secret, id string, ts time.Time, body []byte) (http.Header, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("signer: Standard Webhooks secret is not whsec_<base64>: %w", err)
	}
	t := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + t + "."))
	m.Write(body)
	return http.Header{
		"Webhook-Id":        {id},
		"Webhook-Timestamp": {t},
		"Webhook-Signature": {"v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))},
		"Content-Type":      {"application/json"},
	}, nil
}
