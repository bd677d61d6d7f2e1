package platformtest_test

import (
	"crypto/aes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"hash/crc32"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/alipay"
	"github.com/idemgate/idemgate/platforms/paypal"
	"github.com/idemgate/idemgate/platforms/standardwebhooks"
	"github.com/idemgate/idemgate/platforms/stripe"
	"github.com/idemgate/idemgate/platforms/wechatpay"
	"github.com/idemgate/idemgate/platforms/wechatpayv2"
)

// TestSignersVerify: what each signer builds, the matching preset accepts
// (an external test, so the package itself stays free of keying).
func TestSignersVerify(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.PublicKeyPEM(t, &k.PublicKey)
	serial := big.NewInt(0x5157F09E)
	cert := platformtest.Certificate(t, k, serial, "platform")
	const apiV3 = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4"
	const v2Key = "192006250b4c09247ec02edce69f6a2d"
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	now := time.Now()

	must := func(p keying.Platform, err error) keying.Platform {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	post := func(body []byte, h http.Header) *keying.Request {
		return &keying.Request{Method: http.MethodPost, URL: &url.URL{Path: "/"}, Header: h, Body: body, Now: now}
	}
	ali := platformtest.Alipay{Key: k}
	notify := platformtest.AlipayNotify("2016091800538339", "o1", "2026t1", "TRADE_SUCCESS", "9.90")
	wx := platformtest.WechatPay{Key: k, Serial: "PUB_KEY_ID_01", APIv3Key: apiV3}
	wxCert := platformtest.WechatPay{Key: k, Serial: platformtest.SerialHex(serial), APIv3Key: apiV3}
	wxEv := platformtest.WechatPayEvent{ID: "n1", EventType: "TRANSACTION.SUCCESS",
		Resource: platformtest.WechatPayTransaction("4200001", "o1", "SUCCESS", 990)}
	v2 := platformtest.WechatPayV2{APIKey: v2Key}
	pp := platformtest.PayPal{Key: k, WebhookID: "WH1"}
	ppBody := platformtest.PayPalEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "CAP1", "7.47")
	stBody := platformtest.StripeEvent("evt_1", "payment_intent.succeeded", "pi_1", 2000)
	swBody := []byte(`{"type":"invoice.paid"}`)

	cases := []struct {
		name string
		p    keying.Platform
		req  *keying.Request
		key  string
	}{
		{"alipay RSA2", must(alipay.New(alipay.Config{PublicKey: pub})), post([]byte(ali.Body(t, notify)), nil),
			"2016091800538339:2026t1:paid"},
		{"alipay RSA", must(alipay.New(alipay.Config{PublicKey: pub})), post([]byte(platformtest.Alipay{Key: k, SignType: "RSA"}.Body(t, notify)), nil),
			"2016091800538339:2026t1:paid"},
		{"alipay GBK", must(alipay.New(alipay.Config{PublicKey: pub})), post([]byte(platformtest.Alipay{Key: k, Charset: "GBK"}.Body(t, notify)), nil),
			"2016091800538339:2026t1:paid"},
		{"alipay return", must(alipay.New(alipay.Config{PublicKey: pub, Return: "business"})), &keying.Request{Method: http.MethodGet,
			URL: &url.URL{Path: "/return", RawQuery: ali.Query(t, platformtest.AlipayReturn("2016091800538339", "o1", "2026t1", "9.90"))}, Now: now},
			"2016091800538339:2026t1:paid"},
		{"wechatpay public key", must(wechatpay.New(wechatpay.Config{PublicKey: pub, PublicKeyID: "PUB_KEY_ID_01", Secret: apiV3})),
			post(wx.Notification(t, wxEv)), "1230000109:4200001:paid"},
		{"wechatpay certificate", must(wechatpay.New(wechatpay.Config{Certificates: [][]byte{cert}, Secret: apiV3})),
			post(wxCert.Notification(t, wxEv)), "1230000109:4200001:paid"},
		{"wechatpay_v2 MD5", must(wechatpayv2.New(wechatpayv2.Config{Secret: v2Key, MchIDs: []string{"10000100"}})),
			post(v2.Body(platformtest.WechatPayV2Payment("4200002", "o2", 990)), nil), "10000100:4200002:paid"},
		{"wechatpay_v2 HMAC-SHA256", must(wechatpayv2.New(wechatpayv2.Config{Secret: v2Key, MchIDs: []string{"10000100"}})),
			post(platformtest.WechatPayV2{APIKey: v2Key, SignType: "HMAC-SHA256"}.Body(platformtest.WechatPayV2Payment("4200002", "o2", 990)), nil), "10000100:4200002:paid"},
		{"wechatpay_v2 refund", must(wechatpayv2.New(wechatpayv2.Config{Secret: v2Key, MchIDs: []string{"10000100"}})),
			post(v2.Refund(t, platformtest.WechatPayV2RefundInfo("4200002", "o2", "5000", "SUCCESS", 990, 990)), nil), "10000100:4200002:refund:Ro2"},
		{"paypal", must(paypal.New(paypal.Config{WebhookID: "WH1", Certificates: [][]byte{cert}})),
			post(ppBody, pp.Header(t, ppBody, now)), "WH-1"},
		{"stripe", must(stripe.New(stripe.Config{Secret: whsec})),
			post(stBody, platformtest.StripeHeader(stBody, whsec, now)), "evt_1"},
		{"standard_webhooks", must(standardwebhooks.New(standardwebhooks.Config{Secret: whsec})),
			post(swBody, platformtest.StandardWebhooksHeader(t, whsec, "msg_1", now, swBody)), "msg_1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := c.p.Verify(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if n.Key != c.key {
				t.Fatalf("key %q, want %q", n.Key, c.key)
			}
		})
	}

	// A probe never verifies.
	body := wx.Body(t, wxEv)
	p := must(wechatpay.New(wechatpay.Config{PublicKey: pub, PublicKeyID: "PUB_KEY_ID_01", Secret: apiV3}))
	probe := wx.SigntestHeader(t, body)
	if s := probe.Get("Wechatpay-Signature"); len(s) < 19 || s[:19] != "WECHATPAY/SIGNTEST/" {
		t.Errorf("probe signature %q", s)
	}
	if _, err := p.Verify(post(body, probe)); err == nil {
		t.Fatal("a WECHATPAY/SIGNTEST probe verified")
	}
}

