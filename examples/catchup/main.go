// Command catchup runs, on loopback, what the catch_up laptop example
// (examples/catchup/Caddyfile) talks to: stand-ins of Stripe's and
// PayPal's event APIs, each holding one event that was never delivered,
// stand-ins of Alipay's alipay.trade.query and WeChat Pay's v3 order query,
// each knowing one paid order whose notify never came, and a backend that
// prints what it runs. It writes the keys and the certificate the
// Caddyfile reads into ./catchup-keys. See examples/catchup/README.md.
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/signer"
)

const (
	stripeKey      = "rk_test_laptop_catchup"
	stripeEndpoint = "we_laptop"
	stripeSecret   = "whsec_laptop_catchup_0000000000000000"
	alipayAppID    = "2021000000000001"
	paypalClientID = "AXlaptop-catchup"
	paypalSecret   = "EHlaptop-catchup"
	paypalWebhook  = "1JE4291016473214C"
	wechatMchID    = "1230000109"
	wechatSerial   = "3775B6A45ACD588826D15E583A95F5DD2C6D9B07"
	wechatPubKeyID = "PUB_KEY_ID_0112300001092026120400000000000001"
)

func main() {
	dir := "catchup-keys"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Fatal(err)
	}
	alipayKey, appKey := mustKey(), mustKey()
	der, _ := x509.MarshalPKCS8PrivateKey(appKey)
	write(filepath.Join(dir, "app_private_key.pem"), &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	pub, _ := x509.MarshalPKIXPublicKey(&alipayKey.PublicKey)
	write(filepath.Join(dir, "alipay_public_key.pem"), &pem.Block{Type: "PUBLIC KEY", Bytes: pub})

	paypalKey := mustKey()
	cert, err := signer.Certificate(paypalKey, big.NewInt(1), "messageverificationcerts.paypal.com")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "paypal_cert.pem"), cert, 0o600); err != nil {
		log.Fatal(err)
	}
	wechatKey, merchantKey := mustKey(), mustKey()
	der, _ = x509.MarshalPKCS8PrivateKey(merchantKey)
	write(filepath.Join(dir, "apiclient_key.pem"), &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	pub, _ = x509.MarshalPKIXPublicKey(&wechatKey.PublicKey)
	write(filepath.Join(dir, "wechatpay_pub_key.pem"), &pem.Block{Type: "PUBLIC KEY", Bytes: pub})

	stripe := platformapi.NewStripe(stripeKey, stripeEndpoint, stripeSecret, "http://127.0.0.1:8080/stripe")
	created := time.Now().Add(-20 * time.Minute)
	if err := stripe.Add(platformapi.StripeEvent("evt_laptop_missed", "payment_intent.succeeded", created,
		`{"id": "pi_laptop", "object": "payment_intent", "amount": 2500, "currency": "usd", "metadata": {"order_id": "o-stripe-1"}}`, "", 1)); err != nil {
		log.Fatal(err)
	}
	alipay := platformapi.NewAlipayAPI(alipayAppID, &appKey.PublicKey, alipayKey)
	alipay.Put(platformapi.AlipayTrade{OutTradeNo: "o-alipay-1", TradeNo: "2026120422001400000000000042",
		Status: "TRADE_SUCCESS", TotalAmount: "88.88", PaidAt: created})
	paypal := &platformapi.PayPal{ClientID: paypalClientID, Secret: paypalSecret, URL: "http://127.0.0.1:8080/paypal",
		Signer: signer.PayPal{Key: paypalKey, WebhookID: paypalWebhook}}
	if err := paypal.Add([]byte(`{"id": "WH-LAPTOP-MISSED", "event_version": "1.0", "create_time": "` + created.UTC().Format(time.RFC3339) + `",
		"resource_type": "capture", "event_type": "PAYMENT.CAPTURE.COMPLETED", "summary": "Payment completed for $ 7.47 USD",
		"resource": {"id": "CAP-LAPTOP", "invoice_id": "o-paypal-1", "amount": {"currency_code": "USD", "value": "7.47"}, "final_capture": true, "status": "COMPLETED"}}`)); err != nil {
		log.Fatal(err)
	}
	wechat := platformapi.NewWechatPayAPI(wechatKey, wechatPubKeyID)
	wechat.AddMerchant(wechatMchID, wechatSerial, &merchantKey.PublicKey)
	wechat.Put(platformapi.WechatPayOrder{MchID: wechatMchID, OutTradeNo: "o-wechatpay-1", TransactionID: "4200000042202612040000000042",
		TradeState: "SUCCESS", Total: 2500, SuccessTime: created})

	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		log.Printf("backend ran %s %s: %.200s", r.Method, r.URL.Path, b)
		switch r.URL.Path { // the merchant's query logic found it paid
		case "/orders/query":
			fmt.Fprint(w, "TRADE_SUCCESS")
			return
		case "/wechatpay/orders/query":
			fmt.Fprint(w, "SUCCESS")
			return
		}
		fmt.Fprint(w, "success")
	})
	go serve("127.0.0.1:9101", stripe, "Stripe's event API")
	go serve("127.0.0.1:9102", alipay, "Alipay's gateway")
	go serve("127.0.0.1:9103", paypal, "PayPal's webhook events API")
	go serve("127.0.0.1:9104", wechat, "WeChat Pay's API v3")
	serve("127.0.0.1:9090", backend, "the backend")
}

func serve(addr string, h http.Handler, what string) {
	log.Printf("%s on http://%s", what, addr)
	log.Fatal((&http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}

func mustKey() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		log.Fatal(err)
	}
	return k
}

func write(path string, b *pem.Block) {
	if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
		log.Fatal(err)
	}
}
