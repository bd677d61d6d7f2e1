package orders_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/idemgate/idemgate/caddymodule"
	adminapi "github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The orders tests through the real module (internal/gatewaytest): one
// business outcome of a payment runs the backend once, across channels
// (the browser's return, the notify, the merchant's own status query),
// status messages (TRADE_SUCCESS, TRADE_FINISHED) and time (copies after
// the answer's ttl). The backend counts its runs by business event
// (X-Order, which the gateway ignores: keys come from signed content).
// Two gateway processes on one Redis: caddymodule's TestAlipayOrderStorm.

// Test secrets; they sign nothing real.
const (
	wxAPIv3Key   = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4" // 32 bytes
	wxPubKeyID   = "PUB_KEY_ID_0114232134912410000000000000"
	stripeSecret = "whsec_test_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"
)

// TestAlipayOrderSequence is one order's life on every store: the return
// and the notify race (one runs), retries, TRADE_FINISHED, two partial
// refunds and a full one, the merchant's status query; then, after the
// answers' ttl, every one of them again — and the backend ran each
// business event exactly once.
func TestAlipayOrderSequence(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster; waits out the answers' ttl on every store")
	stores := gatewaytest.StoreLines(t)
	stores["redis_cluster"] = "store redis " + strings.Join(redistest.StartCluster(t, 3).Addrs, " ")
	for name, store := range stores {
		t.Run(name, func(t *testing.T) { alipayOrderSequence(t, store) })
	}
}

