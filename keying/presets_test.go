package keying

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Shared test fixtures: RSA keys are generated once per test binary.

var (
	keysOnce sync.Once
	keyA     *rsa.PrivateKey // the platform's key
	keyB     *rsa.PrivateKey // someone else's
)

func testKeys(t testing.TB) (*rsa.PrivateKey, *rsa.PrivateKey) {
	t.Helper()
	keysOnce.Do(func() {
		var err error
		if keyA, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if keyB, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return keyA, keyB
}

// testNow is the fixed clock of the tests.
var testNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

func pkixPEM(t testing.TB, k *rsa.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// testCert makes a self-signed certificate for k with the given serial,
// valid around testNow.
func testCert(t testing.TB, k *rsa.PrivateKey, serial *big.Int, cn string) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    testNow.Add(-24 * time.Hour),
		NotAfter:     testNow.Add(365 * 24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func signPKCS1(t testing.TB, k *rsa.PrivateKey, h crypto.Hash, msg []byte) []byte {
	t.Helper()
	var digest []byte
	switch h {
	case crypto.SHA256:
		d := sha256.Sum256(msg)
		digest = d[:]
	case crypto.SHA1:
		d := sha1.Sum(msg)
		digest = d[:]
	}
	sig, err := rsa.SignPKCS1v15(rand.Reader, k, h, digest)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
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

func TestNamesHasEveryPreset(t *testing.T) {
	got := strings.Join(Names(), ",")
	want := "alipay,generic,paypal,standard_webhooks,stripe,wechatpay,wechatpay_v2"
	if got != want {
		t.Fatalf("Names() = %s, want %s", got, want)
	}
}

func TestPresetsNeedTheirSecret(t *testing.T) {
	for _, name := range Names() {
		if name == "generic" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			_, err := New(name, Config{})
			if !errors.Is(err, ErrNeedsSecret) {
				t.Fatalf("New(%q, {}) = %v, want ErrNeedsSecret", name, err)
			}
			p, err := New(name, Config{NoVerify: true})
			if err != nil {
				t.Fatalf("New(%q, NoVerify) = %v", name, err)
			}
			if p.Name() != name {
				t.Fatalf("Name() = %q", p.Name())
			}
			if p.RetryWindow() < 24*time.Hour {
				t.Fatalf("RetryWindow() = %s, want ≥ 24h", p.RetryWindow())
			}
		})
	}
}

func TestSecretsStayOutOfErrors(t *testing.T) {
	const secret = "whsec_c2VjcmV0LXNob3VsZC1uZXZlci1sZWFr" // base64 of a marker
	const v3key = "0123456789abcdef0123456789abcdef"
	cases := []struct {
		name string
		cfg  Config
		req  *Request
	}{
		{"stripe", Config{Secret: secret}, &Request{Method: "POST", Header: http.Header{"Stripe-Signature": {"t=1,v1=00"}}, Body: []byte(`{"id":"evt_1"}`), Now: testNow}},
		{"standard_webhooks", Config{Secret: secret}, &Request{Method: "POST", Header: http.Header{"Webhook-Id": {"m"}, "Webhook-Timestamp": {"1"}, "Webhook-Signature": {"v1,AAAA"}}, Body: []byte(`{}`), Now: testNow}},
		{"wechatpay_v2", Config{Secret: v3key}, &Request{Method: "POST", Body: []byte(`<xml><sign>00000000000000000000000000000000</sign><transaction_id>1</transaction_id></xml>`), Now: testNow}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := mustNew(t, c.name, c.cfg).Verify(c.req)
			if err == nil {
				t.Fatal("forged request verified")
			}
			if strings.Contains(err.Error(), c.cfg.Secret) || strings.Contains(err.Error(), "c2VjcmV0") {
				t.Fatalf("error leaks the secret: %v", err)
			}
		})
	}
}

func TestMaterialIsUnambiguous(t *testing.T) {
	pairs := [][2][]string{
		{{"a,b", "c"}, {"a", "b,c"}},
		{{"a", ""}, {"", "a"}},
		{{`"`, ""}, {"", `"`}},
		{{"a"}, {"a", ""}},
	}
	for _, p := range pairs {
		if Material(p[0]...) == Material(p[1]...) {
			t.Errorf("Material(%q) == Material(%q)", p[0], p[1])
		}
	}
	if Material("1", "x") != Material("1", "x") {
		t.Error("Material is not deterministic")
	}
	if Material() != "[]" {
		t.Errorf("Material() = %s", Material())
	}
}

func bigInt(n int64) *big.Int { return big.NewInt(n) }

// isSigOrMalformed tells whether err is one of the two request errors.
func isSigOrMalformed(err error) bool {
	return errors.Is(err, ErrSignature) || errors.Is(err, ErrMalformed)
}
