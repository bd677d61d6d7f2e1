package registry

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// A redelivery sends the journaled notification — the platform's own
// bytes and headers — through its route again. Its signature still
// verifies, but a signed timestamp (Stripe's t=, WeChat Pay's, PayPal's
// transmission time, Standard Webhooks') is judged against when the
// notification was first received, not now: otherwise a notification that
// failed for longer than tolerance could never be redelivered. The admin
// API marks its redeliveries with a token that only this process knows;
// the handler takes the two headers off before anything else reads the
// request, so neither the backend nor the journal sees them.
const (
	headerRedelivery = "Idemgate-Redelivery"
	headerReceivedAt = "Idemgate-Received-At"
)

var redeliveryToken = func() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}()

// MarkRedelivery adds the redelivery headers to an admin redelivery of a
// notification first received at receivedAt.
func MarkRedelivery(h http.Header, receivedAt time.Time) {
	h.Set(headerRedelivery, redeliveryToken)
	h.Set(headerReceivedAt, receivedAt.UTC().Format(time.RFC3339Nano))
}

// RedeliveredAt takes the redelivery headers off h and returns the first
// receipt they carry, when this process marked them; forged headers are
// dropped and give ok false.
func RedeliveredAt(h http.Header) (receivedAt time.Time, ok bool) {
	tok, at := h.Get(headerRedelivery), h.Get(headerReceivedAt)
	if tok == "" && at == "" {
		return time.Time{}, false
	}
	h.Del(headerRedelivery)
	h.Del(headerReceivedAt)
	if subtle.ConstantTimeCompare([]byte(tok), []byte(redeliveryToken)) != 1 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// HashKey is a key as logs and spans show it unless log_keys is on: the
// first 16 hex digits of its SHA-256.
func HashKey(key string) string { return keying.Digest([]byte(key))[:16] }
