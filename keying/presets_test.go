package keying

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
)

func TestNamesHasEveryPreset(t *testing.T) {
	got := strings.Join(Names(), ",")
	want := "alipay,generic,paypal,standard_webhooks,stripe,wechatpay,wechatpay_v2"
	if got != want {
		t.Fatalf("Names() = %s, want %s", got, want)
	}
}

func TestPresetsNeedTheirSecret(t *testing.T) {
	for _, name := range Names() {
		if name == "generic" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			_, err := New(name, Config{})
			if !errors.Is(err, ErrNeedsSecret) {
				t.Fatalf("New(%q, {}) = %v, want ErrNeedsSecret", name, err)
			}
			p, err := New(name, Config{NoVerify: true})
			if err != nil {
				t.Fatalf("New(%q, NoVerify) = %v", name, err)
			}
			if p.Name() != name {
				t.Fatalf("Name() = %q", p.Name())
			}
			if p.RetryWindow() < 24*time.Hour {
				t.Fatalf("RetryWindow() = %s, want ≥ 24h", p.RetryWindow())
			}
		})
	}
}

func TestSecretsStayOutOfErrors(t *testing.T) {
	const secret = "whsec_c2VjcmV0LXNob3VsZC1uZXZlci1sZWFr" // base64 of a marker
	const v3key = "0123456789abcdef0123456789abcdef"
	cases := []struct {
		name string
		cfg  Config
		req  *Request
	}{
		{"stripe", Config{Secret: secret}, &Request{Method: "POST", Header: http.Header{"Stripe-Signature": {"t=1,v1=00"}}, Body: []byte(`{"id":"evt_1"}`), Now: testNow}},
		{"standard_webhooks", Config{Secret: secret}, &Request{Method: "POST", Header: http.Header{"Webhook-Id": {"m"}, "Webhook-Timestamp": {"1"}, "Webhook-Signature": {"v1,AAAA"}}, Body: []byte(`{}`), Now: testNow}},
		{"wechatpay_v2", Config{Secret: v3key}, &Request{Method: "POST", Body: []byte(`<xml><sign>00000000000000000000000000000000</sign><transaction_id>1</transaction_id></xml>`), Now: testNow}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := mustNew(t, c.name, c.cfg).Verify(c.req)
			if err == nil {
				t.Fatal("forged request verified")
			}
			if strings.Contains(err.Error(), c.cfg.Secret) || strings.Contains(err.Error(), "c2VjcmV0") {
				t.Fatalf("error leaks the secret: %v", err)
			}
		})
	}
}

func TestMaterialIsUnambiguous(t *testing.T) {
	pairs := [][2][]string{
		{{"a,b", "c"}, {"a", "b,c"}},
		{{"a", ""}, {"", "a"}},
		{{`"`, ""}, {"", `"`}},
		{{"a"}, {"a", ""}},
	}
	for _, p := range pairs {
		if Material(p[0]...) == Material(p[1]...) {
			t.Errorf("Material(%q) == Material(%q)", p[0], p[1])
		}
	}
	if Material("1", "x") != Material("1", "x") {
		t.Error("Material is not deterministic")
	}
	if Material() != "[]" {
		t.Errorf("Material() = %s", Material())
	}
}

// TestConcurrentVerify runs every preset from several goroutines at once
// (meaningful under -race): a Platform is shared by all requests of a route.
func TestConcurrentVerify(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.PublicKeyPEM(t, &k.PublicKey)
	ppBody := ppEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "1")
	wx := wxEvent("EV-1", "TRANSACTION.SUCCESS", wxTransaction("SUCCESS", 1))
	cases := []struct {
		name string
		cfg  Config
		req  *Request
	}{
		{"alipay", Config{PublicKey: pub}, alipayPost(platformtest.Alipay{Key: k}.Sign(t, alipayNotify()))},
		{"wechatpay", Config{PublicKey: pub, PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key},
			wxRequest(t, k, wxPubKeyID, testNow, "n", wxBody(t, wx))},
		{"wechatpay_v2", Config{Secret: wxV2Key}, v2req(wxV2XML(wxV2MD5.Sign(wxV2Fields())))},
		{"stripe", Config{Secret: stripeSecret}, stripeReq(stripeEvent("evt_1", "x", "y"), stripeSecret, testNow)},
		{"paypal", Config{WebhookID: ppWebhookID, Certificates: [][]byte{testCert(t, k, bigInt(3), "pp")}},
			ppReq(t, k, ppWebhookID, "tx", ppCertURL, ppBody)},
		{"standard_webhooks", Config{Secret: swSecret}, swReq(t, swSecret, "msg_1", testNow, []byte(`{}`))},
	}
	for _, c := range cases {
		p := mustNew(t, c.name, c.cfg)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				n, err := p.Verify(c.req)
				if err == nil && n.Extra != nil {
					n.Extra("x")
				}
				if err == nil {
					_, _, err = n.Fields.JSON("id")
					if errors.Is(err, ErrMalformed) {
						err = nil // not every body is JSON
					}
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}
	}
}

func TestUnixTimestamp(t *testing.T) {
	now := testNow
	sec := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	cases := []struct {
		v         string
		olderOnly bool
		ok        bool
	}{
		{sec(0), false, true},
		{sec(-5 * time.Minute), false, true},
		{sec(5 * time.Minute), false, true},
		{sec(-5*time.Minute - time.Second), false, false},
		{sec(5*time.Minute + time.Second), false, false},
		{sec(5*time.Minute + time.Second), true, true},
		{"999999999999", false, false}, // far future must not overflow into "fresh"
		{"9223372036854775807", false, false},
		{"9223372036854775807", true, false},
		{"-1", false, false},
		{"", false, false},
		{"1e9", false, false},
		{" 1", false, false},
	}
	for _, c := range cases {
		_, err := UnixTimestamp("p", "ts", c.v, now, DefaultTolerance, c.olderOnly)
		if (err == nil) != c.ok {
			t.Errorf("unixTimestamp(%q, olderOnly=%v) = %v, want ok=%v", c.v, c.olderOnly, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrSignature) {
			t.Errorf("error does not wrap ErrSignature: %v", err)
		}
	}
}

// TestErrorShape: every preset's errors read "<preset>: <what>", once.
func TestErrorShape(t *testing.T) {
	for _, name := range Names() {
		if name == "generic" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			_, err := New(name, Config{})
			msg := err.Error()
			if !strings.HasPrefix(msg, name+": ") || strings.Count(msg, name) != 1 || strings.Contains(msg, "platform "+name) {
				t.Fatalf("New error %q is not %q once", msg, name+": …")
			}
			p := mustNew(t, name, Config{NoVerify: true, Secret: wxAPIv3Key})
			_, err = p.Verify(&Request{Method: http.MethodPost, Header: http.Header{}, Body: []byte("\x00"), Now: testNow})
			if err == nil || !strings.HasPrefix(err.Error(), name+": ") {
				t.Fatalf("Verify error %q does not start with %q", err, name+": ")
			}
		})
	}
}
