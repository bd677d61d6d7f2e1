package caddymodule

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"time"
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

// markRedelivery adds the redelivery headers to an admin redelivery.
func markRedelivery(h http.Header, receivedAt time.Time) {
	h.Set(headerRedelivery, redeliveryToken)
	h.Set(headerReceivedAt, receivedAt.UTC().Format(time.RFC3339Nano))
}

// verifyTime is the clock a request's signature is judged against: now, or
// the first receipt of a notification this process redelivers. Forged
// headers are dropped and change nothing.
func verifyTime(h http.Header) time.Time {
	tok, at := h.Get(headerRedelivery), h.Get(headerReceivedAt)
	if tok == "" && at == "" {
		return now()
	}
	h.Del(headerRedelivery)
	h.Del(headerReceivedAt)
	if subtle.ConstantTimeCompare([]byte(tok), []byte(redeliveryToken)) != 1 {
		return now()
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return now()
	}
	return t
}
