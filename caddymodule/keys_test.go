package caddymodule

import (
	"context"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// End-to-end tests of issue 8 through the real module: each hole found by
// trying the gateway as an attacker would is refused with the contract's
// status, the backend never sees the attack, and the genuine copy that
// follows is still forwarded once. Plus the key scopes on one Redis store.

// TestPayPalCRCForgeryEndToEnd: the headers of a captured genuine delivery
// re-used with another event padded to the same CRC-32 (PayPal signs only
// the CRC) are refused, through the transmission log kept in the store.
func TestPayPalCRCForgeryEndToEnd(t *testing.T) {
	k, _ := platformtest.Keys(t)
	certFile := platformtest.WriteFile(t, "paypal.pem", platformtest.Certificate(t, k, big.NewInt(1), "messageverificationcerts.paypal.com"))
	rs := redistest.Start(t)
	be := newBackend(t)
	base := startCaddy(t, `
	handle /paypal {
		idempotency {
			platform paypal
			webhook_id `+testPayPalHookID+`
			certificate `+certFile+`
			store redis `+rs.Addr()+`
		}
		reverse_proxy `+be.addr()+`
	}`)
	pp := platformtest.PayPal{Key: k, WebhookID: testPayPalHookID}
	deliver := func(order string, body []byte, h http.Header) reply {
		t.Helper()
		return send(t, base, order, delivery{path: "/paypal", ctype: "application/json", body: string(body), header: h})
	}

	// The genuine delivery, captured on its way.
	genuine := platformtest.PayPalEvent("WH-PP1", "PAYMENT.CAPTURE.COMPLETED", "CAP-PP1", "7.47")
	captured := pp.Header(t, genuine, time.Now())
	if r := deliver("pp1", genuine, captured); r.status != 200 || r.replayed {
		t.Fatalf("genuine: %d replayed=%v", r.status, r.replayed)
	}

	// The forgery: another event, order and amount, same CRC, same headers.
	template := []byte(`{"id":"WH-PP2","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAP-PP2","amount":{"currency_code":"USD","value":"9999.00"}},"pad":"` + strings.Repeat("a", 64) + `"}`)
	forged := platformtest.PayPalForgery(t, genuine, template)
	if r := deliver("pp2-forged", forged, captured); r.status != http.StatusUnauthorized {
		t.Fatalf("CRC forgery with reused headers: %d %q, want 401", r.status, r.body)
	}
	// The same forgery with headers captured long ago: outside tolerance.
	old := pp.Header(t, genuine, time.Now().Add(-time.Hour))
	if r := deliver("pp2-forged", forged, old); r.status != http.StatusUnauthorized {
		t.Fatalf("forgery with hour-old headers: %d, want 401", r.status)
	}
	if n := be.count("pp2-forged"); n != 0 {
		t.Fatalf("the forgery reached the backend %d times", n)
	}

	// The genuine event the forgery pretended to be, when PayPal sends
	// it, is forwarded once: the forgery claimed nothing.
	real2 := platformtest.PayPalEvent("WH-PP2", "PAYMENT.CAPTURE.COMPLETED", "CAP-PP2", "12.00")
	if r := deliver("pp2", real2, pp.Header(t, real2, time.Now())); r.status != 200 || r.replayed {
		t.Fatalf("genuine WH-PP2: %d replayed=%v", r.status, r.replayed)
	}
	if r := deliver("pp2", real2, pp.Header(t, real2, time.Now())); !r.replayed {
		t.Fatalf("retry of WH-PP2: %d replayed=%v, want the replay", r.status, r.replayed)
	}
	if be.count("pp1") != 1 || be.count("pp2") != 1 {
		t.Fatalf("backend ran pp1 %d, pp2 %d times, want 1 each", be.count("pp1"), be.count("pp2"))
	}
	// The transmission is remembered in the store under the route's scope.
	st := store.NewRedis(rs.Client(), store.RedisOptions{})
	if rec, err := st.Lookup(context.Background(), "paypal:paypal-transmission:"+captured.Get("Paypal-Transmission-Id")); err != nil || rec.State != store.StateAnswered {
		t.Fatalf("transmission log record: %v, %v", rec, err)
	}
}

// TestWechatPayV2SmugglingEndToEnd: a genuine signed v2 notification with a
// second out_trade_no/total_fee appended, or an element inside total_fee,
// is a 401 and never reaches the backend; the unmodified copy then goes
// through once.
func TestWechatPayV2SmugglingEndToEnd(t *testing.T) {
	be := newBackend(t)
	be.setAnswer(func(string, int, *http.Request) (int, string, time.Duration) {
		return 200, platformtest.WechatPayV2Answer("SUCCESS", "OK"), 0
	})
	base := startCaddy(t, `
	handle /v2 {
		idempotency {
			platform wechatpay_v2
			secret `+testWxV2Key+`
			mchid 10000100
			store memory
		}
		reverse_proxy `+be.addr()+`
	}`)
	v2 := platformtest.WechatPayV2{APIKey: testWxV2Key}
	signed := string(v2.Body(platformtest.WechatPayV2Payment("4200sm1", "sm1", 1)))
	attacks := map[string]string{
		"second out_trade_no and total_fee": strings.Replace(signed, "</xml>",
			"<out_trade_no>ATTACKER</out_trade_no><total_fee>100000</total_fee></xml>", 1),
		"element inside total_fee": strings.Replace(signed, "<total_fee><![CDATA[1]]></total_fee>",
			"<total_fee>1<x>00000</x></total_fee>", 1),
		"DOCTYPE with an entity": `<!DOCTYPE xml [<!ENTITY fee "100000">]>` + signed,
	}
	anotherMerchant := string(v2.Body(func() map[string]string {
		f := platformtest.WechatPayV2Payment("4200sm1", "sm1", 1)
		f["mch_id"] = "1900000109"
		return f
	}()))
	if attacks["element inside total_fee"] == signed {
		t.Fatal("test body lost its total_fee element")
	}
	for name, body := range attacks {
		r := send(t, base, "sm1-attack", delivery{path: "/v2", ctype: "text/xml", body: body})
		if r.status != http.StatusUnauthorized {
			t.Errorf("%s: %d %q, want 401", name, r.status, r.body)
		}
	}
	if r := send(t, base, "sm1-attack", delivery{path: "/v2", ctype: "text/xml", body: anotherMerchant}); r.status != http.StatusForbidden {
		t.Errorf("another merchant: %d %q, want 403", r.status, r.body)
	}
	if n := be.count("sm1-attack"); n != 0 {
		t.Fatalf("smuggled notifications reached the backend %d times", n)
	}
	for i := range 2 {
		r := send(t, base, "sm1", delivery{path: "/v2", ctype: "text/xml", body: signed})
		if r.status != 200 || r.replayed != (i == 1) {
			t.Fatalf("genuine copy %d: %d replayed=%v", i, r.status, r.replayed)
		}
	}
	if n := be.count("sm1"); n != 1 {
		t.Fatalf("backend ran %d times for the genuine notification, want 1", n)
	}
}

// TestCrossRoutePreClaimEndToEnd: an unsigned POST to a generic route with
// the id of a Standard Webhooks message, on the same Redis store, cannot
// block that message: the generic route's keys live in its own scope.
func TestCrossRoutePreClaimEndToEnd(t *testing.T) {
	rs := redistest.Start(t)
	genericBE, swBE := newBackend(t), newBackend(t)
	base := startCaddy(t, `
	handle /generic {
		idempotency {
			key {http.request.header.Idempotency-Key}
			store redis `+rs.Addr()+`
		}
		reverse_proxy `+genericBE.addr()+`
	}
	handle /sw {
		idempotency {
			platform standard_webhooks
			secret `+testSWSecret+`
			store redis `+rs.Addr()+`
		}
		reverse_proxy `+swBE.addr()+`
	}`)
	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	// The attack: unsigned, another body, the message's id as the key —
	// bare and with the scope spelled out.
	for _, key := range []string{id, "standard_webhooks:" + id} {
		r := send(t, base, "attack", delivery{path: "/generic", ctype: "application/json", body: `{"evil":true}`,
			header: http.Header{"Idempotency-Key": {key}}})
		if r.status != 200 || r.replayed {
			t.Fatalf("generic route, key %s: %d replayed=%v", key, r.status, r.replayed)
		}
	}
	if n := swBE.count("attack"); n != 0 {
		t.Fatalf("the unsigned request reached the signed route's backend %d times", n)
	}
	body := []byte(`{"type":"invoice.paid","data":{"id":"inv_1"}}`)
	for i := range 2 {
		h := platformtest.StandardWebhooksHeader(t, testSWSecret, id, time.Now(), body)
		r := send(t, base, "sw1", delivery{path: "/sw", ctype: "application/json", body: string(body), header: h})
		if r.status != 200 || r.replayed != (i == 1) {
			t.Fatalf("genuine message, copy %d: %d %q replayed=%v (422 = pre-claimed)", i, r.status, r.body, r.replayed)
		}
	}
	if n := swBE.count("sw1"); n != 1 {
		t.Fatalf("signed backend ran %d times, want 1", n)
	}
}

// TestGenericFingerprintDefault: a generic route whose key reads the body
// replays a platform retry whose other fields changed (no fingerprint by
// default); a route keyed by a header alone answers 422 to another body
// under the same key (body digest by default).
func TestGenericFingerprintDefault(t *testing.T) {
	be := newBackend(t)
	base := startCaddy(t, `
	handle /json {
		idempotency {
			key {idempotency.json.order_id}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
	handle /form {
		idempotency {
			key {idempotency.form.out_trade_no}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
	handle /header {
		idempotency {
			key {http.request.header.Idempotency-Key}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}`)
	copies := map[string][2]delivery{
		"json": {
			{path: "/json", ctype: "application/json", body: `{"order_id":"g-json","notify_time":"2026-03-14 09:00:00","amount":"9.90"}`},
			{path: "/json", ctype: "application/json", body: `{"notify_time":"2026-03-14 09:04:00","amount":"9.90","order_id":"g-json"}`},
		},
		"form": {
			{path: "/form", ctype: "application/x-www-form-urlencoded", body: "out_trade_no=g-form&notify_time=2026-03-14+09%3A00%3A00&total_amount=9.90"},
			{path: "/form", ctype: "application/x-www-form-urlencoded", body: "notify_time=2026-03-14+09%3A04%3A00&out_trade_no=g-form&total_amount=9.90"},
		},
	}
	for name, c := range copies {
		order := "g-" + name
		if r := send(t, base, order, c[0]); r.status != 200 || r.replayed {
			t.Fatalf("%s first copy: %d replayed=%v", name, r.status, r.replayed)
		}
		if r := send(t, base, order, c[1]); r.status != 200 || !r.replayed {
			t.Fatalf("%s retry with a new timestamp: %d %q replayed=%v, want the replay", name, r.status, r.body, r.replayed)
		}
		if n := be.count(order); n != 1 {
			t.Fatalf("%s: backend ran %d times, want 1", name, n)
		}
	}

	hdr := http.Header{"Idempotency-Key": {"k-header-1"}}
	first := delivery{path: "/header", ctype: "application/json", body: `{"amount":"9.90"}`, header: hdr}
	if r := send(t, base, "g-header", first); r.status != 200 || r.replayed {
		t.Fatalf("header-keyed first: %d", r.status)
	}
	changed := first
	changed.body = `{"amount":"0.01"}`
	if r := send(t, base, "g-header", changed); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("header-keyed, same key, another body: %d %q, want 422", r.status, r.body)
	}
	if r := send(t, base, "g-header", first); !r.replayed {
		t.Fatalf("header-keyed, same body again: %d replayed=%v, want the replay", r.status, r.replayed)
	}
	if n := be.count("g-header"); n != 1 {
		t.Fatalf("header-keyed: backend ran %d times, want 1", n)
	}
}

