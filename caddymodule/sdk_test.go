package caddymodule

import (
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/sdkbackend"
)

// sdkCase is one platform's route in front of a backend that verifies
// with that platform's SDK, and one genuine notification.
type sdkCase struct {
	name    string
	route   string // the idempotency block's platform lines
	backend func() *sdkbackend.Backend
	d       delivery
	key     string // the full key
	event   string // the backend's name for the business event
}

func sdkCases(t *testing.T) []sdkCase {
	k, _ := platformtest.Keys(t)
	pubPEM := platformtest.PublicKeyPEM(t, &k.PublicKey)
	pubFile := platformtest.WriteFile(t, "platform_public.pem", pubPEM)
	serial := big.NewInt(0x6157F09E)
	certPEM := platformtest.Certificate(t, k, serial, "platform")
	certFile := platformtest.WriteFile(t, "platform_cert.pem", certPEM)
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	const apiV3 = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4"
	const v2Key = "192006250b4c09247ec02edce69f6a2d"
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	now := time.Now()
	form := "application/x-www-form-urlencoded; charset=utf-8"

	alipay := platformtest.Alipay{Key: k}
	wx := platformtest.WechatPay{Key: k, Serial: "PUB_KEY_ID_01", APIv3Key: apiV3}
	wxCert := platformtest.WechatPay{Key: k, Serial: platformtest.SerialHex(serial), APIv3Key: apiV3}
	wxPaid := platformtest.WechatPayEvent{ID: "n1", EventType: "TRANSACTION.SUCCESS",
		Resource: platformtest.WechatPayTransaction("4200001", "o1", "SUCCESS", 990)}
	wxBody, wxHeader := wx.Notification(t, wxPaid)
	wxcBody, wxcHeader := wxCert.Notification(t, wxPaid)
	stBody := platformtest.StripeEvent("evt_sdk1", "payment_intent.succeeded", "pi_1", 2000)
	swBody := []byte(`{"type":"invoice.paid","data":{"id":"inv_1"}}`)
	v2 := platformtest.WechatPayV2{APIKey: v2Key}

	return []sdkCase{
		{"alipay (smartwalle)", "platform alipay\n\t\t\tpublic_key " + pubFile,
			func() *sdkbackend.Backend { return sdkbackend.Alipay(string(pubPEM)) },
			delivery{ctype: form, body: alipay.Body(t, platformtest.AlipayNotify("2016091800538339", "o1", "2026t1", "TRADE_SUCCESS", "9.90"))},
			"alipay:2016091800538339:2026t1:paid", "2026t1:TRADE_SUCCESS"},
		{"alipay (gopay)", "platform alipay\n\t\t\tpublic_key " + pubFile,
			func() *sdkbackend.Backend { return sdkbackend.AlipayGopay(string(pubPEM)) },
			delivery{ctype: form, body: alipay.Body(t, platformtest.AlipayNotify("2016091800538339", "o2", "2026t2", "TRADE_SUCCESS", "19.90"))},
			"alipay:2016091800538339:2026t2:paid", "2026t2:TRADE_SUCCESS"},
		{"wechatpay public key (wechatpay-go)", "platform wechatpay\n\t\t\tpublic_key " + pubFile + "\n\t\t\tpublic_key_id PUB_KEY_ID_01\n\t\t\tsecret " + apiV3,
			func() *sdkbackend.Backend { return sdkbackend.WechatPayPublicKey(apiV3, "PUB_KEY_ID_01", &k.PublicKey) },
			delivery{ctype: "application/json", body: string(wxBody), header: wxHeader},
			"wechatpay:1230000109:4200001:paid", "4200001:paid"},
		{"wechatpay certificate (wechatpay-go)", "platform wechatpay\n\t\t\tcertificate " + certFile + "\n\t\t\tsecret " + apiV3,
			func() *sdkbackend.Backend { return sdkbackend.WechatPayCertificates(apiV3, cert) },
			delivery{ctype: "application/json", body: string(wxcBody), header: wxcHeader},
			"wechatpay:1230000109:4200001:paid", "4200001:paid"},
		{"wechatpay_v2 (gopay)", "platform wechatpay_v2\n\t\t\tsecret " + v2Key + "\n\t\t\tmchid 10000100",
			func() *sdkbackend.Backend { return sdkbackend.WechatPayV2(v2Key) },
			delivery{ctype: "text/xml", body: string(v2.Body(platformtest.WechatPayV2Payment("4200002", "o2", 990)))},
			"wechatpay_v2:10000100:4200002:paid", "4200002:paid"},
		{"stripe (stripe-go)", "platform stripe\n\t\t\tsecret " + whsec,
			func() *sdkbackend.Backend { return sdkbackend.Stripe(whsec) },
			delivery{ctype: "application/json", body: string(stBody), header: platformtest.StripeHeader(stBody, whsec, now)},
			"stripe:evt_sdk1", "evt_sdk1"},
		{"standard webhooks (library)", "platform standard_webhooks\n\t\t\tsecret " + whsec,
			func() *sdkbackend.Backend { return sdkbackend.StandardWebhooks(whsec) },
			delivery{ctype: "application/json", body: string(swBody), header: platformtest.StandardWebhooksHeader(t, whsec, "msg_sdk1", now, swBody)},
			"standard_webhooks:msg_sdk1", "msg_sdk1"},
	}
}

