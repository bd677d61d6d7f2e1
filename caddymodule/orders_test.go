package caddymodule

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	adminapi "github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The orders tests: one business outcome of a payment runs the backend
// once, across channels (the browser's return, the notify, the merchant's
// own status query), status messages (TRADE_SUCCESS, TRADE_FINISHED) and
// time (copies after the answer's ttl). The backend counts its runs by
// business event (X-Order, which the gateway ignores: keys come from
// signed content).

// alipayOrderSite is Alipay's two channels with default keys (the return
// is the order's paid event: `return business`), answers kept for ttl, and the merchant's own status-query route (generic, in the
// alipay scope, keyed in the documented format).
const alipayOrderSite = `
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

// alipayOrders signs Alipay's deliveries of one order.
type alipayOrders struct {
	t      *testing.T
	signer platformtest.Alipay
	pub    string
}

func newAlipayOrders(t *testing.T) alipayOrders {
	k, _ := platformtest.Keys(t)
	return alipayOrders{t: t, signer: platformtest.Alipay{Key: k},
		pub: platformtest.WriteFile(t, "alipay_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))}
}

// notify is the async notify of trade with status and extra fields.
func (a alipayOrders) notify(trade, status string, extra ...string) delivery {
	p := platformtest.AlipayNotify(testAlipayAppID, "o-"+trade, trade, status, "88.88")
	for i := 0; i+1 < len(extra); i += 2 {
		p.Set(extra[i], extra[i+1])
	}
	return delivery{path: "/notify", ctype: "application/x-www-form-urlencoded; charset=utf-8", body: a.signer.Body(a.t, p)}
}

// ret is the browser's signed return for trade.
func (a alipayOrders) ret(trade string) delivery {
	return delivery{method: http.MethodGet, path: "/return",
		query: a.signer.Query(a.t, platformtest.AlipayReturn(testAlipayAppID, "o-"+trade, trade, "88.88"))}
}

// orderBackend answers as Alipay's legacy merchant does: "success" to the
// notify, its HTML page to the browser's return, the trade's state to the
// status query.
func orderBackend(t *testing.T) *backend {
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
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
	a := newAlipayOrders(t)
	be := orderBackend(t)
	const ttl = 2 * time.Second
	g := startGateway(t, alipayOrderSite, "{pub}", a.pub, "{store}", store, "{ttl}", ttl.String(), "{backend}", be.addr())
	const trade = "2026031422001437971000000077"
	order := "alipay:" + testAlipayAppID + ":" + trade
	query := delivery{path: "/query", ctype: "application/json", body: `{"app_id":"` + testAlipayAppID + `","trade_no":"` + trade + `"}`}

	// The browser's return comes first; the notify finds the order paid
	// and gets Alipay's "success", though the answer kept is the page.
	if r := send(t, g.base, "paid", a.ret(trade)); r.status != 200 || r.replayed || !strings.Contains(r.body, "thank you") {
		t.Fatalf("return: %d %q replayed=%v", r.status, r.body, r.replayed)
	}
	for i := range 3 {
		if r := send(t, g.base, "paid", a.notify(trade, "TRADE_SUCCESS")); r.status != 200 || r.body != "success" || !r.replayed {
			t.Fatalf("notify %d after the return: %d %q replayed=%v, want Alipay's success replayed", i, r.status, r.body, r.replayed)
		}
	}
	if r := send(t, g.base, "paid", a.ret(trade)); r.status != http.StatusFound || !strings.Contains(r.header.Get("Location"), "o-"+trade) {
		t.Fatalf("the browser's second return: %d %s, want the redirect to its order", r.status, r.header.Get("Location"))
	}
	if r := send(t, g.base, "paid", query); r.status != 200 || !r.replayed {
		t.Fatalf("status query of a paid order: %d %q replayed=%v, want a replay, not a run", r.status, r.body, r.replayed)
	}
	// TRADE_FINISHED (the refund window closed): the same paid event.
	if r := send(t, g.base, "paid", a.notify(trade, "TRADE_FINISHED")); r.status != 200 || r.body != "success" || !r.replayed {
		t.Fatalf("TRADE_FINISHED: %d %q replayed=%v", r.status, r.body, r.replayed)
	}
	// Refunds: two partial ones (with TRADE_SUCCESS), a full one (with
	// TRADE_CLOSED): each its own event, each run once.
	refunds := []delivery{
		a.notify(trade, "TRADE_SUCCESS", "out_biz_no", "RF-1", "refund_fee", "8.88", "gmt_refund", "2026-03-15 10:00:00.123"),
		a.notify(trade, "TRADE_SUCCESS", "out_biz_no", "RF-2", "refund_fee", "18.88"),
		a.notify(trade, "TRADE_CLOSED", "out_biz_no", "RF-3", "refund_fee", "88.88"),
	}
	for i, d := range refunds {
		label := "refund:RF-" + itoa(i+1)
		if r := send(t, g.base, label, d); r.status != 200 || r.body != "success" || r.replayed {
			t.Fatalf("%s: %d %q replayed=%v, want it run", label, r.status, r.body, r.replayed)
		}
		if r := send(t, g.base, label, d); !r.replayed || r.body != "success" {
			t.Fatalf("%s retry: %d %q replayed=%v", label, r.status, r.body, r.replayed)
		}
	}

	// Past the answers' ttl, the order remembers: nothing runs again.
	eventually(t, ttl+10*time.Second, "the answers' records to expire", func() bool {
		for _, ev := range []string{"paid", "refund:RF-1", "refund:RF-2", "refund:RF-3"} {
			if status, _ := g.adminDo(t, http.MethodGet, keyURI(order+":"+ev)); status != http.StatusNotFound {
				return false
			}
		}
		return true
	})
	later := []struct {
		label string
		d     delivery
	}{
		{"paid", a.notify(trade, "TRADE_SUCCESS")},
		{"paid", a.notify(trade, "TRADE_FINISHED")},
		{"paid", query},
		{"refund:RF-1", refunds[0]},
		{"refund:RF-3", refunds[2]},
	}
	for _, c := range later {
		if r := send(t, g.base, c.label, c.d); r.status != 200 || !r.replayed {
			t.Fatalf("%s after ttl: %d %q replayed=%v, want the order's memory", c.label, r.status, r.body, r.replayed)
		} else if c.d.path == "/notify" && r.body != "success" {
			t.Fatalf("%s after ttl: %q, want Alipay's success", c.label, r.body)
		}
	}
	if r := send(t, g.base, "paid", a.ret(trade)); r.status != http.StatusFound {
		t.Fatalf("the browser's return after ttl: %d, want the redirect", r.status)
	}
	for _, label := range []string{"paid", "refund:RF-1", "refund:RF-2", "refund:RF-3"} {
		if n := be.count(label); n != 1 {
			t.Errorf("%s: the backend ran %d times, want 1", label, n)
		}
	}
	if n := be.totalHits(); n != 4 {
		t.Errorf("the backend ran %d times in all, want 4 (one per business event)", n)
	}

	// The order's page: four events that ran, each with its own money
	// (refund_fee is the trade's refunded total: 8.88, 18.88, 88.88).
	var ov adminapi.OrderView
	g.adminJSON(t, http.MethodGet, "/idempotency/orders/"+url.PathEscape(order), &ov)
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
	if status, body := g.adminDo(t, http.MethodDelete, keyURI(order+":refund:RF-2")); status != 200 {
		t.Fatalf("purge of a remembered event: %d %s", status, body)
	}
	if r := send(t, g.base, "refund:RF-2", refunds[1]); r.replayed || r.body != "success" {
		t.Fatalf("refund after its purge: %d %q replayed=%v, want it run again", r.status, r.body, r.replayed)
	}
	if n := be.count("refund:RF-2"); n != 2 {
		t.Errorf("refund:RF-2 ran %d times, want 2 (once, and once after the purge)", n)
	}
}

// TestAlipayOrderStorm: the browser's return, the notify (TRADE_SUCCESS
// and TRADE_FINISHED) and a refund of one order, dozens of copies each,
// all at once through two gateway processes on one Redis: each business
// event reaches the backend exactly once.
func TestAlipayOrderStorm(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	a := newAlipayOrders(t)
	be := orderBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		delay := 100 * time.Millisecond // copies pile up while the first is at the backend
		if r.URL.Path == "/return" {
			return 200, "<html>ok</html>", delay
		}
		return 200, "success", delay
	})
	site := strings.NewReplacer("{pub}", a.pub, "{store}", "store redis "+rs.Addr(), "{ttl}", "72h", "{backend}", be.addr()).Replace(alipayOrderSite)
	gws := []*gatewayProc{startProc(t, t.TempDir(), site), startProc(t, t.TempDir(), site)}
	for _, g := range gws {
		waitServing(t, g.base)
	}
	const trades = 4
	type copyOf struct {
		label string
		d     delivery
	}
	var copies []copyOf
	for i := range trades {
		trade := "2026031422001437970000000" + itoa(10+i)
		for range 6 {
			copies = append(copies,
				copyOf{trade + ":paid", a.ret(trade)},
				copyOf{trade + ":paid", a.notify(trade, "TRADE_SUCCESS")},
				copyOf{trade + ":paid", a.notify(trade, "TRADE_FINISHED")},
				copyOf{trade + ":refund", a.notify(trade, "TRADE_SUCCESS", "out_biz_no", "RF-"+trade, "refund_fee", "1.00")})
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := map[int]int{}
	for i, c := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := send(t, gws[i%2].base, c.label, c.d)
			switch {
			case r.status == 200, r.status == http.StatusFound:
			case r.status == http.StatusConflict: // in flight past in_flight wait: the platform retries
			default:
				mu.Lock()
				bad[r.status]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("unexpected answers by status: %v", bad)
	}
	for i := range trades {
		trade := "2026031422001437970000000" + itoa(10+i)
		for _, ev := range []string{":paid", ":refund"} {
			if n := be.count(trade + ev); n != 1 {
				t.Errorf("%s%s ran %d times across two gateways, want 1", trade, ev, n)
			}
		}
	}
}

// TestWechatPayOrderSequence: WeChat Pay v3 re-sends a payment after the
// answer's ttl under a new notification id: the order remembers it paid.
// A refund is its own event; REFUND.ABNORMAL of that refund another.
func TestWechatPayOrderSequence(t *testing.T) {
	testenv.Slow(t, "runs for seconds: waits out the answer's ttl")
	k, _ := platformtest.Keys(t)
	pub := platformtest.WriteFile(t, "wx_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	wx := platformtest.WechatPay{Key: k, Serial: testWxPubKeyID, APIv3Key: testWxAPIv3Key}
	be := newBackend(t)
	const ttl = 2 * time.Second
	g := startGateway(t, `
	handle /wx {
		idempotency {
			platform wechatpay
			public_key `+pub+`
			public_key_id `+testWxPubKeyID+`
			secret `+testWxAPIv3Key+`
			store memory
			ttl `+ttl.String()+`
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())
	const tx = "4200009999"
	deliver := func(label, id, eventType, resource string) reply {
		body, hdr := wx.Notification(t, platformtest.WechatPayEvent{ID: id, EventType: eventType, Resource: resource})
		return send(t, g.base, label, delivery{path: "/wx", body: string(body), header: hdr, ctype: "application/json"})
	}
	pay := platformtest.WechatPayTransaction(tx, "o-wx", "SUCCESS", 990)
	if r := deliver("paid", "note-1", "TRANSACTION.SUCCESS", pay); r.status != 200 || r.replayed {
		t.Fatalf("payment: %d replayed=%v", r.status, r.replayed)
	}
	if r := deliver("paid", "note-2", "TRANSACTION.SUCCESS", pay); !r.replayed {
		t.Fatalf("the payment under a new notification id: %d replayed=%v, want the replay", r.status, r.replayed)
	}
	eventually(t, ttl+10*time.Second, "the answer's record to expire", func() bool {
		status, _ := g.adminDo(t, http.MethodGet, keyURI("wechatpay:1230000109:"+tx+":paid"))
		return status == http.StatusNotFound
	})
	if r := deliver("paid", "note-3", "TRANSACTION.SUCCESS", pay); r.status != 200 || !r.replayed {
		t.Fatalf("the payment re-sent after ttl: %d replayed=%v, want the order's memory", r.status, r.replayed)
	}
	refund := func(status string) string { return platformtest.WechatPayRefund(tx, "o-wx", "5030", status, 300, 990) }
	if r := deliver("refund", "note-4", "REFUND.SUCCESS", refund("SUCCESS")); r.status != 200 || r.replayed {
		t.Fatalf("refund: %d replayed=%v", r.status, r.replayed)
	}
	if r := deliver("refund:abnormal", "note-5", "REFUND.ABNORMAL", refund("ABNORMAL")); r.status != 200 || r.replayed {
		t.Fatalf("REFUND.ABNORMAL: %d replayed=%v, want its own event", r.status, r.replayed)
	}
	for label, want := range map[string]int{"paid": 1, "refund": 1, "refund:abnormal": 1} {
		if n := be.count(label); n != want {
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
	be := newBackend(t)
	const ttl = 2 * time.Second
	g := startGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret `+testStripeSecret+`
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
	}`, "{backend}", be.addr())
	stripeCopy := func() delivery {
		body := platformtest.StripeEvent("evt_remembered", "payment_intent.succeeded", "pi_1", 990)
		return delivery{path: "/stripe", ctype: "application/json", body: string(body),
			header: platformtest.StripeHeader(body, testStripeSecret, time.Now())}
	}
	genericCopy := delivery{path: "/generic", ctype: "text/plain", body: "x", header: http.Header{"Idempotency-Key": {"g-1"}}}
	if r := send(t, g.base, "evt", stripeCopy()); r.status != 200 || r.replayed {
		t.Fatalf("event: %d replayed=%v", r.status, r.replayed)
	}
	send(t, g.base, "generic", genericCopy)
	eventually(t, ttl+10*time.Second, "the records to expire", func() bool {
		s1, _ := g.adminDo(t, http.MethodGet, keyURI("stripe:evt_remembered"))
		s2, _ := g.adminDo(t, http.MethodGet, keyURI("generic:g-1"))
		return s1 == http.StatusNotFound && s2 == http.StatusNotFound
	})
	if r := send(t, g.base, "evt", stripeCopy()); r.status != 200 || !r.replayed {
		t.Fatalf("the event resent after ttl: %d replayed=%v, want its memory", r.status, r.replayed)
	}
	if r := send(t, g.base, "generic", genericCopy); r.replayed {
		t.Fatalf("a generic key after ttl: replayed, want it run again")
	}
	if be.count("evt") != 1 || be.count("generic") != 2 {
		t.Fatalf("runs: event %d (want 1), generic %d (want 2)", be.count("evt"), be.count("generic"))
	}
	var ov adminapi.OrderView
	g.adminJSON(t, http.MethodGet, "/idempotency/orders/"+url.PathEscape("stripe:evt_remembered"), &ov)
	if len(ov.Events) != 1 || ov.Events[0].Amount != "9.90" || ov.Events[0].Currency != "USD" ||
		time.Until(ov.ExpiresAt) < 29*24*time.Hour || time.Until(ov.ExpiresAt) > 31*24*time.Hour {
		t.Fatalf("the event's memory: %s", mustJSON(ov))
	}
}

// TestAlipayFinishedOwnEvent is the README's recipe for a backend that must
// see TRADE_FINISHED apart from the payment: Caddy's map names it
// `finished` in the notify route's key, an event of the same order; the
// browser's return (`return business`) still shares `paid` with
// TRADE_SUCCESS.
func TestAlipayFinishedOwnEvent(t *testing.T) {
	a := newAlipayOrders(t)
	be := orderBackend(t)
	g := startGateway(t, `
	map {idempotency.alipay.trade_status} {alipay_event} {
		TRADE_FINISHED finished
		default        {idempotency.event}
	}
	handle /notify {
		idempotency {
			platform alipay
			public_key `+a.pub+`
			key {idempotency.order}:{alipay_event}
			store memory
		}
		reverse_proxy {backend}
	}
	handle /return {
		idempotency {
			platform alipay
			public_key `+a.pub+`
			return business
			store memory
			success 200
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())
	const trade = "2026031422001437971000000055"
	if r := send(t, g.base, "paid", a.ret(trade)); r.replayed {
		t.Fatal("return replayed")
	}
	if r := send(t, g.base, "paid", a.notify(trade, "TRADE_SUCCESS")); !r.replayed || r.body != "success" {
		t.Fatalf("TRADE_SUCCESS after the return: %d %q replayed=%v, want the paid event's replay", r.status, r.body, r.replayed)
	}
	if r := send(t, g.base, "finished", a.notify(trade, "TRADE_FINISHED")); r.replayed || r.body != "success" {
		t.Fatalf("TRADE_FINISHED: %d %q replayed=%v, want it run as its own event", r.status, r.body, r.replayed)
	}
	if r := send(t, g.base, "finished", a.notify(trade, "TRADE_FINISHED")); !r.replayed {
		t.Fatal("TRADE_FINISHED's retry ran again")
	}
	if be.count("paid") != 1 || be.count("finished") != 1 {
		t.Fatalf("runs: paid %d, finished %d; want 1 and 1", be.count("paid"), be.count("finished"))
	}
	var ov adminapi.OrderView
	g.adminJSON(t, http.MethodGet, "/idempotency/orders/"+url.PathEscape("alipay:"+testAlipayAppID+":"+trade), &ov)
	if len(ov.Events) != 2 || ov.Events[0].Event != "paid" || ov.Events[1].Event != "finished" {
		t.Fatalf("the order's events: %s", mustJSON(ov.Events))
	}
}
