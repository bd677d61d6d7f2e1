package keying

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// swReq is body signed for message id at ts with secret, by the Standard
// Webhooks reference library.
func swReq(t testing.TB, secret, id string, ts time.Time, body []byte) *Request {
	t.Helper()
	return post(body, platformtest.StandardWebhooksHeader(t, secret, id, ts, body))
}

func TestStandardWebhooks(t *testing.T) {
	cfg := Config{Secret: swSecret}
	body := []byte(`{"type":"invoice.paid","timestamp":"2026-03-14T09:26:53Z","data":{"id":"inv_1","amount":1200}}`)
	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	valid := swReq(t, swSecret, id, testNow, body)
	other := swReq(t, "whsec_"+"b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA==", id, testNow, body)

	cases := []verifyCase{
		{"valid", cfg, valid, nil, id},
		{"secret without prefix", Config{Secret: strings.TrimPrefix(swSecret, "whsec_")}, valid, nil, id},
		{"padded secret, padding written", Config{Secret: "whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA=="}, other, nil, id},
		{"padded secret, padding left out", Config{Secret: "whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA"}, other, nil, id},
		{"retry, re-signed", cfg, swReq(t, swSecret, id, testNow.Add(-4*time.Minute), body), nil, id},
		{"another message", cfg, swReq(t, swSecret, "msg_other", testNow, body), nil, "msg_other"},
		{"several signatures, one matches", cfg, hdr(valid, "Webhook-Signature", other.Header.Get("Webhook-Signature")+" v1a,AAAA "+valid.Header.Get("Webhook-Signature")), nil, id},
		{"stale", cfg, swReq(t, swSecret, id, testNow.Add(-6*time.Minute), body), ErrSignature, ""},
		{"within a configured tolerance", Config{Secret: swSecret, Tolerance: 10 * time.Minute}, swReq(t, swSecret, id, testNow.Add(-8*time.Minute), body), nil, id},
		{"future", cfg, swReq(t, swSecret, id, testNow.Add(6*time.Minute), body), ErrSignature, ""},
		{"wrong secret", cfg, other, ErrSignature, ""},
		{"tampered body", cfg, withReqBody(valid, []byte(strings.Replace(string(body), "1200", "1", 1))), ErrSignature, ""},
		{"tampered id", cfg, hdr(valid, "Webhook-Id", "msg_forged"), ErrSignature, ""},
		{"tampered timestamp", cfg, hdr(valid, "Webhook-Timestamp", strconv.FormatInt(testNow.Unix()+1, 10)), ErrSignature, ""},
		{"no id", cfg, hdr(valid, "Webhook-Id", ""), ErrSignature, ""},
		{"no timestamp", cfg, hdr(valid, "Webhook-Timestamp", ""), ErrSignature, ""},
		{"no signature", cfg, hdr(valid, "Webhook-Signature", ""), ErrSignature, ""},
		{"unknown version only", cfg, hdr(valid, "Webhook-Signature", strings.Replace(valid.Header.Get("Webhook-Signature"), "v1,", "v2,", 1)), ErrSignature, ""},
		{"signature not base64", cfg, hdr(valid, "Webhook-Signature", "v1,!!!"), ErrSignature, ""},
		{"verify off", Config{NoVerify: true}, hdr(valid, "Webhook-Signature", ""), nil, id},
		{"verify off, no id", Config{NoVerify: true}, hdr(valid, "Webhook-Id", ""), ErrMalformed, ""},
		{"verify off, huge id", Config{NoVerify: true}, hdr(valid, "Webhook-Id", strings.Repeat("x", 300)), ErrMalformed, ""},
	}
	runVerifyCases(t, "standard_webhooks", cases, func(t *testing.T, c verifyCase, n *Notification) {
		if n.Fingerprint != Digest(c.req.Body) {
			t.Fatalf("Fingerprint = %s, want the body digest", n.Fingerprint)
		}
	})
}

// TestStandardWebhooksAgreesWithLibrary: what we accept, the reference
// library accepts.
func TestStandardWebhooksAgreesWithLibrary(t *testing.T) {
	now := time.Now()
	r := swReq(t, swSecret, "msg_1", now, []byte(`{"a":1}`))
	r.Now = now
	if _, err := mustNew(t, "standard_webhooks", Config{Secret: swSecret}).Verify(r); err != nil {
		t.Fatal(err)
	}
	wh, _ := standardwebhooks.NewWebhook(swSecret)
	if err := wh.Verify(r.Body, r.Header); err != nil {
		t.Fatalf("the library rejects what we accept: %v", err)
	}
}

func TestStandardWebhooksSuccess(t *testing.T) {
	checkSuccess(t, mustNew(t, "standard_webhooks", Config{NoVerify: true}), nil, []successCase{
		{200, "", true}, {204, "", true}, {299, "", true}, {301, "", false}, {410, "", false}, {500, "", false},
	})
}

func TestStandardWebhooksConfig(t *testing.T) {
	if _, err := New("standard_webhooks", Config{Secret: "whsec_not base64!"}); err == nil {
		t.Fatal("accepted a secret that is not base64")
	} else if strings.Contains(err.Error(), "not base64!") {
		t.Fatalf("error leaks the secret: %v", err)
	}
}

func FuzzStandardWebhooks(f *testing.F) {
	good := swReq(f, swSecret, "msg_1", testNow, []byte(`{}`))
	f.Add([]byte(`{}`), "msg_1", good.Header.Get("Webhook-Timestamp"), good.Header.Get("Webhook-Signature"))
	f.Add([]byte(``), "", "-1", "v1, v1,, ,")
	f.Add([]byte(`x`), "id", "99999999999999999999", "v1,AAAA v1a,BBBB")
	verifying := mustNew(f, "standard_webhooks", Config{Secret: swSecret})
	open := mustNew(f, "standard_webhooks", Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte, id, ts, sig string) {
		r := &Request{Method: http.MethodPost, Body: body, Now: testNow, Header: http.Header{
			"Webhook-Id": {id}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {sig},
		}}
		fuzzVerify(t, r, func(n *Notification) {
			if n.Key == "" {
				t.Fatal("empty key accepted")
			}
		}, verifying, open)
	})
}
