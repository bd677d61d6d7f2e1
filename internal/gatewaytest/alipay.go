package gatewaytest

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// AlipayAppID is the test app_id of AlipayOrders' notifications.
const AlipayAppID = "2016091800538339"

// AlipaySite is Alipay's two channels with default keys (the return is
// the order's paid event: `return business`), answers kept for ttl, and
// the merchant's own status-query route (generic, in the alipay scope,
// keyed in the documented format). StartGateway's replacements fill
// {pub}, {store}, {ttl} and {backend}.
const AlipaySite = `
	handle /notify {
		idempotency {
			platform alipay
			public_key {pub}
			{store}
			ttl {ttl}
		}
		reverse_proxy {backend}
	}
	handle /return {
		idempotency {
			platform alipay
			public_key {pub}
			{store}
			ttl {ttl}
			return business
			success 200
			on_duplicate redirect https://shop.example/orders/{idempotency.alipay.out_trade_no}
		}
		reverse_proxy {backend}
	}
	handle /query {
		idempotency {
			scope alipay
			key {idempotency.json.app_id}:{idempotency.json.trade_no}:paid
			success 200 body TRADE_SUCCESS
			on_duplicate respond 200 TRADE_SUCCESS
			{store}
			ttl {ttl}
		}
		reverse_proxy {backend}
	}`

// AlipayOrders signs Alipay's deliveries of one order with a key of its
// own; Pub is the file of its public key, for a route's public_key.
type AlipayOrders struct {
	t      testing.TB
	Signer platformtest.Alipay
	Pub    string
}

// NewAlipayOrders makes a key pair for t and writes its public key.
func NewAlipayOrders(t testing.TB) AlipayOrders {
	k, _ := platformtest.Keys(t)
	return AlipayOrders{t: t, Signer: platformtest.Alipay{Key: k},
		Pub: platformtest.WriteFile(t, "alipay_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))}
}

// Notify is the async notify of trade (order "o-"+trade, 88.88) to
// /notify with status and extra fields (name/value pairs).
func (a AlipayOrders) Notify(trade, status string, extra ...string) Delivery {
	p := platformtest.AlipayNotify(AlipayAppID, "o-"+trade, trade, status, "88.88")
	for i := 0; i+1 < len(extra); i += 2 {
		p.Set(extra[i], extra[i+1])
	}
	return Delivery{Path: "/notify", Ctype: "application/x-www-form-urlencoded; charset=utf-8", Body: a.Signer.Body(a.t, p)}
}

// Return is the browser's signed return for trade to /return.
func (a AlipayOrders) Return(trade string) Delivery {
	return Delivery{Method: http.MethodGet, Path: "/return",
		Query: a.Signer.Query(a.t, platformtest.AlipayReturn(AlipayAppID, "o-"+trade, trade, "88.88"))}
}

// AlipayOrderBackend answers as Alipay's legacy merchant does: "success"
// to the notify, its HTML page to the browser's return (/return), the
// trade's state to the status query (/query).
func AlipayOrderBackend(t testing.TB) *Backend {
	be := NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		switch r.URL.Path {
		case "/return":
			return 200, "<html>thank you for paying</html>", 0
		case "/query":
			return 200, "TRADE_SUCCESS", 0
		}
		return 200, "success", 0
	})
	return be
}
