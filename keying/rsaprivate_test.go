package keying

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
)

func TestParseRSAPrivateKey(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pkcs1 := x509.MarshalPKCS1PrivateKey(k)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"PKCS#1 PEM":           pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: pkcs1}),
		"PKCS#8 PEM":           pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		"PKCS#8 bare":          []byte(base64.StdEncoding.EncodeToString(pkcs8)),
		"PKCS#1 bare, wrapped": []byte(wrap(base64.StdEncoding.EncodeToString(pkcs1))),
	} {
		got, err := ParseRSAPrivateKey(data)
		if err != nil || !got.Equal(k) {
			t.Errorf("%s: %v", name, err)
		}
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	secret := base64.StdEncoding.EncodeToString(pkcs8)[:60]
	for name, data := range map[string][]byte{
		"EC key":  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}),
		"garbage": []byte("not a key"),
		"cut":     []byte(secret),
		"empty":   nil,
	} {
		_, err := ParseRSAPrivateKey(data)
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), secret[10:40]) {
			t.Errorf("%s: the error quotes the key: %v", name, err)
		}
	}
}

func wrap(s string) string {
	var b strings.Builder
	for len(s) > 64 {
		b.WriteString(s[:64] + "\n")
		s = s[64:]
	}
	return b.String() + s
}
