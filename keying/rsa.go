package keying

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// ParseRSAPublicKey reads an RSA public key as platforms hand them out: a PEM
// "PUBLIC KEY" (PKIX) or "RSA PUBLIC KEY" (PKCS #1) block, a PEM certificate
// (its key is used), or the bare base64 of a PKIX or PKCS #1 key as Alipay's
// console shows it, with or without line breaks.
func ParseRSAPublicKey(data []byte) (*rsa.PublicKey, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("empty public key")
	}
	if block, _ := pem.Decode(data); block != nil {
		switch block.Type {
		case "PUBLIC KEY", "RSA PUBLIC KEY":
			return parseRSAPublicDER(block.Bytes)
		case "CERTIFICATE":
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parsing certificate: %v", err)
			}
			return CertRSAKey(cert)
		default:
			return nil, fmt.Errorf("PEM block %q is not a public key or certificate", block.Type)
		}
	}
	if bytes.Contains(data, []byte("-----BEGIN")) {
		return nil, errors.New("unreadable PEM public key")
	}
	b64 := strings.Join(strings.Fields(string(data)), "")
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("public key is neither PEM nor base64")
	}
	return parseRSAPublicDER(der)
}

func parseRSAPublicDER(der []byte) (*rsa.PublicKey, error) {
	if k, err := x509.ParsePKIXPublicKey(der); err == nil {
		rk, ok := k.(*rsa.PublicKey)
		if !ok {
			return nil, fmt.Errorf("public key is %T, not RSA", k)
		}
		return rk, nil
	}
	if rk, err := x509.ParsePKCS1PublicKey(der); err == nil {
		return rk, nil
	}
	return nil, errors.New("public key is neither PKIX nor PKCS #1 DER")
}

func CertRSAKey(cert *x509.Certificate) (*rsa.PublicKey, error) {
	rk, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("certificate %s has a %T key, not RSA", CertSerial(cert), cert.PublicKey)
	}
	return rk, nil
}

// ParseCertificates reads every CERTIFICATE block of a PEM bundle.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := bytes.TrimSpace(data)
	for len(rest) > 0 {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing certificate: %v", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}

// CertSerial is a certificate's serial number in upper-case hex, as WeChat
// Pay writes it in Wechatpay-Serial.
func CertSerial(c *x509.Certificate) string { return serialHex(c.SerialNumber) }

func serialHex(n *big.Int) string {
	if n == nil {
		return ""
	}
	return strings.ToUpper(hex.EncodeToString(n.Bytes()))
}

// NormSerial makes serials comparable: upper case, leading zeros dropped.
func NormSerial(s string) string {
	s = strings.TrimLeft(strings.ToUpper(strings.TrimSpace(s)), "0")
	return s
}

// VerifyPKCS1 checks a PKCS #1 v1.5 signature of msg with SHA-256 or SHA-1.
func VerifyPKCS1(key *rsa.PublicKey, h crypto.Hash, msg, sig []byte) bool {
	var digest []byte
	switch h {
	case crypto.SHA256:
		d := sha256.Sum256(msg)
		digest = d[:]
	case crypto.SHA1:
		d := sha1.Sum(msg)
		digest = d[:]
	default:
		return false
	}
	// An RSA signature is exactly as long as the modulus; anything else is
	// rejected before any big-number work.
	if len(sig) != key.Size() {
		return false
	}
	return rsa.VerifyPKCS1v15(key, h, digest, sig) == nil
}

// DecodeB64Sig decodes a base64 signature (standard alphabet, padding
// optional), bounded in length.
func DecodeB64Sig(s string) ([]byte, bool) {
	if len(s) == 0 || len(s) > 2048 {
		return nil, false
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, true
	}
	if b, err := base64.RawStdEncoding.DecodeString(s); err == nil {
		return b, true
	}
	return nil, false
}