// TestScopesOnOneRedisStore: every preset and a generic route on one Redis
// store. Each preset's key lives under its platform's scope; the generic
// route, sent the same keys bare or with the scope spelled out, never
// reaches, blocks or answers them; a generic route that writes `scope
// standard_webhooks` shares that preset's keys, and only those.
func TestScopesOnOneRedisStore(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_STRIPE_SECRET", testStripeSecret)
	rs := redistest.Start(t)
	ps := presets(t)
	// The default key (without the scope) of event 0 of an order.
	keys := map[string]func(order string) string{
		"alipay":                func(o string) string { return testAlipayAppID + ":2026" + o + ":paid" },
		"wechatpay public key":  func(o string) string { return "1230000109:4200" + o + ":paid" },
		"wechatpay certificate": func(o string) string { return "1230000109:4200" + o + ":paid" },
		"wechatpay_v2":          func(o string) string { return "10000100:4200" + o + ":paid" },
		"paypal":                func(o string) string { return "WH-" + o + "-0" },
		"stripe":                func(o string) string { return "evt_" + o + "_0" },
		"standard_webhooks":     func(o string) string { return "msg_" + o + "_0" },
	}
	genericBE := newBackend(t)
	backends := make([]*backend, len(ps))
	var site strings.Builder
	site.WriteString(`
	handle /generic {
		idempotency {
			key {http.request.header.Idempotency-Key}
			store redis ` + rs.Addr() + `
		}
		reverse_proxy ` + genericBE.addr() + `
	}
	handle /joined {
		idempotency {
			key {http.request.header.Idempotency-Key}
			scope standard_webhooks
			store redis ` + rs.Addr() + `
		}
		reverse_proxy ` + genericBE.addr() + `
	}`)
	for i, p := range ps {
		backends[i] = newBackend(t)
		backends[i].setAnswer(func(string, int, *http.Request) (int, string, time.Duration) { return p.ok.status, p.ok.body, 0 })
		site.WriteString(`
	handle /hook/` + itoa(i) + ` {
		idempotency {
		` + p.route + `
			store redis ` + rs.Addr() + `
		}
		reverse_proxy ` + backends[i].addr() + `
	}`)
	}
	base := startCaddy(t, site.String())
	st := store.NewRedis(rs.Client(), store.RedisOptions{})
	ctx := context.Background()

	for i, p := range ps {
		t.Run(p.name, func(t *testing.T) {
			keyOf, ok := keys[p.name]
			if !ok {
				t.Fatalf("no expected key for preset %s", p.name)
			}
			order := "sc" + itoa(i) + "x1"
			scope := strings.Fields(p.route)[1] // "platform <name>"
			d := p.sign(t, order, 0)
			d.path = "/hook/" + itoa(i)
			if r := send(t, base, order, d); r.status != p.ok.status || r.replayed {
				t.Fatalf("genuine: %d replayed=%v", r.status, r.replayed)
			}
			full := scope + ":" + keyOf(order)
			if rec, err := st.Lookup(ctx, full); err != nil || rec.State != store.StateAnswered {
				t.Fatalf("Lookup(%s) = %v, %v: the preset's full key is <platform>:<default key>", full, rec, err)
			}
			for _, k := range []string{keyOf(order), full} {
				r := send(t, base, "generic-"+order, delivery{path: "/generic", ctype: "text/plain", body: "unsigned",
					header: http.Header{"Idempotency-Key": {k}}})
				if r.status != 200 || r.replayed || r.body != "ok generic-"+order {
					t.Fatalf("generic route with key %q: %d %q replayed=%v, want its own backend's answer", k, r.status, r.body, r.replayed)
				}
				if _, err := st.Lookup(ctx, "generic:"+k); err != nil {
					t.Fatalf("generic route's key generic:%s: %v", k, err)
				}
			}
			// The joined route shares standard_webhooks' keys only.
			r := send(t, base, "joined-"+order, delivery{path: "/joined", ctype: d.ctype, body: d.body,
				header: http.Header{"Idempotency-Key": {keyOf(order)}}})
			if scope == "standard_webhooks" {
				if !r.replayed {
					t.Fatalf("scope standard_webhooks, same id and body: %d replayed=%v, want the preset's replay", r.status, r.replayed)
				}
			} else if r.replayed || r.status != 200 {
				t.Fatalf("scope standard_webhooks, %s's key: %d replayed=%v, want forwarded", scope, r.status, r.replayed)
			}
			if n := backends[i].count(order); n != 1 {
				t.Fatalf("preset backend ran %d times, want 1", n)
			}
		})
	}
}

