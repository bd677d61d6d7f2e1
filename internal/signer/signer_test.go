package signer_test

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"hash/crc32"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemgate/idemgate/internal/signer"
)

var (
	keyOnce sync.Once
	key     *rsa.PrivateKey
)

func testKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	keyOnce.Do(func() {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return key
}

// TestStripeHeader: the hand-written Stripe signer is accepted by
// stripe-go's own verifier, and is byte for byte what stripe-go's test
// signer produces.
func TestStripeHeader(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	now := time.Now()
	body := signer.StripeChangeEvent("evt_1", "payment_intent.succeeded", `{"id": "pi_1", "object": "payment_intent", "amount": 2000, "currency": "usd"}`, "", now)
	h := signer.StripeHeader(body, secret, now)
	sig := h.Get("Stripe-Signature")
	if err := webhook.ValidatePayloadWithTolerance(body, sig, secret, 5*time.Minute); err != nil {
		t.Fatalf("stripe-go rejects %q: %v", sig, err)
	}
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	ref := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: now})
	if sig != ref.Header {
		t.Errorf("Stripe-Signature %q, stripe-go signs %q", sig, ref.Header)
	}

	if err := webhook.ValidatePayloadWithTolerance(body, sig, secret+"x", 5*time.Minute); err == nil {
		t.Error("stripe-go accepts the signature under another secret")
	}
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-3] ^= 1
	if err := webhook.ValidatePayloadWithTolerance(tampered, sig, secret, 5*time.Minute); err == nil {
		t.Error("stripe-go accepts the signature for another body")
	}
	old := signer.StripeHeader(body, secret, now.Add(-time.Hour)).Get("Stripe-Signature")
	if err := webhook.ValidatePayloadWithTolerance(body, old, secret, 5*time.Minute); err == nil {
		t.Error("stripe-go accepts an hour-old timestamp: t= is not the signing time")
	}
	if err := webhook.ValidatePayloadIgnoringTolerance(body, old, secret); err != nil {
		t.Errorf("stripe-go rejects the hour-old signature even ignoring tolerance: %v", err)
	}
}

// TestStandardWebhooksHeader: the hand-written Standard Webhooks signer is
// accepted by the reference library's Verify, and matches its Sign.
func TestStandardWebhooksHeader(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a 24-byte test secret!!!"))
	now := time.Now()
	body := []byte(`{"type":"invoice.paid","data":{"id":"in_1"}}`)
	h, err := signer.StandardWebhooksHeader(secret, "msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(body, h); err != nil {
		t.Fatalf("the reference library rejects %v: %v", h, err)
	}
	ref, err := wh.Sign("msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get("Webhook-Signature"); got != ref {
		t.Errorf("webhook-signature %q, the reference library signs %q", got, ref)
	}
	if got, want := h.Get("Webhook-Timestamp"), strconv.FormatInt(now.Unix(), 10); got != want {
		t.Errorf("webhook-timestamp %q, want %q", got, want)
	}
	if got := h.Get("Webhook-Id"); got != "msg_1" {
		t.Errorf("webhook-id %q", got)
	}

	other, _ := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte("another 24-byte secret!!")))
	if err := other.Verify(body, h); err == nil {
		t.Error("the reference library accepts the signature under another secret")
	}
	moved := h.Clone()
	moved.Set("Webhook-Id", "msg_2")
	if err := wh.Verify(body, moved); err == nil {
		t.Error("the reference library accepts the signature for another message id")
	}
	if err := wh.Verify(append(body, ' '), h); err == nil {
		t.Error("the reference library accepts the signature for another body")
	}
	stale, err := signer.StandardWebhooksHeader(secret, "msg_1", now.Add(-time.Hour), body)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(body, stale); err == nil {
		t.Error("the reference library accepts an hour-old timestamp")
	}

	if _, err := signer.StandardWebhooksHeader("whsec_not*base64", "msg_1", now, body); err == nil {
		t.Error("a secret that is not base64 signed without error")
	}
}

