// Package platformtest builds payment notifications signed exactly as each
// platform signs them, for tests: Alipay, WeChat Pay (API v3 and v2),
// PayPal, Stripe and Standard Webhooks. The signers follow the platforms'
// documentation (or their own libraries, for Stripe and Standard Webhooks),
// independently of the verifying code in keying, which this package must
// not import: keying's own tests can use it without an import cycle.
//
// Every signer re-signs on each call, with a fresh timestamp and nonce where
// the platform has them, the way a platform's retry arrives.
package platformtest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	keysOnce sync.Once
	keyA     *rsa.PrivateKey
	keyB     *rsa.PrivateKey
)

// Keys returns two RSA-2048 keys, generated once per test binary: the
// platform's and someone else's (for "wrong key" forgeries). A fuzz target
// (t a *testing.F) gets two fixed keys instead (FixedKeys): generating keys
// in every coverage-instrumented fuzz worker takes far too long.
func Keys(t testing.TB) (platform, other *rsa.PrivateKey) {
	t.Helper()
	if _, fuzzing := t.(*testing.F); fuzzing {
		return FixedKeys(t)
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

// PublicKeyPEM is k as a PEM "PUBLIC KEY" (PKIX) block, the form Alipay's
// and WeChat Pay's platform public keys are downloaded in.
func PublicKeyPEM(t testing.TB, k *rsa.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Certificate is a self-signed certificate for k with the given serial
// number and common name, valid from a day ago for a year, as PEM.
func Certificate(t testing.TB, k *rsa.PrivateKey, serial *big.Int, cn string) []byte {
	t.Helper()
	now := time.Now()
	return CertificateValid(t, k, serial, cn, now.Add(-24*time.Hour), now.Add(365*24*time.Hour))
}

// CertificateValid is Certificate with an explicit validity period.
func CertificateValid(t testing.TB, k *rsa.PrivateKey, serial *big.Int, cn string, notBefore, notAfter time.Time) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// SerialHex is a certificate serial number as WeChat Pay writes it in
// Wechatpay-Serial: upper-case hex.
func SerialHex(serial *big.Int) string {
	return strings.ToUpper(hex.EncodeToString(serial.Bytes()))
}

// WriteFile writes data to name in a temporary directory that lives as long
// as t, and returns its path, for Caddyfiles to name (public_key,
// certificate).
func WriteFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// SignPKCS1 signs msg with SHA256withRSA (crypto.SHA256) or SHA1withRSA
// (crypto.SHA1), PKCS #1 v1.5.
func SignPKCS1(t testing.TB, k *rsa.PrivateKey, h crypto.Hash, msg []byte) []byte {
	t.Helper()
	var digest []byte
	switch h {
	case crypto.SHA256:
		d := sha256.Sum256(msg)
		digest = d[:]
	case crypto.SHA1:
		d := sha1.Sum(msg)
		digest = d[:]
	default:
		t.Fatalf("platformtest: no platform signs with %v", h)
	}
	sig, err := rsa.SignPKCS1v15(rand.Reader, k, h, digest)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// Nonce is n random characters from [0-9A-Za-z], as platforms' nonces are.
func Nonce(n int) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