// TestFullKeyPlaceholder: {idempotency.key} is the full key, scope first,
// as later handlers and on_duplicate templates see it.
func TestFullKeyPlaceholder(t *testing.T) {
	be := newBackend(t)
	base := startCaddy(t, `
	handle /g {
		idempotency {
			key {http.request.header.Idempotency-Key}
			on_duplicate redirect https://shop.example/seen/{idempotency.key}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
	handle /s {
		idempotency {
			key {http.request.header.Idempotency-Key}
			scope billing
			on_duplicate redirect https://shop.example/seen/{idempotency.key}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}`)
	for path, want := range map[string]string{"/g": "generic:k-1", "/s": "billing:k-1"} {
		d := delivery{path: path, ctype: "text/plain", body: "x", header: http.Header{"Idempotency-Key": {"k-1"}}}
		if r := send(t, base, "fk"+path, d); r.status != 200 {
			t.Fatalf("%s first: %d", path, r.status)
		}
		r := send(t, base, "fk"+path, d)
		if loc := r.header.Get("Location"); r.status != http.StatusFound || loc != "https://shop.example/seen/"+want {
			t.Fatalf("%s duplicate: %d Location %q, want the full key %s", path, r.status, loc, want)
		}
	}
}

// TestPayPalTransmissionLogStoreDown: when the store that keeps PayPal's
// transmission log is down, the notification cannot be verified, and
// on_store_error does not change that (the contract's "Authentication
// never degrades"): fail_closed and pass both answer 503 with Retry-After
// and forward nothing.
func TestPayPalTransmissionLogStoreDown(t *testing.T) {
	testenv.Slow(t, "fault: Redis stopped")
	k, _ := platformtest.Keys(t)
	certFile := platformtest.WriteFile(t, "paypal.pem", platformtest.Certificate(t, k, big.NewInt(1), "messageverificationcerts.paypal.com"))
	rs := redistest.Start(t)
	be := newBackend(t)
	route := func(path, policy string) string {
		return `
	handle ` + path + ` {
		idempotency {
			platform paypal
			webhook_id ` + testPayPalHookID + `
			certificate ` + certFile + `
			store redis ` + rs.Addr() + `
			store_timeout 500ms
			on_store_error ` + policy + `
		}
		reverse_proxy ` + be.addr() + `
	}`
	}
	base := startCaddy(t, route("/closed", "fail_closed")+route("/pass", "pass"))
	rs.Stop()
	pp := platformtest.PayPal{Key: k, WebhookID: testPayPalHookID}
	body := platformtest.PayPalEvent("WH-DOWN", "PAYMENT.CAPTURE.COMPLETED", "CAP-DOWN", "1.00")
	r := send(t, base, "down-closed", delivery{path: "/closed", ctype: "application/json", body: string(body), header: pp.Header(t, body, time.Now())})
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("fail_closed: %d Retry-After=%q, want 503 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	if n := be.count("down-closed"); n != 0 {
		t.Fatalf("fail_closed forwarded %d times", n)
	}
	r = send(t, base, "down-pass", delivery{path: "/pass", ctype: "application/json", body: string(body), header: pp.Header(t, body, time.Now())})
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || be.count("down-pass") != 0 {
		t.Fatalf("pass: %d, backend ran %d times, want 503 and 0", r.status, be.count("down-pass"))
	}
}
