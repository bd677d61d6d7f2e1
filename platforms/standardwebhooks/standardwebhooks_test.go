package standardwebhooks

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

const swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// swReq is body signed for message id at ts with secret, by the Standard
// Webhooks reference library.
func swReq(t testing.TB, secret, id string, ts time.Time, body []byte) *keying.Request {
	t.Helper()
	return presettest.Post(body, platformtest.StandardWebhooksHeader(t, secret, id, ts, body))
}

func TestStandardWebhooks(t *testing.T) {
	cfg := Config{Secret: swSecret}
	body := []byte(`{"type":"invoice.paid","timestamp":"2026-03-14T09:26:53Z","data":{"id":"inv_1","amount":1200}}`)
	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	valid := swReq(t, swSecret, id, presettest.Now, body)
	other := swReq(t, "whsec_"+"b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA==", id, presettest.Now, body)

	cases := []presettest.VerifyCase[Config]{
		{Name: "valid", Cfg: cfg, Req: valid, WantErr: nil, Key: id},
		{Name: "secret without prefix", Cfg: Config{Secret: strings.TrimPrefix(swSecret, "whsec_")}, Req: valid, WantErr: nil, Key: id},
		{Name: "padded secret, padding written", Cfg: Config{Secret: "whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA=="}, Req: other, WantErr: nil, Key: id},
		{Name: "padded secret, padding left out", Cfg: Config{Secret: "whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA"}, Req: other, WantErr: nil, Key: id},
		{Name: "retry, re-signed", Cfg: cfg, Req: swReq(t, swSecret, id, presettest.Now.Add(-4*time.Minute), body), WantErr: nil, Key: id},
		{Name: "another message", Cfg: cfg, Req: swReq(t, swSecret, "msg_other", presettest.Now, body), WantErr: nil, Key: "msg_other"},
		{Name: "several signatures, one matches", Cfg: cfg, Req: presettest.Hdr(valid, "Webhook-Signature", other.Header.Get("Webhook-Signature")+" v1a,AAAA "+valid.Header.Get("Webhook-Signature")), WantErr: nil, Key: id},
		{Name: "stale", Cfg: cfg, Req: swReq(t, swSecret, id, presettest.Now.Add(-6*time.Minute), body), WantErr: keying.ErrSignature, Key: ""},
		{Name: "within a configured tolerance", Cfg: Config{Secret: swSecret, Tolerance: 10 * time.Minute}, Req: swReq(t, swSecret, id, presettest.Now.Add(-8*time.Minute), body), WantErr: nil, Key: id},
		{Name: "future", Cfg: cfg, Req: swReq(t, swSecret, id, presettest.Now.Add(6*time.Minute), body), WantErr: keying.ErrSignature, Key: ""},
		{Name: "wrong secret", Cfg: cfg, Req: other, WantErr: keying.ErrSignature, Key: ""},
		{Name: "tampered body", Cfg: cfg, Req: presettest.WithBody(valid, []byte(strings.Replace(string(body), "1200", "1", 1))), WantErr: keying.ErrSignature, Key: ""},
		{Name: "tampered id", Cfg: cfg, Req: presettest.Hdr(valid, "Webhook-Id", "msg_forged"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "tampered timestamp", Cfg: cfg, Req: presettest.Hdr(valid, "Webhook-Timestamp", strconv.FormatInt(presettest.Now.Unix()+1, 10)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no id", Cfg: cfg, Req: presettest.Hdr(valid, "Webhook-Id", ""), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no timestamp", Cfg: cfg, Req: presettest.Hdr(valid, "Webhook-Timestamp", ""), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no signature", Cfg: cfg, Req: presettest.Hdr(valid, "Webhook-Signature", ""), WantErr: keying.ErrSignature, Key: ""},
		{Name: "unknown version only", Cfg: cfg, Req: presettest.Hdr(valid, "Webhook-Signature", strings.Replace(valid.Header.Get("Webhook-Signature"), "v1,", "v2,", 1)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "signature not base64", Cfg: cfg, Req: presettest.Hdr(valid, "Webhook-Signature", "v1,!!!"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "verify off", Cfg: Config{NoVerify: true}, Req: presettest.Hdr(valid, "Webhook-Signature", ""), WantErr: nil, Key: id},
		{Name: "verify off, no id", Cfg: Config{NoVerify: true}, Req: presettest.Hdr(valid, "Webhook-Id", ""), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "verify off, huge id", Cfg: Config{NoVerify: true}, Req: presettest.Hdr(valid, "Webhook-Id", strings.Repeat("x", 300)), WantErr: keying.ErrMalformed, Key: ""},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if n.Fingerprint != keying.Digest(c.Req.Body) {
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
	if _, err := presettest.MustNew(t, New, Config{Secret: swSecret}).Verify(r); err != nil {
		t.Fatal(err)
	}
	wh, _ := standardwebhooks.NewWebhook(swSecret)
	if err := wh.Verify(r.Body, r.Header); err != nil {
		t.Fatalf("the library rejects what we accept: %v", err)
	}
}

func TestStandardWebhooksSuccess(t *testing.T) {
	presettest.CheckSuccess(t, presettest.MustNew(t, New, Config{NoVerify: true}), nil, []presettest.SuccessCase{
		{Status: 200, Body: "", Want: true}, {Status: 204, Body: "", Want: true}, {Status: 299, Body: "", Want: true}, {Status: 301, Body: "", Want: false}, {Status: 410, Body: "", Want: false}, {Status: 500, Body: "", Want: false},
	})
}

func TestStandardWebhooksConfig(t *testing.T) {
	if _, err := New(Config{Secret: "whsec_not base64!"}); err == nil {
		t.Fatal("accepted a secret that is not base64")
	} else if strings.Contains(err.Error(), "not base64!") {
		t.Fatalf("error leaks the secret: %v", err)
	}
}

func FuzzStandardWebhooks(f *testing.F) {
	good := swReq(f, swSecret, "msg_1", presettest.Now, []byte(`{}`))
	f.Add([]byte(`{}`), "msg_1", good.Header.Get("Webhook-Timestamp"), good.Header.Get("Webhook-Signature"))
	f.Add([]byte(``), "", "-1", "v1, v1,, ,")
	f.Add([]byte(`x`), "id", "99999999999999999999", "v1,AAAA v1a,BBBB")
	verifying := presettest.MustNew(f, New, Config{Secret: swSecret})
	open := presettest.MustNew(f, New, Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte, id, ts, sig string) {
		r := &keying.Request{Method: http.MethodPost, Body: body, Now: presettest.Now, Header: http.Header{
			"Webhook-Id": {id}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {sig},
		}}
		presettest.FuzzVerify(t, r, func(n *keying.Notification) {
			if n.Key == "" {
				t.Fatal("empty key accepted")
			}
		}, verifying, open)
	})
}

// TestConcurrentVerify runs the preset from several goroutines at once
// (meaningful under -race): a Platform is shared by all requests of a route.
func TestConcurrentVerify(t *testing.T) {
	presettest.ConcurrentVerify(t, presettest.MustNew(t, New, Config{Secret: swSecret}), swReq(t, swSecret, "msg_1", presettest.Now, []byte(`{}`)))
}
