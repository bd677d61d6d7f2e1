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
	"strconv"
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

// testKeys returns two RSA keys. Unit tests generate fresh ones; fuzz
// targets use the fixed keys below, because key generation in a
// coverage-instrumented fuzz worker takes far too long.
func testKeys(t testing.TB) (*rsa.PrivateKey, *rsa.PrivateKey) {
	t.Helper()
	if _, fuzzing := t.(*testing.F); fuzzing {
		return fixedKey(t, fuzzKeyA), fixedKey(t, fuzzKeyB)
	}
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

func fixedKey(t testing.TB, pemText string) *rsa.PrivateKey {
	t.Helper()
	block, _ := pem.Decode([]byte(pemText))
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k.(*rsa.PrivateKey)
}

// Test-only RSA keys for the fuzz targets; they sign nothing real.
const fuzzKeyA = `-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDPFPXEuwqc1VrQ
qb1W4BfYtgkOPm/GwlgclIrFjCTSkCrs4dCXPNc8qGE+KkD1T9HbHIj/k/EPnRAe
pU5F3GJ4BHyHCo0xGFK4CJNyHp4mJ5pOv0QVCVSZzjJRZRwQk6QtuHDOkmuKaANC
suxiIZW4/y7W7nHuFWUX/xX3ZsNtpJAgkcp/CV3KhP4jQUSsHSPASNppsheyT+Fv
4fXvM+Yyq832O6VwGDU/xCKQWtcfHOS1i/QLazTmaAIi13ff5vXv66h7cPEblsJM
sH82j8MuBAsh0CGVBSEflhwJvUUlorGs4vc/LOpMYCCvy2CQRLB+pO/cavh1STmJ
LfWF0Z1XAgMBAAECggEAPCfclT+4f4LDFOaaKAiFJOEMlGSy18xRCExmW6iwcbKL
pbCbhbOY2vgW95YStLBxR/NsIMJ7PovjyONAb67rs+2ptxjrlx13uhpTqs0WKANN
Ih8RygKh3uQ1Xcu/cVlSUi3IJ1oFf3ljqRaM8JzM/6axlqJB2mXArk3dtbbWgpzL
WfV0jF8p/K9Zg8J3kMfBf+iEd3/Heeq4oqlkeATNKMQUE44Scea0kEoQtpOMnMaC
WF0lp9e9InrQptI2h8ZNm1SbMq3u/V81GH0jd+UlAViXA6LY/yOEWlVmVabbUrJj
d3WRt1mc/DWgDtjDzh046xPxngX3uy7wmUMjtS6lcQKBgQD3kkRtM1Ca+mMZnLPY
+gaDySsVziHcNkAFGMEh/+fAV+JlGkpBUyLeyQGIC2KRs8cYuKkEhWnq1g8DhRDJ
0JRK3/lCFbcOPlM88Ngm1WDGznhWo5OsXgczeGH+hCaJUocLZG5If9dthlWGg1Y2
Z5y+77GBVPMpxTP54hSSJnFO9QKBgQDWIc16iAxCv3C98f4WQ86SvPjdbiMIA68C
bhFt9lOU4I1fLrFG2m9f4+LIH078qvNFRCJne39vF+fIx77PDvZMDVy66BdKw3hc
S93+U3WmaiyT3j+D5h2yTQ9DGtvq8r0dzNbGSzdqdiHjc8uXhe+gxBug2PYMlNSu
GhmCdQwzmwKBgAv8e+2hj2SBfOzPhnGZ4VjeE4TxvvfvdHgKs8cWobzRRHfKpw+0
m7qXlshkbLhLMPeEcUJzxyYEiSONfLuYqqVZZLMLZBp/b/5CVuTCbfYSJwdi0hKF
VunqCSyOb2M0qK8nhKNj9SUrXNavYywtJgykhD6Tw1YhYxvVE1PkIpZFAoGBANYc
yLS78t6PRHF51uJ2fMk3UfU/2qF55XYdjyoQA7U678F8E+FQK8uLN8l5nOaDHWtm
XKxyzZLNKYQXTtEGGfsj5VQzHI8yc1h+uARFeb+kLNzSf1opMAqIiTlFUx9UBwwU
NbHjpg66/tnLgIkLcPelACdOqoEcFKneCSHsXf3/AoGABi/BY/lnaBGFHwtke1DT
k2j/J9mHQaAkk/G+w2wt7VfQOk8GB3A6d/dnYK8PB93yp+xrUxSyca5KQtLrJgLZ
s6Lbd/nwKnjGfJAUFgW2t4JkrSsqfeVgPY2x9A6jkc2sQKwovgNaczS9dcM/woKA
U/HdzBAeONI+xCSeHqJk/tc=
-----END PRIVATE KEY-----`

const fuzzKeyB = `-----BEGIN PRIVATE KEY-----
MIIEvAIBADANBgkqhkiG9w0BAQEFAASCBKYwggSiAgEAAoIBAQC4jprQwNbdXPDF
7Qz9g4tNEuQQvkh12PObU4qNL/tFSAF53AmBWm1wpTRjJGsBVSZS6cfqWVB6fxq1
sMrH2Ia1r5o9wQThnrUmA51gPy/xuuzIocAmT6FK4cx26a6BTdmS2R/n43TsmD1W
iFz6W7NTSWvwG2gTPJtE7khlm6EVXiwmQcKOSFXFyhCAirYDfTF5uygEbtefa5eh
8Xg8XERsuQakFj+URMZf1rdFDur63MvKht38tbbKlzmUkMtCiO8yhkvR8+74smLl
b0bHfNfSajz7hTnudONPBC9satIqKnAwPjK7tsaCxjlxH6VhRJlefN92HskkTr16
5K2bjS2XAgMBAAECgf9PWymFNu/KPyxcFhuTg/x1igxfThABiJaZWqFgFBoyEokG
F/lgzM/zPT1dFSRQH5upvGX+mXyLL36HtRqQDuzxMnzk1bemENMOhWuv4yzOEuDR
PLvE+Hh1zgPhuzbD7Hp5+OJwcKwRD4xkC1IWyrnHAnw/mpzqlOm4fuRTkUjZq3Ke
IeGsTZ+AveGFS8JlIl+0o4dcR4gIhbva/Otgn8H47QD+NyG5XxGpPKRUXkoaiWqV
CQxiEtXjfU+qFg3gN/9rIkgsDMboeCuSpoUjznzhcSGhRb4ep4oaALj5DW2ePUEj
mBSY2CsLg0/Y1zrNARlW02s9avALia60iV6427kCgYEA7w4yfujsx7WW3v/fq5sk
XcZxe+jTGaAs560qv/8E9YIJBUgBQM6M+yxGtz5AquZqgI12VvnWN78zqGQGzmaC
dEs5suVuHcrgFceiGsJPVqCU5rs4YcJ+k6ccNAE3DiFyhv12rLCQHULnfVs7bHLg
wOdlo+s1KeVRHyDbGdJUmgsCgYEAxaOAaus76tMQT3vIzTpwcSStqq2s/SK4V2sj
BFCmbHqKUEM+B63UAPk/JmyS2TDCH9kVrhxZtd/ggimIUQdmICcJq+QO+Eam04w9
TWy23jt6bg5X9r7Ofo6sSDi9ejNad0GfTFo4Bf70+3jS3rT0+/t4OFkzoTYDcLRo
N5b0/iUCgYEAhMGCo13hGKsshNzeLuOyV2172k8a5JFCPsq5AfSyoVC8h7VMFNxg
CKC3CM5GhWH+ZTOqM3T9VOoW2v3plbfx3HlmKoYlF+Bxf0blLC0aeEYnStdP4WJs
frz/+ZVvKKbEfljGDfLjpYxhGAmRP5GwZRBcLqLRXFngKgRKCNX4a68CgYEAnkA5
B2Or6m9uU/aN5qaweiggVtYR+e7fJEBJHZ9mYt4L+hCdjpCFfPIWurGdNANyrQWp
8mwI+TR2FEMlP5xpDb20ZMqLogkQc7uLKn+uPWvqsE0T6iMGPRgIoxurvDl6aptE
7mIfEc4AY4tvbZv/vfSxYo0qZh9Vydzqxfg923ECgYA1kHM4KhKnkPvhDUTkMFjs
X1FVsiGOilmFyrREOR4NF7NriywAWPNKYemSr2NjkHiVa5qMioGbpqTqYO6cRW4h
uzFJ6FzU4Xsb/OtEBU97+xJ7u+765c44/JuoYPjXca1P9UpMnG4rAS1Esade+bAV
APvy+f45Hffx1U1YGvjLrw==
-----END PRIVATE KEY-----`

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

// TestConcurrentVerify runs every preset from several goroutines at once
// (meaningful under -race): a Platform is shared by all requests of a route.
func TestConcurrentVerify(t *testing.T) {
	k, _ := testKeys(t)
	ppBody := ppEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "1")
	wx := wxNote{id: "EV-1", event: "TRANSACTION.SUCCESS", plain: wxTransaction("SUCCESS", 1)}
	cases := []struct {
		name string
		cfg  Config
		req  *Request
	}{
		{"alipay", Config{PublicKey: pkixPEM(t, &k.PublicKey)}, alipayPost(alipaySign(t, k, "RSA2", alipayNotify()))},
		{"wechatpay", Config{PublicKey: pkixPEM(t, &k.PublicKey), PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key},
			wxRequest(t, k, wxPubKeyID, testNow, "n", wx.body(t))},
		{"wechatpay_v2", Config{Secret: wxV2Key}, v2req(wxV2XML(wxV2Sign(wxV2Fields(), wxV2Key, "MD5")))},
		{"stripe", Config{Secret: stripeSecret}, stripeReq(stripeEvent("evt_1", "x", "y"), stripeSecret, testNow)},
		{"paypal", Config{WebhookID: ppWebhookID, Certificates: [][]byte{testCert(t, k, bigInt(3), "pp")}},
			ppReq(t, k, ppWebhookID, "tx", ppCertURL, ppBody)},
		{"standard_webhooks", Config{Secret: swSecret}, swReq(t, swSecret, "msg_1", testNow, []byte(`{}`))},
	}
	for _, c := range cases {
		p := mustNew(t, c.name, c.cfg)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				n, err := p.Verify(c.req)
				if err == nil && n.Extra != nil {
					n.Extra("x")
				}
				if err == nil {
					_, _, err = n.Fields.JSON("id")
					if errors.Is(err, ErrMalformed) {
						err = nil // not every body is JSON
					}
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}
	}
}

func TestUnixTimestamp(t *testing.T) {
	now := testNow
	sec := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	cases := []struct {
		v         string
		olderOnly bool
		ok        bool
	}{
		{sec(0), false, true},
		{sec(-5 * time.Minute), false, true},
		{sec(5 * time.Minute), false, true},
		{sec(-5*time.Minute - time.Second), false, false},
		{sec(5*time.Minute + time.Second), false, false},
		{sec(5*time.Minute + time.Second), true, true},
		{"999999999999", false, false}, // far future must not overflow into "fresh"
		{"9223372036854775807", false, false},
		{"9223372036854775807", true, false},
		{"-1", false, false},
		{"", false, false},
		{"1e9", false, false},
		{" 1", false, false},
	}
	for _, c := range cases {
		_, err := unixTimestamp("p", "ts", c.v, now, DefaultTolerance, c.olderOnly)
		if (err == nil) != c.ok {
			t.Errorf("unixTimestamp(%q, olderOnly=%v) = %v, want ok=%v", c.v, c.olderOnly, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrSignature) {
			t.Errorf("error does not wrap ErrSignature: %v", err)
		}
	}
}