// TestSDKBackends puts each preset in front of a backend that verifies
// every request with the platform's own SDK, as a merchant's backend
// does, synchronously and with deliver async: the first copy and its
// retries run the business once and the SDK refuses nothing; an
// operator's forced redelivery is accepted by the SDK and runs it again,
// deliberately.
func TestSDKBackends(t *testing.T) {
	for _, mode := range []string{"sync", "async"} {
		for _, c := range sdkCases(t) {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				be := c.backend()
				srv := httptest.NewServer(be)
				defer srv.Close()
				upstream := strings.TrimPrefix(srv.URL, "http://")
				site := "\n\thandle /notify {\n\t\tidempotency {\n\t\t\t" + c.route + "\n\t\t\tstore memory\n"
				if mode == "async" {
					site += "\t\t\tdeliver async {\n\t\t\t\tto " + srv.URL + "\n\t\t\t\tretry 100ms 200ms\n\t\t\t}\n\t\t}\n\t}"
				} else {
					site += "\t\t}\n\t\treverse_proxy " + upstream + "\n\t}"
				}
				g := startGateway(t, site)
				d := c.d
				d.path = "/notify"
				for i := range 3 {
					if r := send(t, g.base, c.event, d); r.status/100 != 2 {
						t.Fatalf("copy %d: %d %q", i, r.status, r.body)
					}
				}
				eventually(t, 10*time.Second, "the SDK to accept the notification", func() bool { return be.Runs(c.event) >= 1 })
				if n := be.Runs(c.event); n != 1 || be.Total() != 1 || len(be.Refusals()) != 0 {
					t.Fatalf("the SDK ran %v (%d in all), refused %v; want one run, no refusal", be.Events(), be.Total(), be.Refusals())
				}
				if mode == "async" {
					waitAnswered(t, 10*time.Second, c.key)
				}
				status, body := g.adminDo(t, http.MethodPost, keyURI(c.key)+"/redeliver?force=1&again=1")
				if status/100 != 2 {
					t.Fatalf("forced redelivery: %d %s", status, body)
				}
				eventually(t, 10*time.Second, "the redelivery to run", func() bool { return be.Runs(c.event) >= 2 })
				if n := be.Runs(c.event); n != 2 || len(be.Refusals()) != 0 {
					t.Fatalf("after the redelivery the SDK ran %v, refused %v; want the event run twice, no refusal", be.Events(), be.Refusals())
				}
			})
		}
	}
}
