package platformtest

import (
	"bytes"
	"hash/crc32"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
)

// PayPal signs webhook events as PayPal does: SHA256withRSA over
// "<transmission id>|<transmission time>|<webhook id>|<crc32(body)>", the
// CRC-32 (IEEE) in decimal, base64, in the PAYPAL-TRANSMISSION-* headers.
// Its fields are signer.PayPal's: Key (Certificate(t, Key, …) is what the
// merchant configures or what PAYPAL-CERT-URL serves), WebhookID and
// CertURL (default: a sandbox certificate URL).
type PayPal signer.PayPal

// PayPalEvent is a webhook event shaped as PayPal's documentation shows a
// PAYMENT.CAPTURE.COMPLETED one (signer.PayPalEvent).
func PayPalEvent(id, eventType, resourceID, value string) []byte {
	return signer.PayPalEvent(id, eventType, resourceID, value)
}

// Header signs body for one transmission at tm, with a fresh transmission
// id (each retry is a new transmission).
func (p PayPal) Header(t testing.TB, body []byte, tm time.Time) http.Header {
	t.Helper()
	v, err := signer.PayPal(p).Header(body, tm)
	check(t, err)
	return v
}

// TransmissionHeader is Header for the transmission with the given id, for
// tests that need the same header on every run or name the id themselves.
func (p PayPal) TransmissionHeader(t testing.TB, body []byte, id string, tm time.Time) http.Header {
	t.Helper()
	v, err := signer.PayPal(p).TransmissionHeader(body, id, tm)
	check(t, err)
	return v
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
