package keying

import (
	"strings"
	"testing"
)

// TestFingerprintDigest: a notification's fingerprint digest is the
// digest of its material as FingerprintOf gives it (the form stored
// claims hold), for a body's digest, for a platform's material of any
// length, and "" without material.
func TestFingerprintDigest(t *testing.T) {
	body := []byte(`{"id":"evt_1","amount":990}`)
	for _, n := range []*Notification{
		{BodyFingerprint: true},
		{Fingerprint: "amount=990|currency=usd"},
		{Fingerprint: strings.Repeat("long material ", 40)},
	} {
		if got, want := n.FingerprintDigest(body), Digest([]byte(n.FingerprintOf(body))); got != want {
			t.Errorf("%+v: FingerprintDigest = %s, want %s", n, got, want)
		}
	}
	if got := (&Notification{}).FingerprintDigest(body); got != "" {
		t.Errorf("no material: FingerprintDigest = %q, want none", got)
	}
	// The hex SHA-256 of "abc".
	if got := Digest([]byte("abc")); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("Digest(abc) = %s", got)
	}
}
