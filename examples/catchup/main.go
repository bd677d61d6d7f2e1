// Command catchup runs, on loopback, what the catch_up laptop example
// (examples/catchup/Caddyfile) talks to: a stand-in of Stripe's event API
// holding one event that was never delivered, a stand-in of Alipay's
// alipay.trade.query knowing one paid trade whose notify never came, and
// a backend that prints what it runs. It writes the Alipay keys the
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
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgate/idemgate/internal/platformapi"
)

const (
	stripeKey      = "rk_test_laptop_catchup"
	stripeEndpoint = "we_laptop"
	stripeSecret   = "whsec_laptop_catchup_0000000000000000"
	alipayAppID    = "2021000000000001"
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

	stripe := platformapi.NewStripe(stripeKey, stripeEndpoint, stripeSecret, "http://127.0.0.1:8080/stripe")
	created := time.Now().Add(-20 * time.Minute)
	if err := stripe.Add(platformapi.StripeEvent("evt_laptop_missed", "payment_intent.succeeded", created,
		`{"id": "pi_laptop", "object": "payment_intent", "amount": 2500, "currency": "usd", "metadata": {"order_id": "o-stripe-1"}}`, "", 1)); err != nil {
		log.Fatal(err)
	}
	alipay := platformapi.NewAlipayAPI(alipayAppID, &appKey.PublicKey, alipayKey)
	alipay.Put(platformapi.AlipayTrade{OutTradeNo: "o-alipay-1", TradeNo: "2026120422001400000000000042",
		Status: "TRADE_SUCCESS", TotalAmount: "88.88", PaidAt: created})

	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		log.Printf("backend ran %s %s: %.200s", r.Method, r.URL.Path, b)
		if r.URL.Path == "/orders/query" {
			fmt.Fprint(w, "TRADE_SUCCESS") // the merchant's query logic found it paid
			return
		}
		fmt.Fprint(w, "success")
	})
	go serve("127.0.0.1:9101", stripe, "Stripe's event API")
	go serve("127.0.0.1:9102", alipay, "Alipay's gateway")
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
