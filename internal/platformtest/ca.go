package platformtest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// CA is a test certificate authority, standing in for the public CA that
// issues PayPal's message verification certificates: a root, or an
// intermediate issued by another CA.
type CA struct {
	Cert *x509.Certificate
	Key  *rsa.PrivateKey
	// PEM is Cert as PEM, to append to a served bundle or add to a pool.
	PEM []byte
}

// NewCA is a self-signed root CA named cn with key k, valid for years
// around now.
func NewCA(t testing.TB, k *rsa.PrivateKey, cn string) CA {
	t.Helper()
	now := time.Now()
	tmpl := caTemplate(cn, now.Add(-10*365*24*time.Hour), now.Add(10*365*24*time.Hour))
	return makeCA(t, tmpl, tmpl, k, k)
}

// Intermediate is a CA named cn with key k, issued by ca.
func (ca CA) Intermediate(t testing.TB, k *rsa.PrivateKey, cn string) CA {
	t.Helper()
	tmpl := caTemplate(cn, ca.Cert.NotBefore, ca.Cert.NotAfter)
	return makeCA(t, tmpl, ca.Cert, k, ca.Key)
}

// Pool is a certificate pool holding only ca, as a trust anchor.
func (ca CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue is a leaf certificate for k with the given serial number, common
// name and validity, signed by ca, as PEM.
func (ca CA) Issue(t testing.TB, k *rsa.PrivateKey, serial *big.Int, cn string, notBefore, notAfter time.Time) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"PayPal, Inc."}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &k.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func caTemplate(cn string, notBefore, notAfter time.Time) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
}

func makeCA(t testing.TB, tmpl, parent *x509.Certificate, k, parentKey *rsa.PrivateKey) CA {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return CA{Cert: c, Key: k, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}
