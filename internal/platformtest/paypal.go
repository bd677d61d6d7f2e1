package platformtest

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// PayPal signs webhook events as PayPal does: SHA256withRSA over
// "<transmission id>|<transmission time>|<webhook id>|<crc32(body)>", the
// CRC-32 (IEEE) in decimal, base64, in the PAYPAL-TRANSMISSION-* headers.
type PayPal struct {
	// Key is PayPal's signing key; Certificate(t, Key, …) is what the
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
func (p PayPal) Header(t testing.TB, body []byte, tm time.Time) http.Header {
	t.Helper()
	id := fmt.Sprintf("%s-%s-%s-%s-%s", Nonce(8), Nonce(4), Nonce(4), Nonce(4), Nonce(12))
	return p.TransmissionHeader(t, body, id, tm)
}

// TransmissionHeader is Header for the transmission with the given id, for
// tests that need the same header on every run or name the id themselves.
func (p PayPal) TransmissionHeader(t testing.TB, body []byte, id string, tm time.Time) http.Header {
	t.Helper()
	tt := tm.UTC().Format(time.RFC3339)
	msg := id + "|" + tt + "|" + p.WebhookID + "|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
	certURL := p.CertURL
	if certURL == "" {
		certURL = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270"
	}
	return http.Header{
		"Paypal-Transmission-Id":   {id},
		"Paypal-Transmission-Time": {tt},
		"Paypal-Transmission-Sig":  {base64.StdEncoding.EncodeToString(SignPKCS1(t, p.Key, crypto.SHA256, []byte(msg)))},
		"Paypal-Cert-Url":          {certURL},
		"Paypal-Auth-Algo":         {"SHA256withRSA"},
		"Content-Type":             {"application/json"},
	}
}

// PayPalForgery is the attack PayPal's CRC-only signature allows: forged,
// which must contain a run of at least 64 'a' bytes (inside a JSON string,
// say), comes back with some of those turned into 'b' so that its CRC-32
// equals genuine's. Headers signed for genuine then verify for it too.
func PayPalForgery(t testing.TB, genuine, forged []byte) []byte {
	t.Helper()
	const run = 64
	at := bytes.Index(forged, bytes.Repeat([]byte{'a'}, run))
	if at < 0 {
		t.Fatal("platformtest: the forged body needs a run of 64 'a' to pad")
	}
	out := append([]byte(nil), forged...)
	base := crc32.ChecksumIEEE(out)
	// CRC-32 is affine over GF(2): flipping byte i changes the checksum
	// by a fixed vector v[i], whatever the other bytes are. Find flips
	// whose vectors add up to the difference wanted (Gaussian elimination).
	type row struct {
		v    uint32
		mask uint64 // which flips make up v
	}
	var basis [32]*row
	for i := 0; i < run; i++ {
		out[at+i] = 'b'
		r := &row{v: crc32.ChecksumIEEE(out) ^ base, mask: 1 << i}
		out[at+i] = 'a'
		for b := 31; b >= 0 && r.v != 0; b-- {
			if r.v&(1<<b) == 0 {
				continue
			}
			if basis[b] == nil {
				basis[b] = r
				break
			}
			r.v ^= basis[b].v
			r.mask ^= basis[b].mask
		}
	}
	want := crc32.ChecksumIEEE(genuine) ^ base
	var mask uint64
	for b := 31; b >= 0; b-- {
		if want&(1<<b) == 0 {
			continue
		}
		if basis[b] == nil {
			t.Fatal("platformtest: no CRC-32 forgery with this padding")
		}
		want ^= basis[b].v
		mask ^= basis[b].mask
	}
	for i := 0; i < run; i++ {
		if mask&(1<<i) != 0 {
			out[at+i] = 'b'
		}
	}
	if crc32.ChecksumIEEE(out) != crc32.ChecksumIEEE(genuine) {
		t.Fatal("platformtest: CRC-32 forgery failed")
	}
	return out
}
