package stripe

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

const stripeSecret = "whsec_test_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"

// stripeEvent is a payment_intent event of 2000 created at testNow.
func stripeEvent(id, typ, objID string) []byte {
	return platformtest.StripeEventAt(id, typ, objID, 2000, presettest.Now)
}

// stripeReq is body signed at ts with secret, by stripe-go's own signer.
func stripeReq(body []byte, secret string, ts time.Time) *keying.Request {
	return presettest.Post(body, platformtest.StripeHeader(body, secret, ts))
}

func TestStripe(t *testing.T) {
	cfg := Config{Secret: stripeSecret}
	ev := stripeEvent("evt_1NG8Du2eZvKYlo2CUI79vXWy", "payment_intent.succeeded", "pi_3MtwBwLkdIwHu7ix28a3tqPa")
	valid := stripeReq(ev, stripeSecret, presettest.Now)
	const key = "evt_1NG8Du2eZvKYlo2CUI79vXWy"

	// Two v1 signatures while the secret rolls: either may match.
	oldSig := webhook.ComputeSignature(presettest.Now, ev, "whsec_old")
	rolled := presettest.Hdr(valid, "Stripe-Signature", valid.Header.Get("Stripe-Signature")+",v1="+hex.EncodeToString(oldSig))
	rolledFirst := presettest.Hdr(valid, "Stripe-Signature", "t="+itoa(presettest.Now.Unix())+",v1="+hex.EncodeToString(oldSig)+","+strings.SplitN(valid.Header.Get("Stripe-Signature"), ",", 2)[1])

	cases := []presettest.VerifyCase[Config]{
		{Name: "valid", Cfg: cfg, Req: valid, WantErr: nil, Key: key},
		{Name: "retry, re-signed later", Cfg: cfg, Req: stripeReq(ev, stripeSecret, presettest.Now.Add(-4*time.Minute)), WantErr: nil, Key: key},
		{Name: "future timestamp accepted", Cfg: cfg, Req: stripeReq(ev, stripeSecret, presettest.Now.Add(10*time.Minute)), WantErr: nil, Key: key},
		{Name: "second v1 matches", Cfg: cfg, Req: rolled, WantErr: nil, Key: key},
		{Name: "first of two v1 is stale secret", Cfg: cfg, Req: rolledFirst, WantErr: nil, Key: key},
		{Name: "with v0 and spaces", Cfg: cfg, Req: presettest.Hdr(valid, "Stripe-Signature", strings.ReplaceAll(valid.Header.Get("Stripe-Signature"), ",", ", ")+", v0=abcd"), WantErr: nil, Key: key},
		{Name: "other event", Cfg: cfg, Req: stripeReq(stripeEvent("evt_2", "charge.refunded", "ch_1"), stripeSecret, presettest.Now), WantErr: nil, Key: "evt_2"},
		{Name: "stale", Cfg: cfg, Req: stripeReq(ev, stripeSecret, presettest.Now.Add(-6*time.Minute)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "within a configured tolerance", Cfg: Config{Secret: stripeSecret, Tolerance: 10 * time.Minute}, Req: stripeReq(ev, stripeSecret, presettest.Now.Add(-8*time.Minute)), WantErr: nil, Key: key},
		{Name: "stale for a configured tolerance", Cfg: Config{Secret: stripeSecret, Tolerance: time.Minute}, Req: stripeReq(ev, stripeSecret, presettest.Now.Add(-2*time.Minute)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "wrong secret", Cfg: cfg, Req: stripeReq(ev, "whsec_other", presettest.Now), WantErr: keying.ErrSignature, Key: ""},
		{Name: "tampered body", Cfg: cfg, Req: presettest.WithBody(valid, stripeEvent("evt_1NG8Du2eZvKYlo2CUI79vXWy", "payment_intent.succeeded", "pi_other")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "tampered timestamp", Cfg: cfg, Req: presettest.Hdr(valid, "Stripe-Signature", strings.Replace(valid.Header.Get("Stripe-Signature"), "t=", "t=1", 1)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "v0 only", Cfg: cfg, Req: presettest.Hdr(valid, "Stripe-Signature", strings.Replace(valid.Header.Get("Stripe-Signature"), "v1=", "v0=", 1)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no timestamp", Cfg: cfg, Req: presettest.Hdr(valid, "Stripe-Signature", "v1="+strings.Repeat("0", 64)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "two timestamps", Cfg: cfg, Req: presettest.Hdr(valid, "Stripe-Signature", "t=1,"+valid.Header.Get("Stripe-Signature")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no header", Cfg: cfg, Req: presettest.Hdr(valid, "Stripe-Signature", ""), WantErr: keying.ErrSignature, Key: ""},
		{Name: "garbage header", Cfg: cfg, Req: presettest.Hdr(valid, "Stripe-Signature", "garbage"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "too many signatures", Cfg: cfg, Req: presettest.Hdr(valid, "Stripe-Signature", "t=1"+strings.Repeat(",v1="+strings.Repeat("0", 64), 20)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "signed non-JSON", Cfg: cfg, Req: stripeReq([]byte("hello"), stripeSecret, presettest.Now), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "signed JSON without id", Cfg: cfg, Req: stripeReq([]byte(`{"type":"x"}`), stripeSecret, presettest.Now), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "verify off", Cfg: Config{NoVerify: true}, Req: presettest.WithBody(presettest.Hdr(valid, "Stripe-Signature", ""), ev), WantErr: nil, Key: key},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if c.Key == key && n.Fingerprint != `["payment_intent.succeeded","pi_3MtwBwLkdIwHu7ix28a3tqPa"]` {
			t.Fatalf("Fingerprint = %s", n.Fingerprint)
		}
		if v, ok, err := n.Fields.JSON("data.object.object"); err != nil || !ok || v == "" {
			t.Fatalf("Fields.JSON = %q, %v, %v", v, ok, err)
		}
	})
}

// TestStripeAgreesWithStripeGo: what we accept, stripe-go accepts.
func TestStripeAgreesWithStripeGo(t *testing.T) {
	ev := stripeEvent("evt_x", "invoice.paid", "in_1")
	now := time.Now()
	r := stripeReq(ev, stripeSecret, now)
	r.Now = now
	if _, err := presettest.MustNew(t, New, Config{Secret: stripeSecret}).Verify(r); err != nil {
		t.Fatal(err)
	}
	if err := webhook.ValidatePayload(r.Body, r.Header.Get("Stripe-Signature"), stripeSecret); err != nil {
		t.Fatalf("stripe-go rejects what we accept: %v", err)
	}
}

func TestStripeSuccess(t *testing.T) {
	presettest.CheckSuccess(t, presettest.MustNew(t, New, Config{NoVerify: true}), nil, []presettest.SuccessCase{
		{Status: 200, Body: "", Want: true}, {Status: 201, Body: "", Want: true}, {Status: 204, Body: "", Want: true}, {Status: 299, Body: "", Want: true},
		{Status: 300, Body: "", Want: false}, {Status: 302, Body: "", Want: false}, {Status: 400, Body: "", Want: false}, {Status: 500, Body: "", Want: false},
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func FuzzStripe(f *testing.F) {
	ev := stripeEvent("evt_1", "payment_intent.succeeded", "pi_1")
	good := stripeReq(ev, stripeSecret, presettest.Now)
	f.Add(ev, good.Header.Get("Stripe-Signature"))
	f.Add([]byte(`{"id":1}`), "t=,v1=,v1=zz")
	f.Add([]byte(`[]`), "t=-1,v1="+strings.Repeat("a", 64))
	verifying := presettest.MustNew(f, New, Config{Secret: stripeSecret})
	open := presettest.MustNew(f, New, Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		r := &keying.Request{Method: http.MethodPost, Header: http.Header{"Stripe-Signature": {sig}}, Body: body, Now: presettest.Now}
		presettest.FuzzVerify(t, r, func(n *keying.Notification) {
			if n.Key == "" {
				t.Fatal("empty id accepted")
			}
		}, verifying, open)
	})
}

// TestStripeSignatureReasons: the log's reason tells a malformed v1
// signature from a missing one.
func TestStripeSignatureReasons(t *testing.T) {
	p := presettest.MustNew(t, New, Config{Secret: stripeSecret})
	ev := stripeEvent("evt_1", "payment_intent.succeeded", "pi_1")
	for header, want := range map[string]string{
		"t=1,v1=abc":                        "v1 signature is malformed",
		"t=1,v1=" + strings.Repeat("z", 64): "v1 signature is malformed",
		"t=1,v0=abc":                        "has no v1 signature",
		"t=1":                               "has no v1 signature",
	} {
		_, err := p.Verify(presettest.Hdr(stripeReq(ev, stripeSecret, presettest.Now), "Stripe-Signature", header))
		if !errors.Is(err, keying.ErrSignature) || !strings.Contains(err.Error(), want) {
			t.Errorf("Stripe-Signature %q: %v, want %q", header, err, want)
		}
	}
}

// TestConcurrentVerify runs the preset from several goroutines at once
// (meaningful under -race): a Platform is shared by all requests of a route.
func TestConcurrentVerify(t *testing.T) {
	presettest.ConcurrentVerify(t, presettest.MustNew(t, New, Config{Secret: stripeSecret}), stripeReq(stripeEvent("evt_1", "x", "y"), stripeSecret, presettest.Now))
}
