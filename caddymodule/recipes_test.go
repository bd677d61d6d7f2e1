package caddymodule

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestStatusQueryNeverBurnsPaid: the customer's "did my payment go
// through?" poll, keyed as the order's paid event with a success rule
// that reads the answer, comes before the buyer pays in a QR-code
// checkout. Its "200 WAIT_BUYER_PAY" is not the order's paid event: Alipay's
// TRADE_SUCCESS notify that follows still reaches the backend, once, and
// only a poll after it is answered from the order.
func TestStatusQueryNeverBurnsPaid(t *testing.T) {
	for name, store := range gatewaytest.StoreLines(t) {
		t.Run(name, func(t *testing.T) {
			a := newAlipayOrders(t)
			be := newBackend(t)
			var paid atomic.Bool
			be.setAnswer(func(_ string, _ int, r *http.Request) (int, string, time.Duration) {
				switch r.URL.Path {
				case "/query":
					if paid.Load() {
						return 200, "TRADE_SUCCESS", 0
					}
					return 200, "WAIT_BUYER_PAY", 0
				case "/return":
					return 200, "<html>thank you</html>", 0
				}
				paid.Store(true)
				return 200, "success", 0
			})
			g := startGateway(t, alipayOrderSite, "{pub}", a.pub, "{store}", store, "{ttl}", "1h", "{backend}", be.addr())
			const trade = "2026031422001437971000000078"
			poll := delivery{path: "/query", ctype: "application/json",
				body: `{"app_id":"` + testAlipayAppID + `","trade_no":"` + trade + `"}`}

			for i := range 2 {
				if r := send(t, g.base, "poll", poll); r.status != 200 || r.body != "WAIT_BUYER_PAY" || r.replayed {
					t.Fatalf("poll %d before the payment: %d %q replayed=%v, want the backend's WAIT_BUYER_PAY", i, r.status, r.body, r.replayed)
				}
			}
			if r := send(t, g.base, "paid", a.notify(trade, "TRADE_SUCCESS")); r.status != 200 || r.body != "success" || r.replayed {
				t.Fatalf("Alipay's notify after the polls: %d %q replayed=%v, want it forwarded and run", r.status, r.body, r.replayed)
			}
			if r := send(t, g.base, "paid", a.notify(trade, "TRADE_SUCCESS")); !r.replayed || r.body != "success" {
				t.Fatalf("Alipay's retry: %d %q replayed=%v, want success replayed", r.status, r.body, r.replayed)
			}
			if r := send(t, g.base, "poll", poll); r.status != 200 || !r.replayed {
				t.Fatalf("poll after the payment: %d %q replayed=%v, want the order's paid event replayed", r.status, r.body, r.replayed)
			}
			if n := be.count("paid"); n != 1 {
				t.Errorf("the payment ran %d times, want 1", n)
			}
			if n := be.count("poll"); n != 2 {
				t.Errorf("the backend answered %d polls, want 2 (the two before the payment)", n)
			}
		})
	}
}
