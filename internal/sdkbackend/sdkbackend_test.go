package sdkbackend_test

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/sdkbackend"
)

// TestSDKsAcceptOurSigners sends what the test signers make (the same
// signers the gateway's tests and the CLI's send use) to backends that
// verify with the platforms' own SDKs: each genuine notification runs the
// business once, and a copy with one byte changed is refused. A signer
// that drifted from the platform's format would pass our own verifier and
// fail here.
func TestSDKsAcceptOurSigners(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pubPEM := string(platformtest.PublicKeyPEM(t, &k.PublicKey))
	serial := big.NewInt(0x5157F09E)
	certPEM := platformtest.Certificate(t, k, serial, "platform")
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	const apiV3 = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4"
	const v2Key = "192006250b4c09247ec02edce69f6a2d"
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	now := time.Now()

	alipay := platformtest.Alipay{Key: k}
	notify := platformtest.AlipayNotify("2016091800538339", "o1", "2026t1", "TRADE_SUCCESS", "9.90")
	refund := platformtest.AlipayNotify("2016091800538339", "o1", "2026t1", "TRADE_SUCCESS", "9.90")
	refund.Set("out_biz_no", "rf1")
	refund.Set("refund_fee", "1.00")
	ret := platformtest.AlipayReturn("2016091800538339", "o1", "2026t1", "9.90")
	wx := platformtest.WechatPay{Key: k, Serial: "PUB_KEY_ID_01", APIv3Key: apiV3}
	wxCert := platformtest.WechatPay{Key: k, Serial: platformtest.SerialHex(serial), APIv3Key: apiV3}
	wxPaid := platformtest.WechatPayEvent{ID: "n1", EventType: "TRANSACTION.SUCCESS",
		Resource: platformtest.WechatPayTransaction("4200001", "o1", "SUCCESS", 990)}
	wxRefund := platformtest.WechatPayEvent{ID: "n2", EventType: "REFUND.SUCCESS",
		Resource: platformtest.WechatPayRefund("4200001", "o1", "5000", "SUCCESS", 100, 990)}
	wxPartnerPaid := platformtest.WechatPayEvent{ID: "n3", EventType: "TRANSACTION.SUCCESS",
		Resource: platformtest.WechatPayPartnerTransaction(platformtest.WechatPaySpMchID, platformtest.WechatPaySubMchID, "4200003", "o3", "SUCCESS", 990)}
	wxPartnerRefund := platformtest.WechatPayEvent{ID: "n4", EventType: "REFUND.SUCCESS",
		Resource: platformtest.WechatPayPartnerRefund(platformtest.WechatPaySpMchID, platformtest.WechatPaySubMchID, "4200003", "o3", "5001", "SUCCESS", 100, 990)}
	v2 := platformtest.WechatPayV2{APIKey: v2Key}
	stBody := platformtest.StripeEvent("evt_1", "payment_intent.succeeded", "pi_1", 2000)
	swBody := []byte(`{"type":"invoice.paid"}`)

	type delivery struct {
		method, query string
		body          []byte
		header        http.Header
	}
	post := func(body []byte, h http.Header) delivery {
		return delivery{method: http.MethodPost, body: body, header: h}
	}
	form := func(body string) delivery {
		return post([]byte(body), http.Header{"Content-Type": {"application/x-www-form-urlencoded"}})
	}
	cases := []struct {
		name    string
		backend *sdkbackend.Backend
		d       delivery
		event   string
	}{
		{"alipay notify (smartwalle)", sdkbackend.Alipay(pubPEM), form(alipay.Body(t, notify)), "2026t1:TRADE_SUCCESS"},
		{"alipay RSA2 GBK notify (smartwalle)", sdkbackend.Alipay(pubPEM),
			form(platformtest.Alipay{Key: k, Charset: "GBK"}.Body(t, notify)), "2026t1:TRADE_SUCCESS"},
		{"alipay refund (smartwalle)", sdkbackend.Alipay(pubPEM), form(alipay.Body(t, refund)), "2026t1:refund:rf1"},
		{"alipay return (smartwalle)", sdkbackend.Alipay(pubPEM),
			delivery{method: http.MethodGet, query: alipay.Query(t, ret)}, "2026t1:return"},
		{"alipay notify (gopay)", sdkbackend.AlipayGopay(pubPEM), form(alipay.Body(t, notify)), "2026t1:TRADE_SUCCESS"},
		{"wechatpay public key", sdkbackend.WechatPayPublicKey(apiV3, "PUB_KEY_ID_01", &k.PublicKey),
			post(wx.Notification(t, wxPaid)), "4200001:paid"},
		{"wechatpay certificate", sdkbackend.WechatPayCertificates(apiV3, cert),
			post(wxCert.Notification(t, wxPaid)), "4200001:paid"},
		{"wechatpay refund", sdkbackend.WechatPayPublicKey(apiV3, "PUB_KEY_ID_01", &k.PublicKey),
			post(wx.Notification(t, wxRefund)), "refund:Ro1:SUCCESS"},
		{"wechatpay partner payment", sdkbackend.WechatPayPublicKey(apiV3, "PUB_KEY_ID_01", &k.PublicKey),
			post(wx.Notification(t, wxPartnerPaid)), "4200003:paid"},
		{"wechatpay partner refund", sdkbackend.WechatPayPublicKey(apiV3, "PUB_KEY_ID_01", &k.PublicKey),
			post(wx.Notification(t, wxPartnerRefund)), "refund:Ro3:SUCCESS"},
		{"wechatpay_v2 partner payment (gopay)", sdkbackend.WechatPayV2(v2Key),
			post(v2.Body(platformtest.WechatPayV2PartnerPayment(platformtest.WechatPayV2SubMchID, "4200004", "o4", 990)), nil), "4200004:paid"},
		{"wechatpay_v2 partner refund (gopay)", sdkbackend.WechatPayV2(v2Key),
			post(v2.PartnerRefund(t, platformtest.WechatPayV2SubMchID, platformtest.WechatPayV2RefundInfo("4200004", "o4", "5002", "SUCCESS", 990, 990)), nil), "refund:Ro4:SUCCESS"},
		{"wechatpay_v2 MD5 (gopay)", sdkbackend.WechatPayV2(v2Key),
			post(v2.Body(platformtest.WechatPayV2Payment("4200002", "o2", 990)), nil), "4200002:paid"},
		{"wechatpay_v2 HMAC-SHA256 (gopay)", sdkbackend.WechatPayV2(v2Key),
			post(platformtest.WechatPayV2{APIKey: v2Key, SignType: "HMAC-SHA256"}.Body(platformtest.WechatPayV2Payment("4200002", "o2", 990)), nil), "4200002:paid"},
		{"wechatpay_v2 refund (gopay)", sdkbackend.WechatPayV2(v2Key),
			post(v2.Refund(t, platformtest.WechatPayV2RefundInfo("4200002", "o2", "5000", "SUCCESS", 990, 990)), nil), "refund:Ro2:SUCCESS"},
		{"stripe (stripe-go)", sdkbackend.Stripe(whsec), post(stBody, platformtest.StripeHeader(stBody, whsec, now)), "evt_1"},
		{"standard webhooks (library)", sdkbackend.StandardWebhooks(whsec),
			post(swBody, platformtest.StandardWebhooksHeader(t, whsec, "msg_1", now, swBody)), "msg_1"},
	}
	send := func(t *testing.T, url string, d delivery) int {
		t.Helper()
		if d.query != "" {
			url += "?" + d.query
		}
		req, err := http.NewRequest(d.method, url, strings.NewReader(string(d.body)))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range d.header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.backend)
			defer srv.Close()
			if st := send(t, srv.URL, c.d); st/100 != 2 {
				t.Fatalf("status %d; the SDK refused: %v", st, c.backend.Refusals())
			}
			if got := c.backend.Runs(c.event); got != 1 {
				t.Fatalf("event %q ran %d times (events %v, refusals %v)", c.event, got, c.backend.Events(), c.backend.Refusals())
			}
			// One byte changed in what is signed: the SDK refuses it.
			bad := c.d
			if bad.query != "" {
				bad.query = strings.Replace(bad.query, "9.90", "9.91", 1)
			} else {
				bad.body = []byte(strings.Replace(string(bad.body), "990", "991", 1))
				bad.body = []byte(strings.Replace(string(bad.body), "9.90", "9.91", 1))
				bad.body = []byte(strings.Replace(string(bad.body), "2000", "2001", 1))
				bad.body = []byte(strings.Replace(string(bad.body), "invoice", "invoicE", 1))
				bad.body = []byte(strings.Replace(string(bad.body), `"id":"n`, `"id":"x`, 1))
				if strings.HasPrefix(c.name, "wechatpay_v2") && strings.Contains(c.name, "refund") {
					// Only req_info is authenticated: re-encrypt under another key.
					bad.body = platformtest.WechatPayV2{APIKey: "0123456789abcdef0123456789abcdef"}.Refund(t,
						platformtest.WechatPayV2RefundInfo("4200002", "o2", "5000", "SUCCESS", 990, 990))
				}
			}
			send(t, srv.URL, bad)
			if got := c.backend.Total(); got != 1 {
				t.Fatalf("a tampered copy ran the business: %d runs, events %v", got, c.backend.Events())
			}
			if len(c.backend.Refusals()) != 1 {
				t.Fatalf("refusals %v, want one", c.backend.Refusals())
			}
		})
	}
}
