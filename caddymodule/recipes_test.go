package caddymodule

import (
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// docsStatusQueryRecipe is the status-query route of docs/platforms.md as
// written there, on the test's backend and store.
func docsStatusQueryRecipe(t *testing.T, backend, store string) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/platforms.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "  handle /orders/query {\n")
	block, _, ok2 := strings.Cut(rest, "\n  }\n")
	if !ok || !ok2 {
		t.Fatal("docs/platforms.md has no status-query recipe (handle /orders/query)")
	}
	lines := []string{"\thandle /orders/query {"}
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimPrefix(l, "  ")
		switch strings.TrimSpace(l) {
		case "reverse_proxy 127.0.0.1:9090":
			l = "\t\treverse_proxy " + backend
		case "scope alipay":
			l += "\n\t\t\t" + store
		}
		lines = append(lines, "\t"+l)
	}
	return strings.Join(append(lines, "\t}"), "\n")
}

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
			a := newAlipayOrders(t)
			be := newBackend(t)
			var paid atomic.Bool
			be.setAnswer(func(_ string, _ int, r *http.Request) (int, string, time.Duration) {
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
			channels, _, _ := strings.Cut(alipayOrderSite, "\thandle /query {")
			site := channels + docsStatusQueryRecipe(t, "{backend}", "{store}")
			g := startGateway(t, site, "{pub}", a.pub, "{store}", store, "{ttl}", "1h", "{backend}", be.addr())
			const trade = "2026031422001437971000000078"
			poll := delivery{path: "/orders/query", ctype: "application/json",
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
			if r := send(t, g.base, "poll", poll); r.status != 200 || !r.replayed || r.body != "TRADE_SUCCESS" {
				t.Fatalf("poll after the payment: %d %q replayed=%v, want the recipe's on_duplicate answer (TRADE_SUCCESS) from the order", r.status, r.body, r.replayed)
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
