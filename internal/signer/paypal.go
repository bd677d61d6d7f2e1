package signer

import (
	"crypto"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"time"
)

// PayPal signs webhook events as PayPal does: SHA256withRSA over
// "<transmission id>|<transmission time>|<webhook id>|<crc32(body)>", the
// CRC-32 (IEEE) in decimal, base64, in the PAYPAL-TRANSMISSION-* headers.
type PayPal struct {
	// Key is PayPal's signing key; Certificate(Key, …) is what the
	// merchant configures or what PAYPAL-CERT-URL serves.
	Key *rsa.PrivateKey
	// WebhookID is the merchant's webhook subscription id.
	WebhookID string
	// CertURL goes in PAYPAL-CERT-URL; default: a sandbox certificate URL.
	CertURL string
}

// PayPalEvent is a webhook event shaped as PayPal's documentation shows a
// PAYMENT.CAPTURE.COMPLETED one.
func PayPalEvent(id, eventType, resourceID, value string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"event_version":"1.0","create_time":"2026-03-14T09:26:50.000Z","resource_type":"capture","resource_version":"2.0","event_type":%q,"summary":"Payment completed for $ %s USD","resource":{"id":%q,"amount":{"currency_code":"USD","value":%q},"final_capture":true,"status":"COMPLETED"},"links":[{"href":"https://api.sandbox.paypal.com/v1/notifications/webhooks-events/%s","rel":"self","method":"GET"}]}`,
		id, eventType, value, resourceID, value, id))
}

// Header signs body for one transmission at tm, with a fresh transmission
// id (each retry is a new transmission).
func (p PayPal) Header(body []byte, tm time.Time) (http.Header, error) {
	id := fmt.Sprintf("%s-%s-%s-%s-%s", Nonce(8), Nonce(4), Nonce(4), Nonce(4), Nonce(12))
	return p.TransmissionHeader(body, id, tm)
}

// TransmissionHeader is Header for the transmission with the given id, for
// callers that need the same header on every run or name the id themselves.
func (p PayPal) TransmissionHeader(body []byte, id string, tm time.Time) (http.Header, error) {
	tt := tm.UTC().Format(time.RFC3339)
	msg := id + "|" + tt + "|" + p.WebhookID + "|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
	sig, err := SignPKCS1(p.Key, crypto.SHA256, []byte(msg))
	if err != nil {
		return nil, err
	}
	certURL := p.CertURL
	if certURL == "" {
		certURL = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270"
	}
	return http.Header{
		"Paypal-Transmission-Id":   {id},
		"Paypal-Transmission-Time": {tt},
		"Paypal-Transmission-Sig":  {base64.StdEncoding.EncodeToString(sig)},
		"Paypal-Cert-Url":          {certURL},
		"Paypal-Auth-Algo":         {"SHA256withRSA"},
		"Content-Type":             {"application/json"},
	}, nil
}
