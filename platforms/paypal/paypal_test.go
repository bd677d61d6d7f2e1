package paypal

import (
	"crypto/rsa"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

const (
	ppWebhookID = "1JE4291016473214C"
	ppCertURL   = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270"
)

// ppTxTime is the transmission time of every signed test request.
var ppTxTime = time.Date(2026, 3, 14, 9, 26, 51, 0, time.UTC)

// ppEvent is a PAYMENT.CAPTURE.COMPLETED event of 7.47 USD, shaped as
// PayPal's webhook documentation shows it.
func ppEvent(id, typ, resID string) []byte {
	return platformtest.PayPalEvent(id, typ, resID, "7.47")
}

// ppReq is body signed by k as PayPal signs transmission txID (at
// ppTxTime) to webhookID, with certURL in Paypal-Cert-Url.
func ppReq(t testing.TB, k *rsa.PrivateKey, webhookID, txID, certURL string, body []byte) *keying.Request {
	t.Helper()
	pp := platformtest.PayPal{Key: k, WebhookID: webhookID, CertURL: certURL}
	return presettest.Post(body, pp.TransmissionHeader(t, body, txID, ppTxTime))
}

func TestPayPalConfiguredCertificate(t *testing.T) {
	k, other := platformtest.Keys(t)
	cfg := Config{WebhookID: ppWebhookID, Certificates: [][]byte{presettest.Cert(t, k, presettest.BigInt(3), "messageverificationcerts.sandbox.paypal.com")},
		HTTPClient: noNetwork(t)}
	ev := ppEvent("WH-2WR32451HC0233532-67976317FL4543714", "PAYMENT.CAPTURE.COMPLETED", "42311647XV020574X")
	valid := ppReq(t, k, ppWebhookID, "69cd13f0-d67a-11e5-baa3-778b53f4ae55", ppCertURL, ev)
	const key = "WH-2WR32451HC0233532-67976317FL4543714"
	cases := []presettest.VerifyCase[Config]{
		{Name: "valid", Cfg: cfg, Req: valid, WantErr: nil, Key: key},
		{Name: "retry, new transmission", Cfg: cfg, Req: ppReq(t, k, ppWebhookID, "a1b2c3", ppCertURL, ev), WantErr: nil, Key: key},
		{Name: "cert URL ignored when configured", Cfg: cfg, Req: presettest.Hdr(valid, "Paypal-Cert-Url", "http://evil.example/cert"), WantErr: nil, Key: key},
		{Name: "another event", Cfg: cfg, Req: ppReq(t, k, ppWebhookID, "x", ppCertURL, ppEvent("WH-2", "PAYMENT.CAPTURE.REFUNDED", "42311647XV020574X")), WantErr: nil, Key: "WH-2"},
		{Name: "wrong key", Cfg: cfg, Req: ppReq(t, other, ppWebhookID, "x", ppCertURL, ev), WantErr: keying.ErrSignature, Key: ""},
		{Name: "other webhook id", Cfg: cfg, Req: ppReq(t, k, "OTHERWEBHOOK", "x", ppCertURL, ev), WantErr: keying.ErrSignature, Key: ""},
		{Name: "tampered body", Cfg: cfg, Req: presettest.WithBody(valid, ppEvent("WH-2WR32451HC0233532-67976317FL4543714", "PAYMENT.CAPTURE.COMPLETED", "other")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "tampered transmission id", Cfg: cfg, Req: presettest.Hdr(valid, "Paypal-Transmission-Id", "forged"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "other algorithm", Cfg: cfg, Req: presettest.Hdr(valid, "Paypal-Auth-Algo", "SHA1withRSA"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no signature", Cfg: cfg, Req: presettest.Hdr(valid, "Paypal-Transmission-Sig", ""), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no transmission id", Cfg: cfg, Req: presettest.Hdr(valid, "Paypal-Transmission-Id", ""), WantErr: keying.ErrSignature, Key: ""},
		{Name: "absurd transmission id", Cfg: cfg, Req: ppReq(t, k, ppWebhookID, strings.Repeat("x", 200), ppCertURL, ev), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no transmission time", Cfg: cfg, Req: presettest.Hdr(valid, "Paypal-Transmission-Time", ""), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no algorithm", Cfg: cfg, Req: presettest.Hdr(valid, "Paypal-Auth-Algo", ""), WantErr: keying.ErrSignature, Key: ""},
		{Name: "signature not base64", Cfg: cfg, Req: presettest.Hdr(valid, "Paypal-Transmission-Sig", "%%%"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "signed non-JSON", Cfg: cfg, Req: ppReq(t, k, ppWebhookID, "x", ppCertURL, []byte("hi")), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "signed JSON without id", Cfg: cfg, Req: ppReq(t, k, ppWebhookID, "x", ppCertURL, []byte(`{"event_type":"X"}`)), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "verify off", Cfg: Config{NoVerify: true}, Req: presettest.Hdr(valid, "Paypal-Transmission-Sig", ""), WantErr: nil, Key: key},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if c.Key == key && n.Fingerprint != `["PAYMENT.CAPTURE.COMPLETED","42311647XV020574X"]` {
			t.Fatalf("Fingerprint = %s", n.Fingerprint)
		}
	})
}

// noNetwork is a client that fails the test if it is ever used.
func noNetwork(t *testing.T) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		t.Errorf("unexpected fetch of %s", r.URL)
		return nil, errors.New("no network in tests")
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestPayPalRefusesForeignCertURLs(t *testing.T) {
	k, _ := platformtest.Keys(t)
	p := presettest.MustNew(t, New, Config{WebhookID: ppWebhookID, HTTPClient: noNetwork(t)})
	ev := ppEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "1")
	for _, u := range []string{
		"http://api.paypal.com/v1/notifications/certs/CERT-1",
		"https://evil.example/v1/notifications/certs/CERT-1",
		"https://api.paypal.com.evil.example/cert",
		"https://paypal.com.evil.example/cert",
		"https://evilpaypal.com/cert",
		"https://user:pw@api.paypal.com/cert",
		"https://api.paypal.com@evil.example/cert",
		"https://api.paypal.com:8443/cert",
		"https://api.paypal.com:443/cert",
		"https://evil.example#.paypal.com",
		"https://evil.example?.paypal.com",
		"https://evil.example\\.paypal.com/cert",
		"https://127.0.0.1/cert",
		"https://[::1]/cert",
		"https://.paypal.com/cert",
		"https://a..paypal.com/cert",
		"https://api.paypal.com./cert",
		"//api.paypal.com/cert",
		"api.paypal.com/cert",
		"file:///etc/passwd",
		"",
		"https://api.paypal.com/" + strings.Repeat("a", 2000),
	} {
		t.Run(u, func(t *testing.T) {
			_, err := p.Verify(presettest.Hdr(ppReq(t, k, ppWebhookID, "x", u, ev), "Paypal-Cert-Url", u))
			presettest.WantErr(t, err, keying.ErrSignature)
		})
	}
}

func TestPayPalCertURLOK(t *testing.T) {
	for _, u := range []string{
		ppCertURL,
		"https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270",
		"https://api-m.sandbox.paypal.com/v1/notifications/certs/CERT-1",
		"https://api-m.paypal.com/v1/notifications/certs/CERT-1",
	} {
		pu, err := url.Parse(u)
		if err != nil || !paypalCertURLOK(pu) {
			t.Errorf("%s refused", u)
		}
	}
}

// TestPayPalFetch covers the certificate fetch against a local TLS server,
// with the host check widened to that server only.
func TestPayPalFetch(t *testing.T) {
	k, other := platformtest.Keys(t)
	root := platformtest.NewCA(t, other, "Test Root CA")
	inter := root.Intermediate(t, other, "Test EV Server CA")
	issue := func(cn string, from, to time.Time) []byte {
		return append(inter.Issue(t, k, presettest.BigInt(11), cn, from, to), inter.PEM...)
	}
	const ppCN = "messageverificationcerts.sandbox.paypal.com"
	good := issue(ppCN, presettest.Now.Add(-24*time.Hour), presettest.Now.Add(365*24*time.Hour))
	expired := issue(ppCN, presettest.Now.Add(-48*time.Hour), presettest.Now.Add(-24*time.Hour))
	notYet := issue(ppCN, presettest.Now.Add(time.Hour), presettest.Now.Add(48*time.Hour))
	foreignCN := issue("messageverificationcerts.sandbox.example.com", presettest.Now.Add(-24*time.Hour), presettest.Now.Add(365*24*time.Hour))
	selfSigned := presettest.Cert(t, k, presettest.BigInt(12), ppCN)
	noIntermediate := inter.Issue(t, k, presettest.BigInt(13), ppCN, presettest.Now.Add(-24*time.Hour), presettest.Now.Add(365*24*time.Hour))
	var hits atomic.Int32
	mux := http.NewServeMux()
	for path, body := range map[string][]byte{
		"CERT-not-yet-valid": notYet, "CERT-foreign-cn": foreignCN, "CERT-self-signed": selfSigned, "CERT-no-intermediate": noIntermediate,
	} {
		mux.HandleFunc("/v1/notifications/certs/"+path, func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Write(body)
		})
	}
	mux.HandleFunc("/v1/notifications/certs/CERT-good", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(good)
	})
	mux.HandleFunc("/v1/notifications/certs/CERT-expired", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(expired)
	})
	mux.HandleFunc("/v1/notifications/certs/CERT-huge", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(strings.Repeat("A", 100<<10)))
	})
	mux.HandleFunc("/v1/notifications/certs/CERT-redirect", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "https://evil.example/cert", http.StatusFound)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	})
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	srvURL, _ := url.Parse(srv.URL)

	newP := func() *PayPal {
		p := presettest.MustNew(t, New, Config{WebhookID: ppWebhookID, HTTPClient: srv.Client(), Roots: root.Pool()}).(*PayPal)
		p.certURLOK = func(u *url.URL) bool { return u.Scheme == "https" && u.Host == srvURL.Host }
		return p
	}
	ev := ppEvent("WH-9", "PAYMENT.CAPTURE.COMPLETED", "1")
	certURL := srv.URL + "/v1/notifications/certs/CERT-good"

	t.Run("fetched, verified and cached", func(t *testing.T) {
		p := newP()
		hits.Store(0)
		for i := range 3 {
			n, err := p.Verify(ppReq(t, k, ppWebhookID, "tx"+strconv.Itoa(i), certURL, ev))
			if err != nil {
				t.Fatal(err)
			}
			if n.Key != "WH-9" {
				t.Fatalf("Key = %q", n.Key)
			}
		}
		if h := hits.Load(); h != 1 {
			t.Fatalf("%d fetches, want 1", h)
		}
		if _, err := p.Verify(ppReq(t, other, ppWebhookID, "tx", certURL, ev)); !errors.Is(err, keying.ErrSignature) {
			t.Fatalf("wrong key: %v", err)
		}
	})
	for _, c := range []struct{ name, path string }{
		{"expired certificate", "CERT-expired"},
		{"certificate not yet valid", "CERT-not-yet-valid"},
		{"subject does not name PayPal", "CERT-foreign-cn"},
		{"self-signed, not chained to the root", "CERT-self-signed"},
		{"intermediate missing", "CERT-no-intermediate"},
		{"oversized body", "CERT-huge"},
		{"redirect off the allowed host", "CERT-redirect"},
		{"not found", "CERT-missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newP()
			hits.Store(0)
			u := srv.URL + "/v1/notifications/certs/" + c.path
			for range 2 {
				_, err := p.Verify(ppReq(t, k, ppWebhookID, "tx", u, ev))
				presettest.WantErr(t, err, keying.ErrSignature)
			}
			if h := hits.Load(); h != 1 {
				t.Fatalf("%d fetches, want 1 (failures are cached briefly)", h)
			}
		})
	}
	t.Run("cache stays bounded", func(t *testing.T) {
		p := newP()
		for i := range paypalCacheSize + 10 {
			p.Verify(ppReq(t, k, ppWebhookID, "tx", srv.URL+"/v1/notifications/certs/CERT-x"+strconv.Itoa(i), ev))
		}
		p.mu.Lock()
		n := len(p.cache)
		p.mu.Unlock()
		if n > paypalCacheSize {
			t.Fatalf("cache holds %d entries, bound is %d", n, paypalCacheSize)
		}
	})
	t.Run("real host check refuses the test server", func(t *testing.T) {
		p := presettest.MustNew(t, New, Config{WebhookID: ppWebhookID, HTTPClient: srv.Client(), Roots: root.Pool()})
		hits.Store(0)
		_, err := p.Verify(ppReq(t, k, ppWebhookID, "tx", certURL, ev))
		presettest.WantErr(t, err, keying.ErrSignature)
		if hits.Load() != 0 {
			t.Fatal("fetched from a non-PayPal host")
		}
	})
}

