package keying

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/stripe/stripe-go/v82/webhook"
)

const stripeSecret = "whsec_test_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"

// stripeEvent is a payment_intent event of 2000 created at testNow.
func stripeEvent(id, typ, objID string) []byte {
	return platformtest.StripeEventAt(id, typ, objID, 2000, testNow)
}

// stripeReq is body signed at ts with secret, by stripe-go's own signer.
func stripeReq(body []byte, secret string, ts time.Time) *Request {
	return post(body, platformtest.StripeHeader(body, secret, ts))
}

func TestStripe(t *testing.T) {
	cfg := Config{Secret: stripeSecret}
	ev := stripeEvent("evt_1NG8Du2eZvKYlo2CUI79vXWy", "payment_intent.succeeded", "pi_3MtwBwLkdIwHu7ix28a3tqPa")
	valid := stripeReq(ev, stripeSecret, testNow)
	const key = "evt_1NG8Du2eZvKYlo2CUI79vXWy"

	// Two v1 signatures while the secret rolls: either may match.
	oldSig := webhook.ComputeSignature(testNow, ev, "whsec_old")
	rolled := hdr(valid, "Stripe-Signature", valid.Header.Get("Stripe-Signature")+",v1="+hex.EncodeToString(oldSig))
	rolledFirst := hdr(valid, "Stripe-Signature", "t="+itoa(testNow.Unix())+",v1="+hex.EncodeToString(oldSig)+","+strings.SplitN(valid.Header.Get("Stripe-Signature"), ",", 2)[1])

	cases := []verifyCase{
		{"valid", cfg, valid, nil, key},
		{"retry, re-signed later", cfg, stripeReq(ev, stripeSecret, testNow.Add(-4*time.Minute)), nil, key},
		{"future timestamp accepted", cfg, stripeReq(ev, stripeSecret, testNow.Add(10*time.Minute)), nil, key},
		{"second v1 matches", cfg, rolled, nil, key},
		{"first of two v1 is stale secret", cfg, rolledFirst, nil, key},
		{"with v0 and spaces", cfg, hdr(valid, "Stripe-Signature", strings.ReplaceAll(valid.Header.Get("Stripe-Signature"), ",", ", ")+", v0=abcd"), nil, key},
		{"other event", cfg, stripeReq(stripeEvent("evt_2", "charge.refunded", "ch_1"), stripeSecret, testNow), nil, "evt_2"},
		{"stale", cfg, stripeReq(ev, stripeSecret, testNow.Add(-6*time.Minute)), ErrSignature, ""},
		{"within a configured tolerance", Config{Secret: stripeSecret, Tolerance: 10 * time.Minute}, stripeReq(ev, stripeSecret, testNow.Add(-8*time.Minute)), nil, key},
		{"stale for a configured tolerance", Config{Secret: stripeSecret, Tolerance: time.Minute}, stripeReq(ev, stripeSecret, testNow.Add(-2*time.Minute)), ErrSignature, ""},
		{"wrong secret", cfg, stripeReq(ev, "whsec_other", testNow), ErrSignature, ""},
		{"tampered body", cfg, withReqBody(valid, stripeEvent("evt_1NG8Du2eZvKYlo2CUI79vXWy", "payment_intent.succeeded", "pi_other")), ErrSignature, ""},
		{"tampered timestamp", cfg, hdr(valid, "Stripe-Signature", strings.Replace(valid.Header.Get("Stripe-Signature"), "t=", "t=1", 1)), ErrSignature, ""},
		{"v0 only", cfg, hdr(valid, "Stripe-Signature", strings.Replace(valid.Header.Get("Stripe-Signature"), "v1=", "v0=", 1)), ErrSignature, ""},
		{"no timestamp", cfg, hdr(valid, "Stripe-Signature", "v1="+strings.Repeat("0", 64)), ErrSignature, ""},
		{"two timestamps", cfg, hdr(valid, "Stripe-Signature", "t=1,"+valid.Header.Get("Stripe-Signature")), ErrSignature, ""},
		{"no header", cfg, hdr(valid, "Stripe-Signature", ""), ErrSignature, ""},
		{"garbage header", cfg, hdr(valid, "Stripe-Signature", "garbage"), ErrSignature, ""},
		{"too many signatures", cfg, hdr(valid, "Stripe-Signature", "t=1"+strings.Repeat(",v1="+strings.Repeat("0", 64), 20)), ErrSignature, ""},
		{"signed non-JSON", cfg, stripeReq([]byte("hello"), stripeSecret, testNow), ErrMalformed, ""},
		{"signed JSON without id", cfg, stripeReq([]byte(`{"type":"x"}`), stripeSecret, testNow), ErrMalformed, ""},
		{"verify off", Config{NoVerify: true}, withReqBody(hdr(valid, "Stripe-Signature", ""), ev), nil, key},
	}
	runVerifyCases(t, "stripe", cases, func(t *testing.T, c verifyCase, n *Notification) {
		if c.key == key && n.Fingerprint != `["payment_intent.succeeded","pi_3MtwBwLkdIwHu7ix28a3tqPa"]` {
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
	if _, err := mustNew(t, "stripe", Config{Secret: stripeSecret}).Verify(r); err != nil {
		t.Fatal(err)
	}
	if err := webhook.ValidatePayload(r.Body, r.Header.Get("Stripe-Signature"), stripeSecret); err != nil {
		t.Fatalf("stripe-go rejects what we accept: %v", err)
	}
}

func TestStripeSuccess(t *testing.T) {
	checkSuccess(t, mustNew(t, "stripe", Config{NoVerify: true}), nil, []successCase{
		{200, "", true}, {201, "", true}, {204, "", true}, {299, "", true},
		{300, "", false}, {302, "", false}, {400, "", false}, {500, "", false},
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func FuzzStripe(f *testing.F) {
	ev := stripeEvent("evt_1", "payment_intent.succeeded", "pi_1")
	good := stripeReq(ev, stripeSecret, testNow)
	f.Add(ev, good.Header.Get("Stripe-Signature"))
	f.Add([]byte(`{"id":1}`), "t=,v1=,v1=zz")
	f.Add([]byte(`[]`), "t=-1,v1="+strings.Repeat("a", 64))
	verifying := mustNew(f, "stripe", Config{Secret: stripeSecret})
	open := mustNew(f, "stripe", Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		r := &Request{Method: http.MethodPost, Header: http.Header{"Stripe-Signature": {sig}}, Body: body, Now: testNow}
		fuzzVerify(t, r, func(n *Notification) {
			if n.Key == "" {
				t.Fatal("empty id accepted")
			}
		}, verifying, open)
	})
}

// TestStripeSignatureReasons: the log's reason tells a malformed v1
// signature from a missing one.
func TestStripeSignatureReasons(t *testing.T) {
	p := mustNew(t, "stripe", Config{Secret: stripeSecret})
	ev := stripeEvent("evt_1", "payment_intent.succeeded", "pi_1")
	for header, want := range map[string]string{
		"t=1,v1=abc":                        "v1 signature is malformed",
		"t=1,v1=" + strings.Repeat("z", 64): "v1 signature is malformed",
		"t=1,v0=abc":                        "has no v1 signature",
		"t=1":                               "has no v1 signature",
	} {
		_, err := p.Verify(hdr(stripeReq(ev, stripeSecret, testNow), "Stripe-Signature", header))
		if !errors.Is(err, ErrSignature) || !strings.Contains(err.Error(), want) {
			t.Errorf("Stripe-Signature %q: %v, want %q", header, err, want)
		}
	}
}
