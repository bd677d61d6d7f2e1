package keying

import (
	"crypto/rsa"
	"errors"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// Helpers shared by every preset's tests. The notifications themselves are
// signed by internal/platformtest, independently of the code under test.

// testNow is the fixed clock of the tests.
var testNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// testCert is a self-signed certificate for k with the given serial,
// valid around testNow.
func testCert(t testing.TB, k *rsa.PrivateKey, serial *big.Int, cn string) []byte {
	t.Helper()
	return platformtest.CertificateValid(t, k, serial, cn, testNow.Add(-24*time.Hour), testNow.Add(365*24*time.Hour))
}

func bigInt(n int64) *big.Int { return big.NewInt(n) }

// post is a notification POST with body and header h, judged at testNow.
func post(body []byte, h http.Header) *Request {
	return &Request{Method: http.MethodPost, Header: h, Body: body, Now: testNow}
}

// hdr is a copy of r with the headers kv (name, value, …) set; an empty
// value deletes the header.
func hdr(r *Request, kv ...string) *Request {
	c := *r
	c.Header = r.Header.Clone()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			c.Header.Del(kv[i])
		} else {
			c.Header.Set(kv[i], kv[i+1])
		}
	}
	return &c
}

// withReqBody is a copy of r with another body.
func withReqBody(r *Request, body []byte) *Request {
	c := *r
	c.Body = body
	return &c
}

// withBody appends extra to r's body in place.
func (r *Request) withBody(extra string) *Request {
	r.Body = append(r.Body, extra...)
	return r
}

func mustNew(t testing.TB, name string, cfg Config) Platform {
	t.Helper()
	p, err := New(name, cfg)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	return p
}

// wantErr checks err against want (nil: success).
func wantErr(t *testing.T, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want one wrapping %v", err, want)
	}
}

// isSigOrMalformed tells whether err is one of the two request errors.
func isSigOrMalformed(err error) bool {
	return errors.Is(err, ErrSignature) || errors.Is(err, ErrMalformed)
}

// verifyCase is a row of a preset's Verify table: req either fails with
// an error wrapping wantErr or, wantErr nil, verifies with key.
type verifyCase struct {
	name    string
	cfg     Config
	req     *Request
	wantErr error
	key     string
}

// verifies runs preset, configured by cfg, on req and checks the outcome:
// an error wrapping want or, want nil, success with key. It returns the
// notification when req verified, nil when it failed as it should.
func verifies(t *testing.T, preset string, cfg Config, req *Request, want error, key string) *Notification {
	t.Helper()
	n, err := mustNew(t, preset, cfg).Verify(req)
	wantErr(t, err, want)
	if err != nil {
		return nil
	}
	if n.Key != key {
		t.Fatalf("Key = %q, want %q", n.Key, key)
	}
	return n
}

// runVerifyCases runs each case as a subtest with verifies; check, if not
// nil, then looks at the notification of each case that verified.
func runVerifyCases(t *testing.T, preset string, cases []verifyCase, check func(t *testing.T, c verifyCase, n *Notification)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if n := verifies(t, preset, c.cfg, c.req, c.wantErr, c.key); n != nil && check != nil {
				check(t, c, n)
			}
		})
	}
}

// successCase is a backend answer and whether Success must take it as
// "handled".
type successCase struct {
	status int
	body   string
	want   bool
}

// checkSuccess asks p.Success about each case, with header h.
func checkSuccess(t *testing.T, p Platform, h http.Header, cases []successCase) {
	t.Helper()
	for _, c := range cases {
		if got := p.Success(c.status, h, []byte(c.body)); got != c.want {
			t.Errorf("Success(%d, %q) = %v, want %v", c.status, c.body, got, c.want)
		}
	}
}

// fuzzVerify verifies r with each of ps: a failure must wrap ErrSignature
// or ErrMalformed, and check (if not nil) looks at each success.
func fuzzVerify(t *testing.T, r *Request, check func(n *Notification), ps ...Platform) {
	t.Helper()
	for _, p := range ps {
		n, err := p.Verify(r)
		if err != nil {
			if !isSigOrMalformed(err) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			continue
		}
		if check != nil {
			check(n)
		}
	}
}

// Generic's fingerprint material is the body's digest, taken when asked
// for: two bodies differ, one body twice is the same, and nothing is
// hashed at Verify (a route keyed on the body never asks).
func TestGenericFingerprintOfBody(t *testing.T) {
	verify := func(body string) (*Notification, []byte) {
		t.Helper()
		n, err := Generic{}.Verify(&Request{Method: "POST", Body: []byte(body)})
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
	if got, want := a.FingerprintOf(ab), Digest(ab); got != want {
		t.Fatalf("FingerprintOf = %s, want the body digest %s", got, want)
	}
	if a.FingerprintOf(ab) == b.FingerprintOf(bb) {
		t.Fatal("two bodies gave one fingerprint")
	}
	if again, aab := verify(string(ab)); again.FingerprintOf(aab) != a.FingerprintOf(ab) {
		t.Fatal("one body twice gave two fingerprints")
	}
	p := &Notification{Fingerprint: "material"}
	if got := p.FingerprintOf(ab); got != "material" {
		t.Fatalf("a preset's material = %q, want it unchanged", got)
	}
}
