package orders_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestStatusQueryNeverBurnsPaid: the customer's "did my payment go
// through?" poll, on the docs' status-query recipe (keyed as the order's
// paid event, with a success rule that reads the answer), comes before
// the buyer pays in a QR-code checkout. Its "200 WAIT_BUYER_PAY" is not
// the order's paid event: Alipay's TRADE_SUCCESS notify that follows still
// reaches the backend, once, and a poll after it is answered from the
// order with the recipe's on_duplicate answer, never an empty 200.
func TestStatusQueryNeverBurnsPaid(t *testing.T) {
	for name, store := range gatewaytest.StoreLines(t) {
		t.Run(name, func(t *testing.T) {
			a := gatewaytest.NewAlipayOrders(t)
			be := gatewaytest.NewBackend(t)
			var paid atomic.Bool
			be.SetAnswer(func(_ string, _ int, r *http.Request) (int, string, time.Duration) {
				switch r.URL.Path {
				case "/orders/query":
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
			channels, _, _ := strings.Cut(gatewaytest.AlipaySite, "\thandle /query {")
			site := channels + gatewaytest.StatusQueryRecipe(t, "{backend}", "{store}")
			g := gatewaytest.StartGateway(t, site, "{pub}", a.Pub, "{store}", store, "{ttl}", "1h", "{backend}", be.Addr())
			const trade = "2026031422001437971000000078"
			poll := gatewaytest.Delivery{Path: "/orders/query", Ctype: "application/json",
				Body: `{"app_id":"` + gatewaytest.AlipayAppID + `","trade_no":"` + trade + `"}`}

			for i := range 2 {
				if r := gatewaytest.Send(t, g.Base, "poll", poll); r.Status != 200 || r.Body != "WAIT_BUYER_PAY" || r.Replayed {
					t.Fatalf("poll %d before the payment: %d %q replayed=%v, want the backend's WAIT_BUYER_PAY", i, r.Status, r.Body, r.Replayed)
				}
			}
			if r := gatewaytest.Send(t, g.Base, "paid", a.Notify(trade, "TRADE_SUCCESS")); r.Status != 200 || r.Body != "success" || r.Replayed {
				t.Fatalf("Alipay's notify after the polls: %d %q replayed=%v, want it forwarded and run", r.Status, r.Body, r.Replayed)
			}
			if r := gatewaytest.Send(t, g.Base, "paid", a.Notify(trade, "TRADE_SUCCESS")); !r.Replayed || r.Body != "success" {
				t.Fatalf("Alipay's retry: %d %q replayed=%v, want success replayed", r.Status, r.Body, r.Replayed)
			}
			if r := gatewaytest.Send(t, g.Base, "poll", poll); r.Status != 200 || !r.Replayed || r.Body != "TRADE_SUCCESS" {
				t.Fatalf("poll after the payment: %d %q replayed=%v, want the recipe's on_duplicate answer (TRADE_SUCCESS) from the order", r.Status, r.Body, r.Replayed)
			}
			if n := be.Count("paid"); n != 1 {
				t.Errorf("the payment ran %d times, want 1", n)
			}
			if n := be.Count("poll"); n != 2 {
				t.Errorf("the backend answered %d polls, want 2 (the two before the payment)", n)
			}
		})
	}
}
