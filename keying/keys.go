package keying

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"net/url"
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

func (w *WechatPay) Keys() []KeyInfo { return w.info }

// VerifiedBy: the key Wechatpay-Serial names.
func (w *WechatPay) VerifiedBy(r *Request) string {
	serial := NormSerial(r.Header.Get("Wechatpay-Serial"))
	for _, k := range w.info {
		if NormSerial(k.ID) == serial {
			return k.ID
		}
	}
	return ""
}

func (a *Alipay) Keys() []KeyInfo {
	if a.key == nil {
		return nil
	}
	return []KeyInfo{a.info}
}

// VerifiedBy: Alipay has one key.
func (a *Alipay) VerifiedBy(*Request) string {
	if a.key == nil {
		return ""
	}
	return a.info.ID
}

func (p *PayPal) Keys() []KeyInfo {
	out := make([]KeyInfo, 0, len(p.pinned))
	for _, k := range p.pinned {
		out = append(out, KeyInfo{ID: k.serial, NotAfter: k.notAfter})
	}
	return out
}

// VerifiedBy: the pinned certificate valid at r.Now whose key matches the
// signature (checked again only while several are valid, as during a
// rotation), or the serial of the certificate fetched from
// PAYPAL-CERT-URL.
func (p *PayPal) VerifiedBy(r *Request) string {
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	if len(p.pinned) == 0 {
		raw := r.Header.Get("PAYPAL-CERT-URL")
		if u, err := url.Parse(raw); err != nil || !p.certURLOK(u) {
			return ""
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if e := p.cache[raw]; e != nil && e.ready() && e.err == nil {
			return e.key.serial
		}
		return ""
	}
	var valid []paypalKey
	for _, k := range p.pinned {
		if k.validAt(now) {
			valid = append(valid, k)
		}
	}
	if len(valid) == 1 {
		return valid[0].serial
	}
	sig, ok := DecodeB64Sig(r.Header.Get("PAYPAL-TRANSMISSION-SIG"))
	if !ok {
		return ""
	}
	msg := PayPalSignContent(r.Header.Get("PAYPAL-TRANSMISSION-ID"), r.Header.Get("PAYPAL-TRANSMISSION-TIME"), p.webhookID, r.Body)
	for _, k := range valid {
		if VerifyPKCS1(k.key, crypto.SHA256, msg, sig) {
			return k.serial
		}
	}
	return ""
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

var (
	_ KeyReporter = (*WechatPay)(nil)
	_ KeyReporter = (*Alipay)(nil)
	_ KeyReporter = (*PayPal)(nil)
)
