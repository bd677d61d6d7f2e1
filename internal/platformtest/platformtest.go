// Package platformtest builds payment notifications signed exactly as each
// platform signs them, for tests: Alipay, WeChat Pay (API v3 and v2),
// PayPal, Stripe and Standard Webhooks.
//
// The signing logic lives in internal/signer, the production package the
// CLI uses; this package is a thin testing.TB wrapper over it (a signer's
// error fails the test), plus what only tests need: the notifications the
// CLI never sends (Alipay's browser return, refunds, WeChat Pay's
// signature probe, v2's answers), generated and fixed keys (Keys,
// FixedKeys), WriteFile, a test certificate authority (CA) and PayPal's
// CRC-32 forgery (PayPalForgery). StripeHeader and
// StandardWebhooksHeader sign with the platforms' own libraries (stripe-go
// and the Standard Webhooks reference library), not with signer's
// hand-written versions, so tests check the verifiers against an
// independent signer.
//
// Neither this package nor signer imports keying, the verifying code:
// keying's own tests can use it without an import cycle.
//
// Every signer re-signs on each call, with a fresh timestamp and nonce where
// the platform has them, the way a platform's retry arrives.
package platformtest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
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

// PublicKeyPEM is signer.PublicKeyPEM: k as a PEM "PUBLIC KEY" (PKIX)
// block, the form Alipay's and WeChat Pay's platform public keys are
// downloaded in.
func PublicKeyPEM(t testing.TB, k *rsa.PublicKey) []byte {
	t.Helper()
	v, err := signer.PublicKeyPEM(k)
	check(t, err)
	return v
}

// Certificate is signer.Certificate: a self-signed certificate for k with
// the given serial number and common name, valid from a day ago for a
// year, as PEM.
func Certificate(t testing.TB, k *rsa.PrivateKey, serial *big.Int, cn string) []byte {
	t.Helper()
	v, err := signer.Certificate(k, serial, cn)
	check(t, err)
	return v
}

// CertificateValid is Certificate with an explicit validity period.
func CertificateValid(t testing.TB, k *rsa.PrivateKey, serial *big.Int, cn string, notBefore, notAfter time.Time) []byte {
	t.Helper()
	v, err := signer.CertificateValid(k, serial, cn, notBefore, notAfter)
	check(t, err)
	return v
}

// SerialHex is a certificate serial number as WeChat Pay writes it in
// Wechatpay-Serial: upper-case hex.
func SerialHex(serial *big.Int) string { return strings.ToUpper(hex.EncodeToString(serial.Bytes())) }

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

// SignPKCS1 is signer.SignPKCS1: msg signed with SHA256withRSA
// (crypto.SHA256) or SHA1withRSA (crypto.SHA1), PKCS #1 v1.5.
func SignPKCS1(t testing.TB, k *rsa.PrivateKey, h crypto.Hash, msg []byte) []byte {
	t.Helper()
	v, err := signer.SignPKCS1(k, h, msg)
	check(t, err)
	return v
}

// Nonce is n random characters from [0-9A-Za-z], as platforms' nonces are
// (signer.Nonce).
func Nonce(n int) string { return signer.Nonce(n) }

// check fails t if err, a signer's error, is not nil.
func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
