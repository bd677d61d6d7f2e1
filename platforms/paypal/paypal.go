// Package paypal is the PayPal preset: the transmission signature
// checked with PayPal's certificate (pinned or fetched), each event id
// its own business event.
package paypal

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/x509"
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

	"github.com/idemgate/idemgate/keying"
)

// Preset is PayPal's: answered 200, each event its own, a signed
// transmission time.
var Preset = &keying.Preset{
	Name: "paypal", Title: "PayPal",
	Ack: keying.Ack{Status: 200},
	// PayPal, "Webhooks" (developer.paypal.com/api/rest/webhooks/): "PayPal
	// retries … up to 25 times over the course of 3 days" (a non-2xx
	// answer). The waits are not published: doubling from one minute,
	// at most 3h55m, 25 of them (just under 3 days).
	Schedule:  keying.ExpCount(time.Minute, 3*time.Hour+55*time.Minute, 25),
	OwnEvents: true,
	// PayPal's verification accepts a transmission 5 minutes old.
	SignedFor: 5 * time.Minute,
	SignedAt:  signedAt,
}

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
// port).
//
// PayPal signs only a CRC-32 of the body, so a captured delivery's headers
// could carry a forged body of the same CRC. Hence:
//   - PAYPAL-TRANSMISSION-TIME (RFC 3339) must be within the tolerance;
//   - a pinned certificate must be within its validity at Request.Now;
//   - a fetched certificate must chain to a trusted root
//     (Config.Roots, else the system's) with the rest of the fetched
//     bundle as intermediates, be valid at Request.Now, and name PayPal in
//     its subject (CN messageverificationcerts….paypal.com), as PayPal's
//     Java SDK checks;
//   - with Config.TransmissionLog, a transmission id already seen with
//     another body digest is refused.
//
// Fetched certificates are cached by URL until they expire, failures for a
// minute, at most paypalCacheSize URLs; concurrent requests for one URL
// share one fetch, and each waits no longer than its own context.
//
// Key: {id} (the event id, the same on every retry: its own business
// event). Money: resource.amount (value, currency_code). Fingerprint:
// event_type, resource.id. Success: 2xx. No Extra.
type PayPal struct {
	webhookID string
	pinned    []paypalKey
	noVerify  bool
	client    *http.Client
	tol       time.Duration
	roots     *x509.CertPool
	txLog     TransmissionLog

	// certURLOK decides which PAYPAL-CERT-URLs may be fetched; tests
	// replace it to reach an httptest server.
	certURLOK func(*url.URL) bool

	mu    sync.Mutex // guards cache
	cache map[string]*paypalEntry
}

// paypalKey is a verification key with the validity of its certificate.
type paypalKey struct {
	key                 *rsa.PublicKey
	notBefore, notAfter time.Time
	serial              string // the certificate's, for KeyInfo (keys.go)
}

func (k paypalKey) validAt(now time.Time) bool {
	return !now.Before(k.notBefore) && !now.After(k.notAfter)
}

// paypalEntry is one URL's cache slot. done is closed once key/err/until
// are set; until then the entry belongs to the request that fetches it.
type paypalEntry struct {
	done  chan struct{}
	key   paypalKey
	err   error
	until time.Time
}

func (e *paypalEntry) ready() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

const (
	paypalCacheSize    = 64
	paypalFetchTimeout = 10 * time.Second
	paypalMaxCertBody  = 64 << 10
	paypalNegativeTTL  = time.Minute
	paypalMaxURLLen    = 1024
	// paypalMaxTimeLen bounds PAYPAL-TRANSMISSION-TIME before parsing.
	paypalMaxTimeLen = 64
	// paypalMaxIDLen bounds PAYPAL-TRANSMISSION-ID.
	paypalMaxIDLen = 128
)