func TestSerialHex(t *testing.T) {
	if got := platformtest.SerialHex(big.NewInt(0x5157F09E)); got != "5157F09E" {
		t.Errorf("SerialHex %q", got)
	}
}

// TestWechatPayV2Refund: req_info decrypts (AES-256-ECB under the hex MD5
// of the API key, PKCS #7 padding) to the document given.
func TestWechatPayV2Refund(t *testing.T) {
	const apiKey = "192006250b4c09247ec02edce69f6a2d"
	w := platformtest.WechatPayV2{APIKey: apiKey}
	const plain = "<root><a><![CDATA[1]]></a></root>"
	fields := w.RefundFields(t, plain, "n")
	if fields["nonce_str"] != "n" || fields["sign"] != "" {
		t.Fatalf("fields %v", fields)
	}
	ct, err := base64.StdEncoding.DecodeString(fields["req_info"])
	if err != nil || len(ct)%aes.BlockSize != 0 {
		t.Fatalf("req_info %q: %v", fields["req_info"], err)
	}
	ks := md5.Sum([]byte(apiKey))
	block, _ := aes.NewCipher([]byte(hex.EncodeToString(ks[:])))
	pt := make([]byte, len(ct))
	for i := 0; i < len(ct); i += aes.BlockSize {
		block.Decrypt(pt[i:i+aes.BlockSize], ct[i:i+aes.BlockSize])
	}
	pad := int(pt[len(pt)-1])
	if pad < 1 || pad > aes.BlockSize || string(pt[:len(pt)-pad]) != plain {
		t.Fatalf("req_info decrypts to %q", pt)
	}
}

func TestPayPalForgery(t *testing.T) {
	genuine := platformtest.PayPalEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "CAP1", "7.47")
	forged := platformtest.PayPalForgery(t, genuine, []byte(`{"id":"WH-2","value":"9999.00","pad":"`+strings.Repeat("a", 64)+`"}`))
	if crc32.ChecksumIEEE(forged) != crc32.ChecksumIEEE(genuine) {
		t.Fatal("CRC-32 differs")
	}
	var v map[string]string
	if err := json.Unmarshal(forged, &v); err != nil || v["id"] != "WH-2" {
		t.Fatalf("forged body is not the forged JSON: %v %v", v, err)
	}
}