// TestAlipaySign: Alipay's sign verifies with rsa.VerifyPKCS1v15 over
// AlipayContent, for RSA2 (SHA-256), RSA (SHA-1) and GBK.
func TestAlipaySign(t *testing.T) {
	k := testKey(t)
	notify := signer.AlipayNotify("2016091800538339", "o1", "2026t1", "TRADE_SUCCESS", "9.90")
	cases := []struct {
		name     string
		a        signer.Alipay
		signType string
		hash     crypto.Hash
		charset  string
	}{
		{"RSA2", signer.Alipay{Key: k}, "RSA2", crypto.SHA256, "utf-8"},
		{"RSA", signer.Alipay{Key: k, SignType: "RSA"}, "RSA", crypto.SHA1, "utf-8"},
		{"GBK", signer.Alipay{Key: k, Charset: "GBK"}, "RSA2", crypto.SHA256, "GBK"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body, err := c.a.Body(notify)
			if err != nil {
				t.Fatal(err)
			}
			signed, err := url.ParseQuery(body)
			if err != nil {
				t.Fatal(err)
			}
			if got := signed.Get("sign_type"); got != c.signType {
				t.Errorf("sign_type %q, want %q", got, c.signType)
			}
			if got := signed.Get("charset"); got != c.charset {
				t.Errorf("charset %q, want %q", got, c.charset)
			}
			subject := signed.Get("subject")
			if c.charset == "GBK" {
				want, _ := simplifiedchinese.GBK.NewEncoder().String(notify.Get("subject"))
				if subject != want {
					t.Errorf("subject %q is not the GBK form %q", subject, want)
				}
			} else if subject != notify.Get("subject") {
				t.Errorf("subject %q, want %q", subject, notify.Get("subject"))
			}
			sig, err := base64.StdEncoding.DecodeString(signed.Get("sign"))
			if err != nil {
				t.Fatal(err)
			}
			if err := rsa.VerifyPKCS1v15(&k.PublicKey, c.hash, digest(c.hash, signer.AlipayContent(signed)), sig); err != nil {
				t.Fatalf("sign does not verify over AlipayContent: %v", err)
			}
			signed.Set("total_amount", "9999.00")
			if err := rsa.VerifyPKCS1v15(&k.PublicKey, c.hash, digest(c.hash, signer.AlipayContent(signed)), sig); err == nil {
				t.Fatal("sign verifies for another total_amount")
			}
		})
	}
	if _, err := (signer.Alipay{}).Sign(notify); err == nil {
		t.Error("Sign without a key did not fail")
	}
	if notify.Get("sign") != "" {
		t.Error("Sign changed its argument")
	}
}

func TestAlipayContent(t *testing.T) {
	got := string(signer.AlipayContent(url.Values{"b": {"2"}, "a": {"1 &x"}, "sign": {"s"}, "sign_type": {"RSA2"}, "empty": {""}}))
	if want := "a=1 &x&b=2"; got != want {
		t.Fatalf("AlipayContent %q, want %q", got, want)
	}
}