func TestPayPalSuccess(t *testing.T) {
	presettest.CheckSuccess(t, presettest.MustNew(t, New, Config{NoVerify: true}), nil, []presettest.SuccessCase{
		{Status: 200, Body: "", Want: true}, {Status: 202, Body: "", Want: true}, {Status: 204, Body: "", Want: true}, {Status: 301, Body: "", Want: false}, {Status: 404, Body: "", Want: false}, {Status: 503, Body: "", Want: false},
	})
}

func TestPayPalSignContent(t *testing.T) {
	// crc32 of the body in decimal, unsigned.
	got := string(PayPalSignContent("id", "time", "wh", []byte("hello")))
	if want := "id|time|wh|907060870"; got != want {
		t.Fatalf("PayPalSignContent = %q, want %q", got, want)
	}
}

func FuzzPayPal(f *testing.F) {
	k, _ := platformtest.Keys(f)
	ev := ppEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "1")
	good := ppReq(f, k, ppWebhookID, "tx", ppCertURL, ev)
	f.Add(ev, good.Header.Get("Paypal-Transmission-Sig"), "tx", ppCertURL, "SHA256withRSA")
	f.Add([]byte(`{"id":{}}`), "", "", "https://x.paypal.com:1/", "sha256withrsa")
	f.Add([]byte(`null`), "AAAA", "t", "https://u@api.paypal.com/", "")
	verifying := presettest.MustNew(f, New, Config{WebhookID: ppWebhookID, Certificates: [][]byte{presettest.Cert(f, k, presettest.BigInt(3), "pp")}})
	fetching := presettest.MustNew(f, New, Config{WebhookID: ppWebhookID, HTTPClient: &http.Client{Transport: roundTripFunc(
		func(*http.Request) (*http.Response, error) { return nil, errors.New("no network in fuzzing") })}})
	f.Fuzz(func(t *testing.T, body []byte, sig, txID, certURL, algo string) {
		r := &keying.Request{Method: http.MethodPost, Body: body, Now: presettest.Now, Header: http.Header{
			"Paypal-Transmission-Id": {txID}, "Paypal-Transmission-Time": {"2026-03-14T09:26:51Z"},
			"Paypal-Transmission-Sig": {sig}, "Paypal-Cert-Url": {certURL}, "Paypal-Auth-Algo": {algo},
		}}
		presettest.FuzzVerify(t, r, nil, verifying, fetching)
		if u, err := url.Parse(certURL); err == nil && paypalCertURLOK(u) {
			if u.Scheme != "https" || u.User != nil || u.Port() != "" || !strings.HasSuffix(u.Hostname(), ".paypal.com") {
				t.Fatalf("accepted %q", certURL)
			}
		}
	})
}

// TestConcurrentVerify runs the preset from several goroutines at once
// (meaningful under -race): a Platform is shared by all requests of a route.
func TestConcurrentVerify(t *testing.T) {
	k, _ := platformtest.Keys(t)
	ppBody := ppEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "1")
	presettest.ConcurrentVerify(t, presettest.MustNew(t, New, Config{WebhookID: ppWebhookID, Certificates: [][]byte{presettest.Cert(t, k, presettest.BigInt(3), "pp")}}),
		ppReq(t, k, ppWebhookID, "tx", ppCertURL, ppBody))
}