func alipayOrderSequence(t *testing.T, store string) {
	a := gatewaytest.NewAlipayOrders(t)
	be := gatewaytest.AlipayOrderBackend(t)
	const ttl = 2 * time.Second
	g := gatewaytest.StartGateway(t, gatewaytest.AlipaySite, "{pub}", a.Pub, "{store}", store, "{ttl}", ttl.String(), "{backend}", be.Addr())
	const trade = "2026031422001437971000000077"
	order := "alipay:" + gatewaytest.AlipayAppID + ":" + trade
	query := gatewaytest.Delivery{Path: "/query", Ctype: "application/json", Body: `{"app_id":"` + gatewaytest.AlipayAppID + `","trade_no":"` + trade + `"}`}

	// The browser's return comes first; the notify finds the order paid
	// and gets Alipay's "success", though the answer kept is the page.
	if r := gatewaytest.Send(t, g.Base, "paid", a.Return(trade)); r.Status != 200 || r.Replayed || !strings.Contains(r.Body, "thank you") {
		t.Fatalf("return: %d %q replayed=%v", r.Status, r.Body, r.Replayed)
	}
	for i := range 3 {
		if r := gatewaytest.Send(t, g.Base, "paid", a.Notify(trade, "TRADE_SUCCESS")); r.Status != 200 || r.Body != "success" || !r.Replayed {
			t.Fatalf("notify %d after the return: %d %q replayed=%v, want Alipay's success replayed", i, r.Status, r.Body, r.Replayed)
		}
	}
	if r := gatewaytest.Send(t, g.Base, "paid", a.Return(trade)); r.Status != http.StatusFound || !strings.Contains(r.Header.Get("Location"), "o-"+trade) {
		t.Fatalf("the browser's second return: %d %s, want the redirect to its order", r.Status, r.Header.Get("Location"))
	}
	if r := gatewaytest.Send(t, g.Base, "paid", query); r.Status != 200 || !r.Replayed {
		t.Fatalf("status query of a paid order: %d %q replayed=%v, want a replay, not a run", r.Status, r.Body, r.Replayed)
	}
	// TRADE_FINISHED (the refund window closed): the same paid event.
	if r := gatewaytest.Send(t, g.Base, "paid", a.Notify(trade, "TRADE_FINISHED")); r.Status != 200 || r.Body != "success" || !r.Replayed {
		t.Fatalf("TRADE_FINISHED: %d %q replayed=%v", r.Status, r.Body, r.Replayed)
	}
	// Refunds: two partial ones (with TRADE_SUCCESS), a full one (with
	// TRADE_CLOSED): each its own event, each run once.
	refunds := []gatewaytest.Delivery{
		a.Notify(trade, "TRADE_SUCCESS", "out_biz_no", "RF-1", "refund_fee", "8.88", "gmt_refund", "2026-03-15 10:00:00.123"),
		a.Notify(trade, "TRADE_SUCCESS", "out_biz_no", "RF-2", "refund_fee", "18.88"),
		a.Notify(trade, "TRADE_CLOSED", "out_biz_no", "RF-3", "refund_fee", "88.88"),
	}
	for i, d := range refunds {
		label := "refund:RF-" + strconv.Itoa(i+1)
		if r := gatewaytest.Send(t, g.Base, label, d); r.Status != 200 || r.Body != "success" || r.Replayed {
			t.Fatalf("%s: %d %q replayed=%v, want it run", label, r.Status, r.Body, r.Replayed)
		}
		if r := gatewaytest.Send(t, g.Base, label, d); !r.Replayed || r.Body != "success" {
			t.Fatalf("%s retry: %d %q replayed=%v", label, r.Status, r.Body, r.Replayed)
		}
	}

	// Past the answers' ttl, the order remembers: nothing runs again.
	gatewaytest.Eventually(t, ttl+10*time.Second, "the answers' records to expire", func() bool {
		for _, ev := range []string{"paid", "refund:RF-1", "refund:RF-2", "refund:RF-3"} {
			if status, _ := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI(order+":"+ev)); status != http.StatusNotFound {
				return false
			}
		}
		return true
	})
	later := []struct {
		label string
		d     gatewaytest.Delivery
	}{
		{"paid", a.Notify(trade, "TRADE_SUCCESS")},
		{"paid", a.Notify(trade, "TRADE_FINISHED")},
		{"paid", query},
		{"refund:RF-1", refunds[0]},
		{"refund:RF-3", refunds[2]},
	}
	for _, c := range later {
		if r := gatewaytest.Send(t, g.Base, c.label, c.d); r.Status != 200 || !r.Replayed {
			t.Fatalf("%s after ttl: %d %q replayed=%v, want the order's memory", c.label, r.Status, r.Body, r.Replayed)
		} else if c.d.Path == "/notify" && r.Body != "success" {
			t.Fatalf("%s after ttl: %q, want Alipay's success", c.label, r.Body)
		}
	}
	if r := gatewaytest.Send(t, g.Base, "paid", a.Return(trade)); r.Status != http.StatusFound {
		t.Fatalf("the browser's return after ttl: %d, want the redirect", r.Status)
	}
	for _, label := range []string{"paid", "refund:RF-1", "refund:RF-2", "refund:RF-3"} {
		if n := be.Count(label); n != 1 {
			t.Errorf("%s: the backend ran %d times, want 1", label, n)
		}
	}
	if n := be.Total.Load(); n != 4 {
		t.Errorf("the backend ran %d times in all, want 4 (one per business event)", n)
	}

	// The order's page: four events that ran, each with its own money
	// (refund_fee is the trade's refunded total: 8.88, 18.88, 88.88).
	var ov adminapi.OrderView
	g.AdminJSON(t, http.MethodGet, "/idempotency/orders/"+url.PathEscape(order), &ov)
	want := map[string]string{"paid": "88.88", "refund:RF-1": "8.88", "refund:RF-2": "10.00", "refund:RF-3": "70.00"}
	if len(ov.Events) != len(want) {
		t.Fatalf("order page: %+v", ov)
	}
	for _, ev := range ov.Events {
		if want[ev.Event] != ev.Amount || ev.State != "ran" || ev.Ran.IsZero() || ev.Currency != "CNY" || ev.Key != order+":"+ev.Event {
			t.Errorf("order page event %+v", ev)
		}
	}
	if time.Until(ov.ExpiresAt) < 399*24*time.Hour {
		t.Errorf("order expires %v, want order_ttl's default of 400 days", ov.ExpiresAt)
	}

	// An operator's purge forgets the event: its next copy runs.
	if status, body := g.AdminDo(t, http.MethodDelete, gatewaytest.KeyURI(order+":refund:RF-2")); status != 200 {
		t.Fatalf("purge of a remembered event: %d %s", status, body)
	}
	if r := gatewaytest.Send(t, g.Base, "refund:RF-2", refunds[1]); r.Replayed || r.Body != "success" {
		t.Fatalf("refund after its purge: %d %q replayed=%v, want it run again", r.Status, r.Body, r.Replayed)
	}
	if n := be.Count("refund:RF-2"); n != 2 {
		t.Errorf("refund:RF-2 ran %d times, want 2 (once, and once after the purge)", n)
	}
}

