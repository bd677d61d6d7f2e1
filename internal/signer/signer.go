// Package signer builds payment notifications signed exactly as each
// platform signs them: Alipay, WeChat Pay (API v3 and v2), PayPal, Stripe
// and Standard Webhooks, and the keys and certificates those platforms
// publish. It is production code: the CLI (idemgate idempotency send and
// keygen) signs with it, and the tests' internal/platformtest wrappers are
// thin testing.TB adapters over it. It must therefore never import testing.
//
// The signers follow the platforms' documentation, independently of the
// verifying code in keying, which this package must not import: it stays an
// independent check of the verifiers (and keying's own tests can use it,
// through platformtest, without an import cycle).
//
// Every signer re-signs on each call, with a fresh timestamp and nonce where
// the platform has them, the way a platform's retry arrives. Where signing
// can fail (an RSA key, an AES key, PEM marshalling, a GBK conversion) the
// function returns an error.
package signer

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// PublicKeyPEM is k as a PEM "PUBLIC KEY" (PKIX) block, the form Alipay's
// and WeChat Pay's platform public keys are downloaded in.
func PublicKeyPEM(k *rsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return nil, fmt.Errorf("signer: public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// Certificate is a self-signed certificate for k with the given serial
// number and common name, valid from a day ago for a year, as PEM.
func Certificate(k *rsa.PrivateKey, serial *big.Int, cn string) ([]byte, error) {
	now := time.Now()
	return CertificateValid(k, serial, cn, now.Add(-24*time.Hour), now.Add(365*24*time.Hour))
}

// CertificateValid is Certificate with an explicit validity period.
func CertificateValid(k *rsa.PrivateKey, serial *big.Int, cn string, notBefore, notAfter time.Time) ([]byte, error) {
	if k == nil {
		return nil, fmt.Errorf("signer: certificate: no key")
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, fmt.Errorf("signer: certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// SignPKCS1 signs msg with SHA256withRSA (crypto.SHA256) or SHA1withRSA
// (crypto.SHA1), PKCS #1 v1.5.
func SignPKCS1(k *rsa.PrivateKey, h crypto.Hash, msg []byte) ([]byte, error) {
	if k == nil {
		return nil, fmt.Errorf("signer: no RSA key to sign with")
	}
	var digest []byte
	switch h {
	case crypto.SHA256:
		d := sha256.Sum256(msg)
		digest = d[:]
	case crypto.SHA1:
		d := sha1.Sum(msg)
		digest = d[:]
	default:
		return nil, fmt.Errorf("signer: no platform signs with %v", h)
	}
	sig, err := rsa.SignPKCS1v15(rand.Reader, k, h, digest)
	if err != nil {
		return nil, fmt.Errorf("signer: %w", err)
	}
	return sig, nil
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

// NewRSAKey is a fresh 2048-bit RSA key and its private key as a PEM
// "PRIVATE KEY" (PKCS #8) block, as keygen writes it.
func NewRSAKey() (*rsa.PrivateKey, []byte, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
