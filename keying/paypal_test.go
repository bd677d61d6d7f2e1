package keying

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
func ppReq(t testing.TB, k *rsa.PrivateKey, webhookID, txID, certURL string, body []byte) *Request {
	t.Helper()
	pp := platformtest.PayPal{Key: k, WebhookID: webhookID, CertURL: certURL}
	return post(body, pp.TransmissionHeader(t, body, txID, ppTxTime))
}

func TestPayPalConfiguredCertificate(t *testing.T) {
	k, other := platformtest.Keys(t)
	cfg := Config{WebhookID: ppWebhookID, Certificates: [][]byte{testCert(t, k, bigInt(3), "messageverificationcerts.sandbox.paypal.com")},
		HTTPClient: noNetwork(t)}
	ev := ppEvent("WH-2WR32451HC0233532-67976317FL4543714", "PAYMENT.CAPTURE.COMPLETED", "42311647XV020574X")
	valid := ppReq(t, k, ppWebhookID, "69cd13f0-d67a-11e5-baa3-778b53f4ae55", ppCertURL, ev)
	const key = "WH-2WR32451HC0233532-67976317FL4543714"
	cases := []verifyCase{
		{"valid", cfg, valid, nil, key},
		{"retry, new transmission", cfg, ppReq(t, k, ppWebhookID, "a1b2c3", ppCertURL, ev), nil, key},
		{"cert URL ignored when configured", cfg, hdr(valid, "Paypal-Cert-Url", "http://evil.example/cert"), nil, key},
		{"another event", cfg, ppReq(t, k, ppWebhookID, "x", ppCertURL, ppEvent("WH-2", "PAYMENT.CAPTURE.REFUNDED", "42311647XV020574X")), nil, "WH-2"},
		{"wrong key", cfg, ppReq(t, other, ppWebhookID, "x", ppCertURL, ev), ErrSignature, ""},
		{"other webhook id", cfg, ppReq(t, k, "OTHERWEBHOOK", "x", ppCertURL, ev), ErrSignature, ""},
		{"tampered body", cfg, withReqBody(valid, ppEvent("WH-2WR32451HC0233532-67976317FL4543714", "PAYMENT.CAPTURE.COMPLETED", "other")), ErrSignature, ""},
		{"tampered transmission id", cfg, hdr(valid, "Paypal-Transmission-Id", "forged"), ErrSignature, ""},
		{"other algorithm", cfg, hdr(valid, "Paypal-Auth-Algo", "SHA1withRSA"), ErrSignature, ""},
		{"no signature", cfg, hdr(valid, "Paypal-Transmission-Sig", ""), ErrSignature, ""},
		{"no transmission id", cfg, hdr(valid, "Paypal-Transmission-Id", ""), ErrSignature, ""},
		{"absurd transmission id", cfg, ppReq(t, k, ppWebhookID, strings.Repeat("x", 200), ppCertURL, ev), ErrSignature, ""},
		{"no transmission time", cfg, hdr(valid, "Paypal-Transmission-Time", ""), ErrSignature, ""},
		{"no algorithm", cfg, hdr(valid, "Paypal-Auth-Algo", ""), ErrSignature, ""},
		{"signature not base64", cfg, hdr(valid, "Paypal-Transmission-Sig", "%%%"), ErrSignature, ""},
		{"signed non-JSON", cfg, ppReq(t, k, ppWebhookID, "x", ppCertURL, []byte("hi")), ErrMalformed, ""},
		{"signed JSON without id", cfg, ppReq(t, k, ppWebhookID, "x", ppCertURL, []byte(`{"event_type":"X"}`)), ErrMalformed, ""},
		{"verify off", Config{NoVerify: true}, hdr(valid, "Paypal-Transmission-Sig", ""), nil, key},
	}
	runVerifyCases(t, "paypal", cases, func(t *testing.T, c verifyCase, n *Notification) {
		if c.key == key && n.Fingerprint != `["PAYMENT.CAPTURE.COMPLETED","42311647XV020574X"]` {
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
	p := mustNew(t, "paypal", Config{WebhookID: ppWebhookID, HTTPClient: noNetwork(t)})
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
			_, err := p.Verify(hdr(ppReq(t, k, ppWebhookID, "x", u, ev), "Paypal-Cert-Url", u))
			wantErr(t, err, ErrSignature)
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
		return append(inter.Issue(t, k, bigInt(11), cn, from, to), inter.PEM...)
	}
	const ppCN = "messageverificationcerts.sandbox.paypal.com"
	good := issue(ppCN, testNow.Add(-24*time.Hour), testNow.Add(365*24*time.Hour))
	expired := issue(ppCN, testNow.Add(-48*time.Hour), testNow.Add(-24*time.Hour))
	notYet := issue(ppCN, testNow.Add(time.Hour), testNow.Add(48*time.Hour))
	foreignCN := issue("messageverificationcerts.sandbox.example.com", testNow.Add(-24*time.Hour), testNow.Add(365*24*time.Hour))
	selfSigned := testCert(t, k, bigInt(12), ppCN)
	noIntermediate := inter.Issue(t, k, bigInt(13), ppCN, testNow.Add(-24*time.Hour), testNow.Add(365*24*time.Hour))
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
		p := mustNew(t, "paypal", Config{WebhookID: ppWebhookID, HTTPClient: srv.Client(), PayPalRoots: root.Pool()}).(*PayPal)
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
		if _, err := p.Verify(ppReq(t, other, ppWebhookID, "tx", certURL, ev)); !errors.Is(err, ErrSignature) {
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
				wantErr(t, err, ErrSignature)
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
		p := mustNew(t, "paypal", Config{WebhookID: ppWebhookID, HTTPClient: srv.Client(), PayPalRoots: root.Pool()})
		hits.Store(0)
		_, err := p.Verify(ppReq(t, k, ppWebhookID, "tx", certURL, ev))
		wantErr(t, err, ErrSignature)
		if hits.Load() != 0 {
			t.Fatal("fetched from a non-PayPal host")
		}
	})
}

func TestPayPalSuccess(t *testing.T) {
	checkSuccess(t, mustNew(t, "paypal", Config{NoVerify: true}), nil, []successCase{
		{200, "", true}, {202, "", true}, {204, "", true}, {301, "", false}, {404, "", false}, {503, "", false},
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
	verifying := mustNew(f, "paypal", Config{WebhookID: ppWebhookID, Certificates: [][]byte{testCert(f, k, bigInt(3), "pp")}})
	fetching := mustNew(f, "paypal", Config{WebhookID: ppWebhookID, HTTPClient: &http.Client{Transport: roundTripFunc(
		func(*http.Request) (*http.Response, error) { return nil, errors.New("no network in fuzzing") })}})
	f.Fuzz(func(t *testing.T, body []byte, sig, txID, certURL, algo string) {
		r := &Request{Method: http.MethodPost, Body: body, Now: testNow, Header: http.Header{
			"Paypal-Transmission-Id": {txID}, "Paypal-Transmission-Time": {"2026-03-14T09:26:51Z"},
			"Paypal-Transmission-Sig": {sig}, "Paypal-Cert-Url": {certURL}, "Paypal-Auth-Algo": {algo},
		}}
		fuzzVerify(t, r, nil, verifying, fetching)
		if u, err := url.Parse(certURL); err == nil && paypalCertURLOK(u) {
			if u.Scheme != "https" || u.User != nil || u.Port() != "" || !strings.HasSuffix(u.Hostname(), ".paypal.com") {
				t.Fatalf("accepted %q", certURL)
			}
		}
	})
}
