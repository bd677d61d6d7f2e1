package keying

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Tests against samples signed by the platforms themselves, taken from
// their SDKs' test suites and documentation (keying/testdata says where
// each comes from): they pin the verifiers to the platforms' real output,
// not only to internal/platformtest's reading of the documentation.

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// headerFile reads "Name: value" lines.
func headerFile(t *testing.T, name string) http.Header {
	t.Helper()
	h := http.Header{}
	sc := bufio.NewScanner(bytes.NewReader(readTestdata(t, name)))
	sc.Buffer(nil, 64<<10)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if ok {
			h.Set(k, v)
		}
	}
	return h
}

// paypalSample is the BILLING.PLAN.CREATED event of PayPal's Java SDK
// ValidateCertTest, with its headers and certificates.
func paypalSample(t *testing.T) (body []byte, h http.Header, leaf, ca []byte) {
	t.Helper()
	body = readTestdata(t, "paypal-java-sdk/body.json")
	h = http.Header{}
	sc := bufio.NewScanner(bytes.NewReader(readTestdata(t, "paypal-java-sdk/headers.txt")))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if ok {
			h.Set(k, v)
		}
	}
	return body, h, readTestdata(t, "paypal-java-sdk/testClientCert.crt"),
		readTestdata(t, "paypal-java-sdk/DigiCertSHA2ExtendedValidationServerCA.crt")
}

func TestPayPalJavaSDKSample(t *testing.T) {
	body, h, leaf, ca := paypalSample(t)
	const webhookID = "96605875FF6516633"
	const key = "WH-2MW4820926242972J-6SG447389E205703U"
	signedAt := time.Date(2017, 3, 30, 20, 4, 5, 0, time.UTC)
	at := func(now time.Time, b []byte) *Request {
		return &Request{Method: http.MethodPost, Header: h, Body: b, Now: now}
	}
	pinned := Config{WebhookID: webhookID, Certificates: [][]byte{leaf}}
	runVerifyCases(t, "paypal", []verifyCase{
		{"pinned certificate", pinned, at(signedAt.Add(time.Minute), body), nil, key},
		{"another webhook id", Config{WebhookID: "96605875FF6516634", Certificates: [][]byte{leaf}}, at(signedAt, body), ErrSignature, ""},
		{"body changed", pinned, at(signedAt, bytes.Replace(body, []byte(`"value":"100"`), []byte(`"value":"900"`), 1)), ErrSignature, ""},
		{"replayed an hour later", pinned, at(signedAt.Add(time.Hour), body), ErrSignature, ""},
		{"pinned certificate expired (2019)", pinned, at(time.Date(2019, 4, 27, 0, 0, 0, 0, time.UTC), body), ErrSignature, ""},
	}, nil)

	// Fetched: the bundle served at PAYPAL-CERT-URL must chain to the CA
	// the SDK trusts, and names PayPal's message verification.
	ca2, err := ParseCertificates(ca)
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
		{"fetched, no trusted root", false, ErrSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{WebhookID: webhookID, HTTPClient: srv.Client()}
			if c.roots {
				cfg.PayPalRoots = poolOf(ca2...)
			} else {
				cfg.PayPalRoots = poolOf() // empty: nothing is trusted
			}
			p := mustNew(t, "paypal", cfg).(*PayPal)
			p.certURLOK = func(u *url.URL) bool { return u.Host == srvURL.Host }
			r := hdr(at(signedAt, body), "Paypal-Cert-Url", srv.URL+"/v1/notifications/certs/CERT-sample")
			n, err := p.Verify(r)
			wantErr(t, err, c.want)
			if err == nil && n.Key != key {
				t.Fatalf("Key = %q", n.Key)
			}
		})
	}
}

func TestStandardWebhooksReferenceVector(t *testing.T) {
	var v map[string]string
	if err := json.Unmarshal(readTestdata(t, "standard_webhooks.json"), &v); err != nil {
		t.Fatal(err)
	}
	req := func(sig string) *Request {
		return &Request{Method: http.MethodPost, Body: []byte(v["body"]), Now: time.Unix(1614265330, 0).Add(10 * time.Second),
			Header: http.Header{"Webhook-Id": {v["webhook-id"]}, "Webhook-Timestamp": {v["webhook-timestamp"]}, "Webhook-Signature": {sig}}}
	}
	bare := strings.TrimPrefix(v["secret"], "whsec_")
	runVerifyCases(t, "standard_webhooks", []verifyCase{
		{"reference vector", Config{Secret: v["secret"]}, req(v["webhook-signature"]), nil, v["webhook-id"]},
		{"secret without whsec_", Config{Secret: bare}, req(v["webhook-signature"]), nil, v["webhook-id"]},
		{"among other signatures", Config{Secret: v["secret"]}, req("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + v["webhook-signature"]), nil, v["webhook-id"]},
		{"another secret", Config{Secret: "whsec_" + strings.ToLower(bare)}, req(v["webhook-signature"]), ErrSignature, ""},
	}, nil)
}

func TestWechatPayV2DocumentationVector(t *testing.T) {
	var v struct {
		Key    string            `json:"key"`
		Fields map[string]string `json:"fields"`
		MD5    string            `json:"md5"`
		HMAC   string            `json:"hmac-sha256"`
	}
	if err := json.Unmarshal(readTestdata(t, "wechatpay_v2.json"), &v); err != nil {
		t.Fatal(err)
	}
	w := mustNew(t, "wechatpay_v2", Config{Secret: v.Key}).(*WechatPayV2)
	for name, sign := range map[string]string{"MD5": v.MD5, "HMAC-SHA256": v.HMAC} {
		fields := map[string]string{"sign": sign}
		for k, val := range v.Fields {
			fields[k] = val
		}
		if err := w.verify(fields); err != nil {
			t.Errorf("%s: the documentation's example does not verify: %v", name, err)
		}
		fields["body"] = "test2"
		if err := w.verify(fields); err == nil {
			t.Errorf("%s: a changed field verified", name)
		}
	}
}

func poolOf(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

func TestWechatPayGoSDKSample(t *testing.T) {
	body := readTestdata(t, "wechatpay-go/body.json")
	h := headerFile(t, "wechatpay-go/headers.txt")
	cert := readTestdata(t, "wechatpay-go/cert.pem")
	signedAt := time.Unix(1624523846, 0)
	req := func(now time.Time, b []byte, h http.Header) *Request {
		return &Request{Method: http.MethodPost, Header: h, Body: b, Now: now}
	}
	cfg := Config{Certificates: [][]byte{cert}}
	const key = "3119dfba-e649-5eec-ab1e-3412bc4d2e17"
	runVerifyCases(t, "wechatpay", []verifyCase{
		{"as the SDK's test verifies it", cfg, req(signedAt, body, h), nil, key},
		{"four minutes later", cfg, req(signedAt.Add(4*time.Minute), body, h), nil, key},
		{"an hour later", cfg, req(signedAt.Add(time.Hour), body, h), ErrSignature, ""},
		{"an hour later, tolerance 2h", Config{Certificates: [][]byte{cert}, Tolerance: 2 * time.Hour}, req(signedAt.Add(time.Hour), body, h), nil, key},
		{"body changed", cfg, req(signedAt, bytes.Replace(body, []byte("签约成功"), []byte("签约失败"), 1), h), ErrSignature, ""},
		{"another serial", cfg, req(signedAt, body, hdr(&Request{Header: h}, "Wechatpay-Serial", "D7CE59D1F522D702").Header), ErrSignature, ""},
	}, nil)
}
