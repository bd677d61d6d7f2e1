package generic

import (
	"testing"

	"github.com/idemgate/idemgate/keying"
)

// Generic's fingerprint material is the body's digest, taken when asked
// for: two bodies differ, one body twice is the same, and nothing is
// hashed at Verify (a route keyed on the body never asks).
func TestGenericFingerprintOfBody(t *testing.T) {
	verify := func(body string) (*keying.Notification, []byte) {
		t.Helper()
		n, err := Generic{}.Verify(&keying.Request{Method: "POST", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		return n, []byte(body)
	}
	a, ab := verify(`{"id":"evt_1","amount":100}`)
	b, bb := verify(`{"id":"evt_1","amount":999}`)
	if a.Fingerprint != "" || !a.BodyFingerprint {
		t.Fatalf("Verify took the digest already (%q) or left the body out (%v)", a.Fingerprint, a.BodyFingerprint)
	}
	if got, want := a.FingerprintOf(ab), keying.Digest(ab); got != want {
		t.Fatalf("FingerprintOf = %s, want the body digest %s", got, want)
	}
	if a.FingerprintOf(ab) == b.FingerprintOf(bb) {
		t.Fatal("two bodies gave one fingerprint")
	}
	if again, aab := verify(string(ab)); again.FingerprintOf(aab) != a.FingerprintOf(ab) {
		t.Fatal("one body twice gave two fingerprints")
	}
	p := &keying.Notification{Fingerprint: "material"}
	if got := p.FingerprintOf(ab); got != "material" {
		t.Fatalf("a preset's material = %q, want it unchanged", got)
	}
}