// TestWechatPayOrderSequence: WeChat Pay v3 re-sends a payment after the
// answer's ttl under a new notification id: the order remembers it paid.
// A refund is its own event; REFUND.ABNORMAL of that refund another.
func TestWechatPayOrderSequence(t *testing.T) {
	testenv.Slow(t, "runs for seconds: waits out the answer's ttl")
	k, _ := platformtest.Keys(t)
	pub := platformtest.WriteFile(t, "wx_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	wx := platformtest.WechatPay{Key: k, Serial: wxPubKeyID, APIv3Key: wxAPIv3Key}
	be := gatewaytest.NewBackend(t)
	const ttl = 2 * time.Second
	g := gatewaytest.StartGateway(t, `
	handle /wx {
		idempotency {
			platform wechatpay
			public_key `+pub+`
			public_key_id `+wxPubKeyID+`
			secret `+wxAPIv3Key+`
			store memory
			ttl `+ttl.String()+`
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	const tx = "4200009999"
	deliver := func(label, id, eventType, resource string) gatewaytest.Reply {
		body, hdr := wx.Notification(t, platformtest.WechatPayEvent{ID: id, EventType: eventType, Resource: resource})
		return gatewaytest.Send(t, g.Base, label, gatewaytest.Delivery{Path: "/wx", Body: string(body), Header: hdr, Ctype: "application/json"})
	}
	pay := platformtest.WechatPayTransaction(tx, "o-wx", "SUCCESS", 990)
	if r := deliver("paid", "note-1", "TRANSACTION.SUCCESS", pay); r.Status != 200 || r.Replayed {
		t.Fatalf("payment: %d replayed=%v", r.Status, r.Replayed)
	}
	if r := deliver("paid", "note-2", "TRANSACTION.SUCCESS", pay); !r.Replayed {
		t.Fatalf("the payment under a new notification id: %d replayed=%v, want the replay", r.Status, r.Replayed)
	}
	gatewaytest.Eventually(t, ttl+10*time.Second, "the answer's record to expire", func() bool {
		status, _ := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI("wechatpay:1230000109:"+tx+":paid"))
		return status == http.StatusNotFound
	})
	if r := deliver("paid", "note-3", "TRANSACTION.SUCCESS", pay); r.Status != 200 || !r.Replayed {
		t.Fatalf("the payment re-sent after ttl: %d replayed=%v, want the order's memory", r.Status, r.Replayed)
	}
	refund := func(status string) string { return platformtest.WechatPayRefund(tx, "o-wx", "5030", status, 300, 990) }
	if r := deliver("refund", "note-4", "REFUND.SUCCESS", refund("SUCCESS")); r.Status != 200 || r.Replayed {
		t.Fatalf("refund: %d replayed=%v", r.Status, r.Replayed)
	}
	if r := deliver("refund:abnormal", "note-5", "REFUND.ABNORMAL", refund("ABNORMAL")); r.Status != 200 || r.Replayed {
		t.Fatalf("REFUND.ABNORMAL: %d replayed=%v, want its own event", r.Status, r.Replayed)
	}
	for label, want := range map[string]int{"paid": 1, "refund": 1, "refund:abnormal": 1} {
		if n := be.Count(label); n != want {
			t.Errorf("%s ran %d times, want %d", label, n, want)
		}
	}
}

// TestStripeEventRemembered: a Stripe event is its own business event; a
// copy resent after ttl (the dashboard's resend) is answered from memory
// for order_ttl (30 days by default), not run again. A generic route's own
// key, not in an order's format, keeps no such memory: it runs again
// after ttl, as it always has.
func TestStripeEventRemembered(t *testing.T) {
	testenv.Slow(t, "runs for seconds: waits out the answer's ttl")
	be := gatewaytest.NewBackend(t)
	const ttl = 2 * time.Second
	g := gatewaytest.StartGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret `+stripeSecret+`
			store memory
			ttl `+ttl.String()+`
		}
		reverse_proxy {backend}
	}
	handle /generic {
		idempotency {
			key {http.request.header.Idempotency-Key}
			store memory
			ttl `+ttl.String()+`
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	stripeCopy := func() gatewaytest.Delivery {
		body := platformtest.StripeEvent("evt_remembered", "payment_intent.succeeded", "pi_1", 990)
		return gatewaytest.Delivery{Path: "/stripe", Ctype: "application/json", Body: string(body),
			Header: platformtest.StripeHeader(body, stripeSecret, time.Now())}
	}
	genericCopy := gatewaytest.Delivery{Path: "/generic", Ctype: "text/plain", Body: "x", Header: http.Header{"Idempotency-Key": {"g-1"}}}
	if r := gatewaytest.Send(t, g.Base, "evt", stripeCopy()); r.Status != 200 || r.Replayed {
		t.Fatalf("event: %d replayed=%v", r.Status, r.Replayed)
	}
	gatewaytest.Send(t, g.Base, "generic", genericCopy)
	gatewaytest.Eventually(t, ttl+10*time.Second, "the records to expire", func() bool {
		s1, _ := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI("stripe:evt_remembered"))
		s2, _ := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI("generic:g-1"))
		return s1 == http.StatusNotFound && s2 == http.StatusNotFound
	})
	if r := gatewaytest.Send(t, g.Base, "evt", stripeCopy()); r.Status != 200 || !r.Replayed {
		t.Fatalf("the event resent after ttl: %d replayed=%v, want its memory", r.Status, r.Replayed)
	}
	if r := gatewaytest.Send(t, g.Base, "generic", genericCopy); r.Replayed {
		t.Fatalf("a generic key after ttl: replayed, want it run again")
	}
	if be.Count("evt") != 1 || be.Count("generic") != 2 {
		t.Fatalf("runs: event %d (want 1), generic %d (want 2)", be.Count("evt"), be.Count("generic"))
	}
	var ov adminapi.OrderView
	g.AdminJSON(t, http.MethodGet, "/idempotency/orders/"+url.PathEscape("stripe:evt_remembered"), &ov)
	if len(ov.Events) != 1 || ov.Events[0].Amount != "9.90" || ov.Events[0].Currency != "USD" ||
		time.Until(ov.ExpiresAt) < 29*24*time.Hour || time.Until(ov.ExpiresAt) > 31*24*time.Hour {
		t.Fatalf("the event's memory: %s", gatewaytest.MustJSON(ov))
	}
}

// TestAlipayFinishedOwnEvent is the README's recipe for a backend that must
// see TRADE_FINISHED apart from the payment: Caddy's map names it
// `finished` in the notify route's key, an event of the same order; the
// browser's return (`return business`) still shares `paid` with
// TRADE_SUCCESS.
func TestAlipayFinishedOwnEvent(t *testing.T) {
	a := gatewaytest.NewAlipayOrders(t)
	be := gatewaytest.AlipayOrderBackend(t)
	g := gatewaytest.StartGateway(t, `
	map {idempotency.alipay.trade_status} {alipay_event} {
		TRADE_FINISHED finished
		default        {idempotency.event}
	}
	handle /notify {
		idempotency {
			platform alipay
			public_key `+a.Pub+`
			key {idempotency.order}:{alipay_event}
			store memory
		}
		reverse_proxy {backend}
	}
	handle /return {
		idempotency {
			platform alipay
			public_key `+a.Pub+`
			return business
			store memory
			success 200
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	const trade = "2026031422001437971000000055"
	if r := gatewaytest.Send(t, g.Base, "paid", a.Return(trade)); r.Replayed {
		t.Fatal("return replayed")
	}
	if r := gatewaytest.Send(t, g.Base, "paid", a.Notify(trade, "TRADE_SUCCESS")); !r.Replayed || r.Body != "success" {
		t.Fatalf("TRADE_SUCCESS after the return: %d %q replayed=%v, want the paid event's replay", r.Status, r.Body, r.Replayed)
	}
	if r := gatewaytest.Send(t, g.Base, "finished", a.Notify(trade, "TRADE_FINISHED")); r.Replayed || r.Body != "success" {
		t.Fatalf("TRADE_FINISHED: %d %q replayed=%v, want it run as its own event", r.Status, r.Body, r.Replayed)
	}
	if r := gatewaytest.Send(t, g.Base, "finished", a.Notify(trade, "TRADE_FINISHED")); !r.Replayed {
		t.Fatal("TRADE_FINISHED's retry ran again")
	}
	if be.Count("paid") != 1 || be.Count("finished") != 1 {
		t.Fatalf("runs: paid %d, finished %d; want 1 and 1", be.Count("paid"), be.Count("finished"))
	}
	var ov adminapi.OrderView
	g.AdminJSON(t, http.MethodGet, "/idempotency/orders/"+url.PathEscape("alipay:"+gatewaytest.AlipayAppID+":"+trade), &ov)
	if len(ov.Events) != 2 || ov.Events[0].Event != "paid" || ov.Events[1].Event != "finished" {
		t.Fatalf("the order's events: %s", gatewaytest.MustJSON(ov.Events))
	}
}
