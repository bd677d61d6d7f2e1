package keying

import (
	"context"
	"crypto"
	"crypto/rsa"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

func init() { register("paypal", newPayPal) }

// PayPal verifies PayPal webhook events offline (no verify-webhook-signature
// API call).
//
// Signature: PAYPAL-TRANSMISSION-SIG is SHA256withRSA (PAYPAL-AUTH-ALGO
// SHA256withRSA) over
// "<PAYPAL-TRANSMISSION-ID>|<PAYPAL-TRANSMISSION-TIME>|<Config.WebhookID>|<crc32(body)>",
// the CRC-32 (IEEE) in decimal. The key is that of Config.Certificates when
// given (PAYPAL-CERT-URL is then ignored), else of the certificate fetched
// from PAYPAL-CERT-URL, which must be https on PayPal's own hosts
// (api.paypal.com, api.sandbox.paypal.com, *.paypal.com; no user info, no
// port). Fetched certificates must be currently valid; they are cached by URL
// until they expire, failures for a minute, at most paypalCacheSize URLs.
//
// Key: paypal:{id} (the event id, the same on every retry). Fingerprint:
// event_type, resource.id. Success: 2xx. No Extra.
type PayPal struct {
	webhookID string
	keys      []*rsa.PublicKey
	noVerify  bool
	client    *http.Client

	// certURLOK decides which PAYPAL-CERT-URLs may be fetched; tests
	// replace it to reach an httptest server.
	certURLOK func(*url.URL) bool

	fetchMu sync.Mutex // one fetch at a time
	mu      sync.Mutex // guards cache
	cache   map[string]paypalCacheEntry
}

type paypalCacheEntry struct {
	key   *rsa.PublicKey
	err   error
	until time.Time
}

const (
	paypalCacheSize    = 64
	paypalFetchTimeout = 10 * time.Second
	paypalMaxCertBody  = 64 << 10
	paypalNegativeTTL  = time.Minute
	paypalMaxURLLen    = 1024
)

func newPayPal(cfg Config) (Platform, error) {
	p := &PayPal{
		webhookID: strings.TrimSpace(cfg.WebhookID),
		noVerify:  cfg.NoVerify,
		certURLOK: paypalCertURLOK,
		cache:     map[string]paypalCacheEntry{},
	}
	if p.webhookID == "" && !cfg.NoVerify {
		return nil, needsSecret("paypal", "webhook_id (the webhook subscription's id)")
	}
	for _, pemData := range cfg.Certificates {
		certs, err := ParseCertificates(pemData)
		if err != nil {
			return nil, fmt.Errorf("paypal certificate: %v", err)
		}
		// A bundle is leaf first; intermediates are not signing keys, but
		// trying them costs one failed verification each, so keep them all.
		for _, c := range certs {
			k, err := certRSAKey(c)
			if err != nil {
				return nil, fmt.Errorf("paypal certificate: %v", err)
			}
			p.keys = append(p.keys, k)
		}
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: paypalFetchTimeout}
	}
	c := *client // shallow copy: same transport, our redirect policy
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 3 {
			return errors.New("too many redirects")
		}
		if !p.certURLOK(req.URL) {
			return errors.New("redirect away from PayPal's hosts")
		}
		return nil
	}
	p.client = &c
	return p, nil
}

func (*PayPal) Name() string { return "paypal" }

// paypalCertURLOK accepts https URLs on PayPal's own hosts only.
func paypalCertURLOK(u *url.URL) bool {
	if u == nil || u.Scheme != "https" || u.User != nil || u.Opaque != "" || u.Host == "" {
		return false
	}
	host := u.Host // no port allowed, so Host is the bare name
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false // upper case, ports, IPv6 literals, oddities
		}
	}
	if len(host) > 253 {
		return false
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false // empty labels (".paypal.com", "a..paypal.com", "x.paypal.com.")
		}
	}
	return host == "api.paypal.com" || host == "api.sandbox.paypal.com" ||
		strings.HasSuffix(host, ".paypal.com")
}

func (p *PayPal) Verify(r *Request) (*Notification, error) {
	if !p.noVerify {
		if err := p.verify(r); err != nil {
			return nil, err
		}
	}
	f := NewFields(r)
	id, err := requireJSON("paypal", f, "id")
	if err != nil {
		return nil, err
	}
	fp, err := jsonFields("paypal", f, "event_type", "resource.id")
	if err != nil {
		return nil, err
	}
	return &Notification{Fields: f, Key: "paypal:" + id, Fingerprint: Material(fp...)}, nil
}

