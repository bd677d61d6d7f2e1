package paypal

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// Tests against samples signed by the platforms themselves, taken from
// their SDKs' test suites and documentation (keying/testdata says where
// each comes from): they pin the verifiers to the platforms' real output,
// not only to internal/platformtest's reading of the documentation.

// paypalSample is the BILLING.PLAN.CREATED event of PayPal's Java SDK
// ValidateCertTest, with its headers and certificates.
func paypalSample(t *testing.T) (body []byte, h http.Header, leaf, ca []byte) {
	t.Helper()
	body = presettest.ReadTestdata(t, "paypal-java-sdk/body.json")
	h = http.Header{}
	sc := bufio.NewScanner(bytes.NewReader(presettest.ReadTestdata(t, "paypal-java-sdk/headers.txt")))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if ok {
			h.Set(k, v)
		}
	}
	return body, h, presettest.ReadTestdata(t, "paypal-java-sdk/testClientCert.crt"),
		presettest.ReadTestdata(t, "paypal-java-sdk/DigiCertSHA2ExtendedValidationServerCA.crt")
}

func TestPayPalJavaSDKSample(t *testing.T) {
	body, h, leaf, ca := paypalSample(t)
	const webhookID = "96605875FF6516633"
	const key = "WH-2MW4820926242972J-6SG447389E205703U"
	signedAt := time.Date(2017, 3, 30, 20, 4, 5, 0, time.UTC)
	at := func(now time.Time, b []byte) *keying.Request {
		return &keying.Request{Method: http.MethodPost, Header: h, Body: b, Now: now}
	}
	pinned := Config{WebhookID: webhookID, Certificates: [][]byte{leaf}}
	presettest.RunVerifyCases(t, New, []presettest.VerifyCase[Config]{
		{Name: "pinned certificate", Cfg: pinned, Req: at(signedAt.Add(time.Minute), body), WantErr: nil, Key: key},
		{Name: "another webhook id", Cfg: Config{WebhookID: "96605875FF6516634", Certificates: [][]byte{leaf}}, Req: at(signedAt, body), WantErr: keying.ErrSignature, Key: ""},
		{Name: "body changed", Cfg: pinned, Req: at(signedAt, bytes.Replace(body, []byte(`"value":"100"`), []byte(`"value":"900"`), 1)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "replayed an hour later", Cfg: pinned, Req: at(signedAt.Add(time.Hour), body), WantErr: keying.ErrSignature, Key: ""},
		{Name: "pinned certificate expired (2019)", Cfg: pinned, Req: at(time.Date(2019, 4, 27, 0, 0, 0, 0, time.UTC), body), WantErr: keying.ErrSignature, Key: ""},
	}, nil)

	// Fetched: the bundle served at PAYPAL-CERT-URL must chain to the CA
	// the SDK trusts, and names PayPal's message verification.
	ca2, err := keying.ParseCertificates(ca)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(leaf) }))
	defer srv.Close()
	srvURL, _ := url.Parse(srv.URL)
	for _, c := range []struct {
		name  string
		roots bool
		want  error
	}{
		{"fetched, chained to the SDK's trusted CA", true, nil},
		{"fetched, no trusted root", false, keying.ErrSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{WebhookID: webhookID, HTTPClient: srv.Client()}
			if c.roots {
				cfg.Roots = presettest.PoolOf(ca2...)
			} else {
				cfg.Roots = presettest.PoolOf() // empty: nothing is trusted
			}
			p := presettest.MustNew(t, New, cfg).(*PayPal)
			p.certURLOK = func(u *url.URL) bool { return u.Host == srvURL.Host }
			r := presettest.Hdr(at(signedAt, body), "Paypal-Cert-Url", srv.URL+"/v1/notifications/certs/CERT-sample")
			n, err := p.Verify(r)
			presettest.WantErr(t, err, c.want)
			if err == nil && n.Key != key {
				t.Fatalf("Key = %q", n.Key)
			}
		})
	}
}
