package keying

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"time"
)

// Keys that rotate: platforms sign with keys that change (WeChat Pay's
// platform certificates and public key, PayPal's and Alipay's
// certificates). A gateway that cannot say which key verified a
// notification, or that a pinned certificate is about to expire, leaves
// the operator to find out from a wave of 401s.

// KeyInfo names one configured verification key.
type KeyInfo struct {
	// ID is the key's name as the platform gives it: WeChat Pay's
	// public_key_id or a certificate's serial (upper-case hex), or
	// "public_key" for a bare key with no name.
	ID string
	// NotAfter is when a certificate expires; zero for a bare key.
	NotAfter time.Time
}

// KeyReporter is a Platform that verifies with keys it can name.
type KeyReporter interface {
	// Keys lists the configured keys, in configuration order.
	Keys() []KeyInfo
	// VerifiedBy names the key that verified r, which Verify has just
	// accepted: the ID of one of Keys, or the serial of a certificate
	// fetched at run time (PayPal's), "" if it cannot tell.
	VerifiedBy(r *Request) string
}

// KeyInfoOf describes a PEM public key or certificate: a certificate is
// named by its serial and expires; a bare key is named name.
func KeyInfoOf(data []byte, name string) KeyInfo {
	if block, _ := pem.Decode(bytes.TrimSpace(data)); block != nil && block.Type == "CERTIFICATE" {
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			return KeyInfo{ID: CertSerial(c), NotAfter: c.NotAfter}
		}
	}
	return KeyInfo{ID: name}
}

// ExpiringWithin lists, in ks's order, the keys of ks that expire (or
// have expired) before now+d.
func ExpiringWithin(ks []KeyInfo, now time.Time, d time.Duration) []KeyInfo {
	var out []KeyInfo
	for _, k := range ks {
		if !k.NotAfter.IsZero() && k.NotAfter.Before(now.Add(d)) {
			out = append(out, k)
		}
	}
	return out
}

// KeyIDs lists the ids of ks.
func KeyIDs(ks []KeyInfo) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = strings.TrimSpace(k.ID)
	}
	return out
}