// TestWechatPay: the resource decrypts under the APIv3 key and the header's
// signature verifies over "<timestamp>\n<nonce>\n<body>\n".
func TestWechatPay(t *testing.T) {
	k := testKey(t)
	const apiV3 = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4"
	w := signer.WechatPay{Key: k, Serial: "PUB_KEY_ID_01", APIv3Key: apiV3}
	resource := signer.WechatPayTransaction("4200001", "o1", "SUCCESS", 990)
	body, h, err := w.Notification(signer.WechatPayEvent{ID: "n1", EventType: "TRANSACTION.SUCCESS", Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		ID       string `json:"id"`
		Resource struct {
			Ciphertext     string `json:"ciphertext"`
			Nonce          string `json:"nonce"`
			AssociatedData string `json:"associated_data"`
		} `json:"resource"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	res := env.Resource
	block, _ := aes.NewCipher([]byte(apiV3))
	gcm, _ := cipher.NewGCM(block)
	ct, _ := base64.StdEncoding.DecodeString(res.Ciphertext)
	plain, err := gcm.Open(nil, []byte(res.Nonce), ct, []byte(res.AssociatedData))
	if err != nil {
		t.Fatalf("resource does not decrypt: %v", err)
	}
	if string(plain) != resource || env.ID != "n1" {
		t.Fatalf("id %q, resource %s", env.ID, plain)
	}
	msg := h.Get("Wechatpay-Timestamp") + "\n" + h.Get("Wechatpay-Nonce") + "\n" + string(body) + "\n"
	sig, _ := base64.StdEncoding.DecodeString(h.Get("Wechatpay-Signature"))
	if err := rsa.VerifyPKCS1v15(&k.PublicKey, crypto.SHA256, digest(crypto.SHA256, []byte(msg)), sig); err != nil {
		t.Fatalf("Wechatpay-Signature does not verify: %v", err)
	}
	if h.Get("Wechatpay-Serial") != "PUB_KEY_ID_01" || len(h.Get("Wechatpay-Nonce")) != 32 {
		t.Fatalf("header %v", h)
	}

	if _, err := (signer.WechatPay{Key: k, APIv3Key: "short"}).Body(signer.WechatPayEvent{}); err == nil {
		t.Error("a 5-byte APIv3 key did not fail")
	}
	if _, err := w.Body(signer.WechatPayEvent{Nonce: "too short"}); err == nil {
		t.Error("a 9-byte resource nonce did not fail")
	}
}

// TestPayPal: the transmission signature verifies over
// "<id>|<time>|<webhook id>|<crc32>".
func TestPayPal(t *testing.T) {
	k := testKey(t)
	p := signer.PayPal{Key: k, WebhookID: "WH1"}
	body := signer.PayPalEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "CAP1", "7.47")
	tm := time.Date(2026, 3, 14, 9, 26, 50, 0, time.UTC)
	h, err := p.TransmissionHeader(body, "id-1", tm)
	if err != nil {
		t.Fatal(err)
	}
	msg := "id-1|2026-03-14T09:26:50Z|WH1|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
	sig, _ := base64.StdEncoding.DecodeString(h.Get("Paypal-Transmission-Sig"))
	if err := rsa.VerifyPKCS1v15(&k.PublicKey, crypto.SHA256, digest(crypto.SHA256, []byte(msg)), sig); err != nil {
		t.Fatalf("Paypal-Transmission-Sig does not verify: %v", err)
	}
	if h.Get("Paypal-Transmission-Time") != "2026-03-14T09:26:50Z" || h.Get("Paypal-Cert-Url") == "" {
		t.Fatalf("header %v", h)
	}
	if _, err := (signer.PayPal{}).Header(body, tm); err == nil {
		t.Error("Header without a key did not fail")
	}
}

func TestKeysAndCertificates(t *testing.T) {
	k := testKey(t)
	pubPEM, err := signer.PublicKeyPEM(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pubPEM)
	if block == nil || block.Type != "PUBLIC KEY" {
		t.Fatalf("public key PEM %q", pubPEM)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil || !k.PublicKey.Equal(pub) {
		t.Fatalf("public key %v, %v", pub, err)
	}

	serial := big.NewInt(0x5157F09E)
	certPEM, err := signer.Certificate(k, serial, "platform")
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.SerialNumber.Cmp(serial) != 0 || cert.Subject.CommonName != "platform" || !k.PublicKey.Equal(cert.PublicKey) {
		t.Fatalf("certificate %v %v", cert.SerialNumber, cert.Subject)
	}
	if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
		t.Fatalf("not self-signed: %v", err)
	}
	if _, err := signer.Certificate(nil, serial, "x"); err == nil {
		t.Error("Certificate without a key did not fail")
	}
	if _, err := signer.SignPKCS1(k, crypto.SHA512, []byte("m")); err == nil {
		t.Error("SignPKCS1 with SHA-512, which no platform uses, did not fail")
	}
	if n := signer.Nonce(32); len(n) != 32 || n == signer.Nonce(32) {
		t.Errorf("Nonce %q", n)
	}
}

// TestWechatPayV2: sign is the upper-case hex MD5 (or HMAC-SHA256) of the
// sorted fields and the key.
func TestWechatPayV2(t *testing.T) {
	const apiKey = "192006250b4c09247ec02edce69f6a2d"
	w := signer.WechatPayV2{APIKey: apiKey}
	signed := w.Sign(map[string]string{"b": "2", "a": "1", "empty": "", "sign": "old"})
	md := md5.Sum([]byte("a=1&b=2&key=" + apiKey))
	if want := strings.ToUpper(hex.EncodeToString(md[:])); signed["sign"] != want {
		t.Errorf("MD5 sign %q, want %q", signed["sign"], want)
	}
	hs := (signer.WechatPayV2{APIKey: apiKey, SignType: "HMAC-SHA256"}).Sign(map[string]string{"a": "1"})
	m := hmac.New(sha256.New, []byte(apiKey))
	m.Write([]byte("a=1&sign_type=HMAC-SHA256&key=" + apiKey))
	if want := strings.ToUpper(hex.EncodeToString(m.Sum(nil))); hs["sign"] != want || hs["sign_type"] != "HMAC-SHA256" {
		t.Errorf("HMAC-SHA256 sign %v, want sign %q", hs, want)
	}
	if got, want := string(w.Body(map[string]string{"a": "1"})), "<xml><a><![CDATA[1]]></a><sign><![CDATA["+w.Sign(map[string]string{"a": "1"})["sign"]+"]]></sign></xml>"; got != want {
		t.Errorf("Body %s, want %s", got, want)
	}
}

func digest(h crypto.Hash, msg []byte) []byte {
	if h == crypto.SHA1 {
		d := sha1.Sum(msg)
		return d[:]
	}
	d := sha256.Sum256(msg)
	return d[:]
}
