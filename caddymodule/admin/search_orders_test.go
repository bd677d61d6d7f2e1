package admin

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/store"
)

// The search tests: an order is found as the customer names it — the
// merchant's out_trade_no, a refund's out_biz_no — through the real
// module, on every store: answered, failed (sync) and given up (async).

const searchSite = `
	handle /notify {
		idempotency {
			platform alipay
			public_key {pub}
			{store}
		}
		reverse_proxy {backend}
	}
	handle /async {
		idempotency {
			platform alipay
			public_key {pub}
			scope alipay_async
			{store}
			deliver async {
				to http://{backend}
				retry 100ms 200ms
				give_up 1s
			}
		}
	}`

// searchFor is GET /idempotency/search?q=q.
func searchFor(t *testing.T, g gatewaytest.Gateway, q string) SearchView {
	t.Helper()
	var v SearchView
	g.AdminJSON(t, http.MethodGet, "/idempotency/search?q="+url.QueryEscape(q), &v)
	return v
}

func TestSearchByMerchantOrderNumber(t *testing.T) {
	gatewaytest.EachStore(t, func(t *testing.T, _, storeID string) {
		a := gatewaytest.NewAlipayOrders(t)
		be := gatewaytest.NewBackend(t)
		be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
			if order == "fail" {
				return 500, "broken", 0
			}
			return 200, "success", 0
		})
		g := gatewaytest.StartGateway(t, searchSite, "{pub}", a.Pub, "{store}", storeID, "{backend}", be.Addr())
		const paid, failed, given = "2026031422001437971000000101", "2026031422001437971000000102", "2026031422001437971000000103"
		order := "alipay:" + gatewaytest.AlipayAppID + ":" + paid

		if r := gatewaytest.Send(t, g.Base, "paid", a.Notify(paid, "TRADE_SUCCESS")); r.Status != 200 || r.Body != "success" {
			t.Fatalf("paid: %d %q", r.Status, r.Body)
		}
		refund := a.Notify(paid, "TRADE_SUCCESS", "out_biz_no", "RF-101", "refund_fee", "8.88")
		if r := gatewaytest.Send(t, g.Base, "refund", refund); r.Status != 200 {
			t.Fatalf("refund: %d %q", r.Status, r.Body)
		}
		if r := gatewaytest.Send(t, g.Base, "fail", a.Notify(failed, "TRADE_SUCCESS")); r.Status == 200 {
			t.Fatalf("a failing backend's notify: %d %q", r.Status, r.Body)
		}
		async := a.Notify(given, "TRADE_SUCCESS")
		async.Path = "/async"
		if r := gatewaytest.Send(t, g.Base, "fail", async); r.Status != 200 {
			t.Fatalf("async ack: %d %q", r.Status, r.Body)
		}

		// The customer's order number finds the payment and its refund,
		// with their amounts.
		v := searchFor(t, g, "o-"+paid)
		if len(v.Matches) != 2 {
			t.Fatalf("o-%s finds %+v, want the payment and the refund", paid, v.Matches)
		}
		want := map[string]string{order + ":paid": "88.88", order + ":refund:RF-101": "8.88"}
		for _, m := range v.Matches {
			if want[m.Key] != m.Amount || m.Currency != "CNY" || m.State != store.StateAnswered || m.Order != order || m.Ref != "o-"+paid {
				t.Errorf("match %+v", m)
			}
		}
		// The refund's own number finds the refund.
		if v := searchFor(t, g, "RF-101"); len(v.Matches) != 1 || v.Matches[0].Key != order+":refund:RF-101" || v.Matches[0].Event != "refund:RF-101" {
			t.Fatalf("RF-101 finds %+v", v.Matches)
		}
		// A failed key, which support needs most, is found too.
		if v := searchFor(t, g, " o-"+failed+" "); len(v.Matches) != 1 || v.Matches[0].State != store.StateFailed || v.Matches[0].Amount != "88.88" ||
			v.Matches[0].Key != "alipay:"+gatewaytest.AlipayAppID+":"+failed+":paid" {
			t.Fatalf("o-%s finds %+v, want its failed key, with its notification's amount", failed, v.Matches)
		}
		// Delivered async and given up: the queued notification carried
		// its references to the settle.
		gatewaytest.Eventually(t, 15*time.Second, "the async key to be given up and found", func() bool {
			v := searchFor(t, g, "o-"+given)
			return len(v.Matches) == 1 && v.Matches[0].Key == "alipay_async:"+gatewaytest.AlipayAppID+":"+given+":paid" &&
				(v.Matches[0].State == store.StateFailed || v.Matches[0].State == store.StateDead)
		})
		// The start of a key finds its keys too.
		if v := searchFor(t, g, order); len(v.Matches) != 2 || v.Matches[0].Ref != "" {
			t.Fatalf("prefix %s finds %+v", order, v.Matches)
		}
		if v := searchFor(t, g, "o-nothing"); len(v.Matches) != 0 || v.Matches == nil {
			t.Fatalf("an unknown number finds %+v, want [] ", v.Matches)
		}
		if status, body := g.AdminDo(t, http.MethodGet, "/idempotency/search"); status != http.StatusBadRequest || !strings.Contains(body, "out_trade_no") {
			t.Fatalf("search for nothing: %d %s", status, body)
		}
	})
}
