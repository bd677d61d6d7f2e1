package keying

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
)

// ParseRSAPrivateKey reads an RSA private key in PEM, PKCS#1 ("RSA
// PRIVATE KEY") or PKCS#8 ("PRIVATE KEY"), or the bare base64 of either
// as Alipay's key tool writes it: the read API's credential (Alipay's
// application private key, WeChat Pay's merchant key). Its errors never
// quote the key.
func ParseRSAPrivateKey(data []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(data)), ""))
		if err != nil || len(der) == 0 {
			return nil, errors.New("neither PEM (RSA PRIVATE KEY, PRIVATE KEY) nor base64")
		}
		block = &pem.Block{Type: "PRIVATE KEY", Bytes: der}
	}
	if block.Type == "RSA PRIVATE KEY" {
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, errors.New("the RSA PRIVATE KEY block does not parse as PKCS#1")
		}
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		if k1, err1 := x509.ParsePKCS1PrivateKey(block.Bytes); err1 == nil {
			return k1, nil
		}
		return nil, errors.New("the PRIVATE KEY block does not parse as PKCS#8")
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("the private key is not an RSA key")
	}
	return rk, nil
}