// Config is what a route configures PayPal's check with. Files are read
// by the caller; PEM blocks arrive as bytes.
type Config struct {
	// WebhookID is the webhook subscription's id.
	WebhookID string
	// Certificates are PayPal's signing certificates (PEM), pinned;
	// without them the certificate a notification names is fetched.
	Certificates [][]byte
	// HTTPClient fetches certificates; nil means a client with a short
	// timeout.
	HTTPClient *http.Client
	// Roots are the roots a fetched certificate must chain to; nil means
	// the system's roots. Tests inject their own.
	Roots *x509.CertPool
	// TransmissionLog, when set, refuses a transmission id already seen
	// with another body. Nil skips the check.
	TransmissionLog TransmissionLog
	// NoVerify runs the check without signatures (`verify off`).
	NoVerify bool
	// Tolerance for PAYPAL-TRANSMISSION-TIME; 0 means
	// keying.DefaultTolerance.
	Tolerance time.Duration
}

// New returns PayPal's check configured with cfg. Errors read
// "paypal: <what>" and wrap keying.ErrNeedsSecret when the webhook id is
// missing.
func New(cfg Config) (keying.Platform, error) {
	p := &PayPal{
		webhookID: strings.TrimSpace(cfg.WebhookID),
		noVerify:  cfg.NoVerify,
		tol:       keying.TimeTolerance(cfg.Tolerance),
		roots:     cfg.Roots,
		txLog:     cfg.TransmissionLog,
		certURLOK: paypalCertURLOK,
		cache:     map[string]*paypalEntry{},
	}
	if p.webhookID == "" && !cfg.NoVerify {
		return nil, keying.NeedsSecret("paypal", "webhook_id (the webhook subscription's id)")
	}
	for _, pemData := range cfg.Certificates {
		certs, err := keying.ParseCertificates(pemData)
		if err != nil {
			return nil, fmt.Errorf("paypal: certificate: %v", err)
		}
		// A bundle is leaf first; intermediates are not signing keys, but
		// trying them costs one failed verification each, so keep them all.
		for _, c := range certs {
			k, err := keying.CertRSAKey(c)
			if err != nil {
				return nil, fmt.Errorf("paypal: certificate: %v", err)
			}
			p.pinned = append(p.pinned, paypalKey{key: k, notBefore: c.NotBefore, notAfter: c.NotAfter, serial: keying.CertSerial(c)})
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

func (p *PayPal) Verify(r *keying.Request) (*keying.Notification, error) {
	if !p.noVerify {
		if err := p.verify(r); err != nil {
			return nil, err
		}
	}
	f := keying.NewFields(r)
	id, err := keying.RequireJSON("paypal", f, "id")
	if err != nil {
		return nil, err
	}
	fp, err := keying.JSONFields("paypal", f, "event_type", "resource.id", "resource.amount.value", "resource.amount.currency_code")
	if err != nil {
		return nil, err
	}
	n := &keying.Notification{Fields: f, Key: id, Fingerprint: keying.Material(fp[:2]...)}
	if fp[2] != "" {
		// Captures, refunds and sales carry resource.amount in major units
		// (developer.paypal.com, "Webhook event names" and the Payments v2
		// capture object).
		if n.Money, err = keying.Major(fp[2], fp[3]); err != nil {
			return nil, keying.Malformed("paypal", "resource.amount: %v", err)
		}
	}
	paypalSettles(n, fp[0])
	// The body is what the signature's CRC and the transmission log bind.
	n.MerchantRefs = keying.SearchRefsAt(f, "resource.id", "resource.invoice_id", "resource.custom_id",
		"resource.supplementary_data.related_ids.order_id")
	return n, nil
}

// PayPalSignContent is the string PayPal signs for a webhook.
func PayPalSignContent(transmissionID, transmissionTime, webhookID string, body []byte) []byte {
	return []byte(transmissionID + "|" + transmissionTime + "|" + webhookID + "|" +
		strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
}

func (p *PayPal) verify(r *keying.Request) error {
	const pp = "paypal"
	id, err := keying.SignatureHeader(pp, r, "PAYPAL-TRANSMISSION-ID")
	if err != nil {
		return err
	}
	if len(id) > paypalMaxIDLen {
		// A UUID in practice; the id becomes part of a store key.
		return keying.SigErr(pp, "PAYPAL-TRANSMISSION-ID longer than %d bytes", paypalMaxIDLen)
	}
	tt, err := keying.SignatureHeader(pp, r, "PAYPAL-TRANSMISSION-TIME")
	if err != nil {
		return err
	}
	sigB64, err := keying.SignatureHeader(pp, r, "PAYPAL-TRANSMISSION-SIG")
	if err != nil {
		return err
	}
	algo, err := keying.SignatureHeader(pp, r, "PAYPAL-AUTH-ALGO")
	if err != nil {
		return err
	}
	if !strings.EqualFold(algo, "SHA256withRSA") {
		return keying.SigErr(pp, "unsupported PAYPAL-AUTH-ALGO %s", keying.Clip(algo))
	}
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	if err := p.checkTime(tt, now); err != nil {
		return err
	}
	sig, ok := keying.DecodeB64Sig(sigB64)
	if !ok {
		return keying.SigErr(pp, "PAYPAL-TRANSMISSION-SIG is not base64")
	}
	var keys []*rsa.PublicKey
	if len(p.pinned) > 0 {
		for _, k := range p.pinned {
			if k.validAt(now) {
				keys = append(keys, k.key)
			}
		}
		if len(keys) == 0 {
			return keying.SigErr(pp, "no configured certificate is valid at %s", now.UTC().Format(time.RFC3339))
		}
	} else {
		certURL, err := keying.SignatureHeader(pp, r, "PAYPAL-CERT-URL")
		if err != nil {
			return err
		}
		k, err := p.fetchedKey(r.Ctx(), certURL, now)
		if err != nil {
			return err
		}
		keys = []*rsa.PublicKey{k}
	}
	msg := PayPalSignContent(id, tt, p.webhookID, r.Body)
	verified := false
	for _, k := range keys {
		if keying.VerifyPKCS1(k, crypto.SHA256, msg, sig) {
			verified = true
			break
		}
	}
	if !verified {
		return keying.SigErr(pp, "PAYPAL-TRANSMISSION-SIG does not match")
	}
	if p.txLog != nil {
		conflict, err := p.txLog.Seen(r.Ctx(), id, keying.Digest(r.Body))
		if err != nil {
			return fmt.Errorf("paypal: %w: transmission log: %v", keying.ErrUnavailable, err)
		}
		if conflict {
			return keying.SigErr(pp, "transmission %s was seen before with another body", keying.Clip(id))
		}
	}
	return nil
}

// checkTime parses PAYPAL-TRANSMISSION-TIME and checks it against now.
func (p *PayPal) checkTime(v string, now time.Time) error {
	const pp = "paypal"
	if len(v) > paypalMaxTimeLen {
		return keying.SigErr(pp, "PAYPAL-TRANSMISSION-TIME too long")
	}
	ts, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return keying.SigErr(pp, "PAYPAL-TRANSMISSION-TIME %s is not an RFC 3339 time", keying.Clip(v))
	}
	if d := now.Sub(ts); d > p.tol {
		return keying.SigErr(pp, "PAYPAL-TRANSMISSION-TIME is %s old, beyond the tolerance of %s", d.Truncate(time.Second), p.tol)
	} else if -d > p.tol {
		return keying.SigErr(pp, "PAYPAL-TRANSMISSION-TIME is %s in the future, beyond the tolerance of %s", (-d).Truncate(time.Second), p.tol)
	}
	return nil
}

// fetchedKey returns the key of the certificate at rawURL, from the cache or
// fetched. Every error wraps ErrSignature: without the certificate there is
// no verified notification.
func (p *PayPal) fetchedKey(ctx context.Context, rawURL string, now time.Time) (*rsa.PublicKey, error) {
	if len(rawURL) > paypalMaxURLLen {
		return nil, keying.SigErr("paypal", "PAYPAL-CERT-URL too long")
	}
	u, err := url.Parse(rawURL)
	if err != nil || !p.certURLOK(u) {
		return nil, keying.SigErr("paypal", "PAYPAL-CERT-URL is not an https URL on PayPal's hosts: %s", keying.Clip(rawURL))
	}
	for {
		p.mu.Lock()
		e := p.cache[rawURL]
		if e != nil && !e.ready() {
			// Another request is fetching this URL: wait for it, no
			// longer than this request may.
			p.mu.Unlock()
			select {
			case <-e.done:
				continue
			case <-ctx.Done():
				return nil, keying.SigErr("paypal", "waiting for the certificate: %v", ctx.Err())
			}
		}
		if e != nil && now.Before(e.until) {
			p.mu.Unlock()
			if e.err != nil {
				return nil, e.err
			}
			if !e.key.validAt(now) {
				return nil, keying.SigErr("paypal", "certificate is not valid at %s", now.UTC().Format(time.RFC3339))
			}
			return e.key.key, nil
		}
		// Absent or expired: this request fetches it.
		e = &paypalEntry{done: make(chan struct{})}
		if !p.makeRoom(now) {
			p.mu.Unlock()
			return nil, keying.SigErr("paypal", "too many certificate fetches at once")
		}
		p.cache[rawURL] = e
		p.mu.Unlock()

		k, until, ferr := p.fetch(ctx, u, now)
		p.mu.Lock()
		if ferr != nil && ctx.Err() != nil {
			// This request gave up, not the URL: forget the slot so
			// the next request (or a waiter) fetches again.
			if p.cache[rawURL] == e {
				delete(p.cache, rawURL)
			}
			e.err = keying.SigErr("paypal", "certificate: %v", ferr)
		} else if ferr != nil {
			e.err, e.until = keying.SigErr("paypal", "certificate: %v", ferr), now.Add(paypalNegativeTTL)
		} else {
			e.key, e.until = k, until
		}
		close(e.done)
		p.mu.Unlock()
		if e.err != nil {
			return nil, e.err
		}
		return k.key, nil
	}
}

// makeRoom keeps the cache under its bound: expired entries go first, then
// arbitrary finished ones; entries being fetched stay. Called with p.mu.
func (p *PayPal) makeRoom(now time.Time) bool {
	if len(p.cache) < paypalCacheSize {
		return true
	}
	for k, e := range p.cache {
		if e.ready() && !now.Before(e.until) {
			delete(p.cache, k)
		}
	}
	for k, e := range p.cache {
		if len(p.cache) < paypalCacheSize {
			break
		}
		if e.ready() {
			delete(p.cache, k)
		}
	}
	return len(p.cache) < paypalCacheSize
}

// fetch downloads and checks the certificate bundle at u: the leaf must
// chain to a trusted root, be valid at now and name PayPal in its subject.
func (p *PayPal) fetch(ctx context.Context, u *url.URL, now time.Time) (paypalKey, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, paypalFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return paypalKey{}, time.Time{}, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return paypalKey{}, time.Time{}, fmt.Errorf("fetching: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return paypalKey{}, time.Time{}, fmt.Errorf("fetching: status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, paypalMaxCertBody+1))
	if err != nil {
		return paypalKey{}, time.Time{}, fmt.Errorf("fetching: %v", err)
	}
	if len(body) > paypalMaxCertBody {
		return paypalKey{}, time.Time{}, errors.New("fetching: body too large")
	}
	certs, err := keying.ParseCertificates(body)
	if err != nil {
		return paypalKey{}, time.Time{}, err
	}
	leaf := certs[0]
	if err := CheckPayPalCertificate(leaf, certs[1:], p.roots, now); err != nil {
		return paypalKey{}, time.Time{}, err
	}
	k, err := keying.CertRSAKey(leaf)
	if err != nil {
		return paypalKey{}, time.Time{}, err
	}
	return paypalKey{key: k, notBefore: leaf.NotBefore, notAfter: leaf.NotAfter, serial: keying.CertSerial(leaf)}, leaf.NotAfter, nil
}

// CheckPayPalCertificate is the check PayPal's Java SDK makes of a fetched
// webhook certificate: it chains, through intermediates, to one of roots
// (nil: the system's), every certificate of the chain is valid at now, and
// the leaf's subject common name is messageverificationcerts….paypal.com.
func CheckPayPalCertificate(leaf *x509.Certificate, intermediates []*x509.Certificate, roots *x509.CertPool, now time.Time) error {
	cn := leaf.Subject.CommonName
	if !strings.HasPrefix(cn, "messageverificationcerts") || !strings.HasSuffix(cn, ".paypal.com") {
		return fmt.Errorf("certificate subject %s does not name PayPal's message verification", keying.Clip(cn))
	}
	pool := x509.NewCertPool()
	for _, c := range intermediates {
		pool.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: pool,
		CurrentTime:   now,
		// A signing certificate, not a TLS server's: any extended usage.
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return fmt.Errorf("certificate does not chain to a trusted root: %v", err)
	}
	return nil
}

// Success: any 2xx.
func (*PayPal) Success(status int, _ http.Header, _ []byte) bool { return keying.Is2xx(status) }

// RetryWindow: PayPal retries a webhook up to 25 times over 3 days.
func (*PayPal) RetryWindow() time.Duration { return 72 * time.Hour }

// paypalSettles sets n's reconciliation fields from a verified event: a
// capture or sale completed is a payment, refunded a refund (the
// resource is then the refund, whose transaction id the report's T1107
// row carries).
func paypalSettles(n *keying.Notification, typ string) {
	switch typ {
	case "PAYMENT.CAPTURE.COMPLETED", "PAYMENT.SALE.COMPLETED":
		n.Settles = keying.SettlesPayment
	case "PAYMENT.CAPTURE.REFUNDED", "PAYMENT.SALE.REFUNDED":
		n.Settles = keying.SettlesRefund
	default:
		return
	}
	for _, p := range []string{"resource.create_time", "create_time"} {
		if v, _, _ := n.Fields.JSON(p); v != "" {
			if n.At = keying.RFC3339Time(v); !n.At.IsZero() {
				break
			}
		}
	}
	if id, _, _ := n.Fields.JSON("resource.id"); id != "" {
		n.Refs = []string{id}
	}
}

func (p *PayPal) Keys() []keying.KeyInfo {
	out := make([]keying.KeyInfo, 0, len(p.pinned))
	for _, k := range p.pinned {
		out = append(out, keying.KeyInfo{ID: k.serial, NotAfter: k.notAfter})
	}
	return out
}

// VerifiedBy: the pinned certificate valid at r.Now whose key matches the
// signature (checked again only while several are valid, as during a
// rotation), or the serial of the certificate fetched from
// PAYPAL-CERT-URL.
func (p *PayPal) VerifiedBy(r *keying.Request) string {
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
	sig, ok := keying.DecodeB64Sig(r.Header.Get("PAYPAL-TRANSMISSION-SIG"))
	if !ok {
		return ""
	}
	msg := PayPalSignContent(r.Header.Get("PAYPAL-TRANSMISSION-ID"), r.Header.Get("PAYPAL-TRANSMISSION-TIME"), p.webhookID, r.Body)
	for _, k := range valid {
		if keying.VerifyPKCS1(k.key, crypto.SHA256, msg, sig) {
			return k.serial
		}
	}
	return ""
}

var _ keying.KeyReporter = (*PayPal)(nil)