// PayPalSignContent is the string PayPal signs for a webhook.
func PayPalSignContent(transmissionID, transmissionTime, webhookID string, body []byte) []byte {
	return []byte(transmissionID + "|" + transmissionTime + "|" + webhookID + "|" +
		strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
}

func (p *PayPal) verify(r *Request) error {
	const pp = "paypal"
	id, err := header(pp, r, "PAYPAL-TRANSMISSION-ID")
	if err != nil {
		return err
	}
	tt, err := header(pp, r, "PAYPAL-TRANSMISSION-TIME")
	if err != nil {
		return err
	}
	sigB64, err := header(pp, r, "PAYPAL-TRANSMISSION-SIG")
	if err != nil {
		return err
	}
	algo, err := header(pp, r, "PAYPAL-AUTH-ALGO")
	if err != nil {
		return err
	}
	if !strings.EqualFold(algo, "SHA256withRSA") {
		return sigErr(pp, "unsupported PAYPAL-AUTH-ALGO %s", clip(algo))
	}
	sig, ok := decodeB64Sig(sigB64)
	if !ok {
		return sigErr(pp, "PAYPAL-TRANSMISSION-SIG is not base64")
	}
	msg := PayPalSignContent(id, tt, p.webhookID, r.Body)
	keys := p.keys
	if len(keys) == 0 {
		certURL, err := header(pp, r, "PAYPAL-CERT-URL")
		if err != nil {
			return err
		}
		k, err := p.fetchedKey(certURL, r.Now)
		if err != nil {
			return err
		}
		keys = []*rsa.PublicKey{k}
	}
	for _, k := range keys {
		if verifyPKCS1(k, crypto.SHA256, msg, sig) {
			return nil
		}
	}
	return sigErr(pp, "PAYPAL-TRANSMISSION-SIG does not match")
}

// fetchedKey returns the key of the certificate at rawURL, from the cache or
// fetched. Every error wraps ErrSignature: without the certificate there is
// no verified notification.
func (p *PayPal) fetchedKey(rawURL string, now time.Time) (*rsa.PublicKey, error) {
	if now.IsZero() {
		now = time.Now()
	}
	if len(rawURL) > paypalMaxURLLen {
		return nil, sigErr("paypal", "PAYPAL-CERT-URL too long")
	}
	u, err := url.Parse(rawURL)
	if err != nil || !p.certURLOK(u) {
		return nil, sigErr("paypal", "PAYPAL-CERT-URL is not an https URL on PayPal's hosts: %s", clip(rawURL))
	}
	if e, ok := p.cached(rawURL, now); ok {
		return e.key, e.err
	}
	p.fetchMu.Lock()
	defer p.fetchMu.Unlock()
	if e, ok := p.cached(rawURL, now); ok { // fetched while we waited
		return e.key, e.err
	}
	k, notAfter, ferr := p.fetch(u, now)
	e := paypalCacheEntry{key: k, until: notAfter}
	if ferr != nil {
		e = paypalCacheEntry{err: sigErr("paypal", "certificate: %v", ferr), until: now.Add(paypalNegativeTTL)}
	}
	p.store(rawURL, e, now)
	return e.key, e.err
}

func (p *PayPal) cached(rawURL string, now time.Time) (paypalCacheEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.cache[rawURL]
	if !ok || !now.Before(e.until) {
		return paypalCacheEntry{}, false
	}
	return e, true
}

func (p *PayPal) store(rawURL string, e paypalCacheEntry, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.cache) >= paypalCacheSize {
		for k, old := range p.cache {
			if !now.Before(old.until) {
				delete(p.cache, k)
			}
		}
	}
	for k := range p.cache { // still full: drop arbitrary entries
		if len(p.cache) < paypalCacheSize {
			break
		}
		delete(p.cache, k)
	}
	p.cache[rawURL] = e
}

func (p *PayPal) fetch(u *url.URL, now time.Time) (*rsa.PublicKey, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), paypalFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, time.Time{}, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("fetching: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, time.Time{}, fmt.Errorf("fetching: status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, paypalMaxCertBody+1))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("fetching: %v", err)
	}
	if len(body) > paypalMaxCertBody {
		return nil, time.Time{}, errors.New("fetching: body too large")
	}
	certs, err := ParseCertificates(body)
	if err != nil {
		return nil, time.Time{}, err
	}
	leaf := certs[0]
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, time.Time{}, errors.New("certificate is not valid now")
	}
	k, err := certRSAKey(leaf)
	if err != nil {
		return nil, time.Time{}, err
	}
	return k, leaf.NotAfter, nil
}

// Success: any 2xx.
func (*PayPal) Success(status int, _ http.Header, _ []byte) bool { return Is2xx(status) }

// RetryWindow: PayPal retries a webhook up to 25 times over 3 days.
func (*PayPal) RetryWindow() time.Duration { return 72 * time.Hour }
