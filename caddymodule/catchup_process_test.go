package caddymodule

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// missingAlerts are the sink's idempotency.missing events.
func missingAlerts(s *alertSink) []alertEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []alertEvent
	for _, e := range s.events {
		if e.Event == "idempotency.missing" {
			out = append(out, e)
		}
	}
	return out
}

// missingOf reads GET /idempotency/missing.
func missingOf(t *testing.T, g gateway, query string) admin.MissingView {
	t.Helper()
	var v admin.MissingView
	g.of().AdminJSON(t, http.MethodGet, "/idempotency/missing"+query, &v)
	return v
}

// TestCatchUpStripeResend: a Stripe route with catch_up, against a local
// Stripe stand-in: the event Stripe holds but never delivered is resent by
// the running engine, arrives Stripe-signed through the gate and runs
// once; the event already delivered is never resent; the event inside
// grace is left alone. The missing list, the `missing` alert and
// idemgate_missing_total say so.
func TestCatchUpStripeResend(t *testing.T) {
	testenv.Slow(t, "real module test")
	const key = "rk_test_51CatchUp0000000000wxyz"
	be := newBackend(t)
	api := platformapi.NewStripe(key, "we_catchup", testStripeSecret, "")
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	sink := newAlertSink(t)
	t.Setenv("CATCHUP_STRIPE_KEY", key)
	g := startGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret `+testStripeSecret+`
			store memory
			alert {alerts} missing
			catch_up {
				api {api}
				api_key {env.CATCHUP_STRIPE_KEY}
				endpoint we_catchup
				every 200ms
				grace 30s
				recover resend
			}
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr(), "{api}", srv.URL, "{alerts}", sink.url)
	api.URL = g.base + "/stripe"

	// Delivered before: through the gate, as Stripe did.
	obj := `{"id": "pi_%s", "object": "payment_intent", "amount": 2500, "currency": "usd", "metadata": {"order_id": "o-%s"}}`
	past := time.Now().Add(-time.Hour)
	seen := platformapi.StripeEvent("evt_seen", "payment_intent.succeeded", past, strings.ReplaceAll(obj, "%s", "seen"), "", 1)
	if r := gatewaytest.Post(t, g.base+"/stripe", "application/json", string(seen), platformtest.StripeHeader(seen, testStripeSecret, time.Now())); r.Status != 200 || be.totalHits() != 1 {
		t.Fatalf("the first delivery: %d, backend %d", r.Status, be.totalHits())
	}
	if err := api.Add(seen); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []struct {
		id string
		at time.Time
	}{{"evt_missed", past}, {"evt_fresh", time.Now()}} {
		if err := api.Add(platformapi.StripeEvent(ev.id, "payment_intent.succeeded", ev.at, strings.ReplaceAll(obj, "%s", ev.id), "", 1)); err != nil {
			t.Fatal(err)
		}
	}
	gatewaytest.Eventually(t, 10*time.Second, "the missing event resent and answered", func() bool {
		return api.LastStatus("evt_missed") == 200
	})
	gatewaytest.Eventually(t, 10*time.Second, "the missing entry recovered", func() bool {
		v := missingOf(t, g, "?scope=stripe")
		return len(v.Missing) == 1 && v.Missing[0].Outcome == "recovered"
	})
	time.Sleep(time.Second) // a few more passes
	if be.totalHits() != 2 || api.Resends("evt_missed") != 1 || api.Resends("evt_seen") != 0 || api.Resends("evt_fresh") != 0 {
		t.Fatalf("backend ran %d times; resends: missed %d, seen %d, fresh %d", be.totalHits(),
			api.Resends("evt_missed"), api.Resends("evt_seen"), api.Resends("evt_fresh"))
	}
	v := missingOf(t, g, "")
	m := v.Missing[0]
	if m.ID != "evt_missed" || m.Action != "resent" || m.Key != "stripe:evt_missed" || m.MerchantRef != "o-evt_missed" || m.Amount == "" {
		t.Fatalf("missing entry %+v", m)
	}
	gatewaytest.Eventually(t, 5*time.Second, "the missing alert", func() bool { return len(missingAlerts(sink)) > 0 })
	if ev := missingAlerts(sink)[0]; ev.Platform != "stripe" || ev.Details["id"] != "evt_missed" {
		t.Fatalf("alert %v", ev)
	}
	// The config shows what the Caddyfile wrote, never the credential.
	if _, cfg := g.adminDo(t, http.MethodGet, "/config/"); strings.Contains(cfg, key) || !strings.Contains(cfg, "{env.CATCHUP_STRIPE_KEY}") {
		t.Fatalf("GET /config shows the credential, or not its placeholder:\n%s", cfg)
	}
	_, metrics := g.adminDo(t, http.MethodGet, "/metrics")
	if !strings.Contains(metrics, `idemgate_missing_total{`) || !strings.Contains(metrics, `outcome="recovered"`) {
		t.Fatalf("no idemgate_missing_total recovered in /metrics")
	}
}

// TestCatchUpPayPalResend: a PayPal route with catch_up, against a local
// PayPal stand-in (OAuth2 client credentials, the webhook events list,
// …/resend): the event PayPal holds but never delivered is resent by the
// running engine, arrives PayPal-signed (verified with the pinned
// certificate) through the gate and runs once; the event already
// delivered is never resent; the event inside grace is left alone.
func TestCatchUpPayPalResend(t *testing.T) {
	testenv.Slow(t, "real module test, waits out catch_up passes")
	const clientID, secret = "AXcatchup-client", "EHcatchup-secret"
	k, _ := platformtest.Keys(t)
	certFile := platformtest.WriteFile(t, "paypal.pem", platformtest.Certificate(t, k, big.NewInt(1), "messageverificationcerts.paypal.com"))
	be := newBackend(t)
	api := &platformapi.PayPal{ClientID: clientID, Secret: secret, Signer: signer.PayPal{Key: k, WebhookID: testPayPalHookID}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Setenv("CATCHUP_PAYPAL_SECRET", secret)
	g := startGateway(t, `
	handle /paypal {
		idempotency {
			platform paypal
			webhook_id `+testPayPalHookID+`
			certificate {cert}
			store memory
			catch_up {
				api {api}
				client_id `+clientID+`
				secret {env.CATCHUP_PAYPAL_SECRET}
				every 200ms
				grace 30s
				recover resend
			}
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr(), "{api}", srv.URL, "{cert}", certFile)
	api.URL = g.base + "/paypal"

	event := func(id string, at time.Time) []byte {
		return []byte(fmt.Sprintf(`{"id":%q,"event_version":"1.0","create_time":%q,"resource_type":"capture","event_type":"PAYMENT.CAPTURE.COMPLETED",`+
			`"resource":{"id":"CAP-%s","invoice_id":"o-%s","amount":{"currency_code":"USD","value":"7.47"},"final_capture":true,"status":"COMPLETED"}}`,
			id, at.UTC().Format(time.RFC3339), id, id))
	}
	// Delivered before: through the gate, as PayPal did.
	past := time.Now().Add(-time.Hour)
	seen := event("WH-SEEN", past)
	pp := platformtest.PayPal{Key: k, WebhookID: testPayPalHookID}
	if r := gatewaytest.Post(t, g.base+"/paypal", "application/json", string(seen), pp.Header(t, seen, time.Now())); r.Status != 200 || be.totalHits() != 1 {
		t.Fatalf("the first delivery: %d %q, backend %d", r.Status, r.Body, be.totalHits())
	}
	for _, ev := range [][]byte{seen, event("WH-MISSED", past), event("WH-FRESH", time.Now())} {
		if err := api.Add(ev); err != nil {
			t.Fatal(err)
		}
	}
	gatewaytest.Eventually(t, 10*time.Second, "the missing event resent and answered", func() bool {
		return api.LastStatus("WH-MISSED") == 200
	})
	gatewaytest.Eventually(t, 10*time.Second, "the missing entry recovered", func() bool {
		v := missingOf(t, g, "?scope=paypal")
		return len(v.Missing) == 1 && v.Missing[0].Outcome == "recovered"
	})
	time.Sleep(time.Second) // a few more passes
	if be.totalHits() != 2 || api.Resends("WH-MISSED") != 1 || api.Resends("WH-SEEN") != 0 || api.Resends("WH-FRESH") != 0 {
		t.Fatalf("backend ran %d times; resends: missed %d, seen %d, fresh %d", be.totalHits(),
			api.Resends("WH-MISSED"), api.Resends("WH-SEEN"), api.Resends("WH-FRESH"))
	}
	if api.Tokens() < 1 {
		t.Fatal("no access token was asked for")
	}
	m := missingOf(t, g, "").Missing[0]
	if m.Platform != "paypal" || m.ID != "WH-MISSED" || m.Action != "resent" || m.Key != "paypal:WH-MISSED" || m.MerchantRef != "o-WH-MISSED" || m.Amount == "" {
		t.Fatalf("missing entry %+v", m)
	}
	// The config shows what the Caddyfile wrote, never the secret.
	if _, cfg := g.adminDo(t, http.MethodGet, "/config/"); strings.Contains(cfg, secret) || !strings.Contains(cfg, "{env.CATCHUP_PAYPAL_SECRET}") {
		t.Fatalf("GET /config shows the secret, or not its placeholder:\n%s", cfg)
	}
}

// queryOrder POSTs /idempotency/query for out_trade_no.
func queryOrder(t *testing.T, g gateway, platform, scope, outTradeNo string) (int, store.Missing) {
	t.Helper()
	u := "http://" + g.admin + "/idempotency/query?platform=" + platform
	if scope != "" {
		u += "&scope=" + scope
	}
	resp, err := http.Post(u, "application/json", strings.NewReader(gatewaytest.MustJSON(map[string]string{"out_trade_no": outTradeNo})))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m store.Missing
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("query answer %s: %v", b, err)
		}
	} else {
		m.Reason = string(b)
	}
	return resp.StatusCode, m
}

// TestCatchUpAlipayQueryRoute: an Alipay route with catch_up and recover
// query_route /orders/query, the merchant's status-query route written as
// docs/platforms.md's recipe has it, against a local Alipay stand-in
// (alipay.trade.query, signed requests and answers). A payment whose
// notify never came, asked about by the operator, is recovered through
// the query route: the backend runs it once, and Alipay's late notify is
// answered from the order, never forwarded. A bad answer signature, a
// NOT_EXIST, a refused key and an API that is down each change nothing,
// and the missing entry says why.
func TestCatchUpAlipayQueryRoute(t *testing.T) {
	testenv.Slow(t, "real module test")
	alipayKey, appKey := platformtest.Keys(t)
	der, err := x509.MarshalPKCS8PrivateKey(appKey)
	if err != nil {
		t.Fatal(err)
	}
	appKeyFile := platformtest.WriteFile(t, "app_private_key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	pubFile := platformtest.WriteFile(t, "alipay_public_key.pem", platformtest.PublicKeyPEM(t, &alipayKey.PublicKey))
	api := platformapi.NewAlipayAPI(testAlipayAppID, &appKey.PublicKey, alipayKey)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if r.URL.Path == "/orders/query" {
			return 200, "TRADE_SUCCESS", 0
		}
		return 200, "success", 0
	})
	g := startGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key {pub}
			app_id `+testAlipayAppID+`
			store memory
			catch_up {
				api {api}/gateway.do
				app_private_key {appkey}
				every 200ms
				grace 30s
				recover query_route /orders/query
			}
		}
		reverse_proxy {backend}
	}
	handle /orders/query {
		idempotency {
			scope alipay
			key {idempotency.json.app_id}:{idempotency.json.trade_no}:paid
			success 200 body TRADE_SUCCESS
			on_duplicate respond 200 TRADE_SUCCESS
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr(), "{api}", srv.URL, "{pub}", pubFile, "{appkey}", appKeyFile)

	const trade = "2026120422001400000000000001"
	api.Put(platformapi.AlipayTrade{OutTradeNo: "o-paid", TradeNo: trade, Status: "TRADE_SUCCESS", TotalAmount: "88.88", PaidAt: time.Now().Add(-time.Hour)})
	status, m := queryOrder(t, g, "alipay", "", "o-paid")
	wantKey := "alipay:" + testAlipayAppID + ":" + trade + ":paid"
	if status != 200 || m.Outcome != "recovered" || m.Action != "query_route" || m.Key != wantKey || m.Amount != "88.88" || m.MerchantRef != "o-paid" {
		t.Fatalf("query: %d %+v", status, m)
	}
	if be.totalHits() != 1 {
		t.Fatalf("the backend ran %d times", be.totalHits())
	}
	// Asked again: the order's paid event ran; nothing is sent.
	if status, m = queryOrder(t, g, "alipay", "", "o-paid"); status != 200 || m.Outcome != "recovered" || be.totalHits() != 1 {
		t.Fatalf("second query: %d %+v, backend %d", status, m, be.totalHits())
	}
	// Alipay's notify, late: answered from the order, never forwarded.
	a := platformtest.Alipay{Key: alipayKey}
	r := gatewaytest.Post(t, g.base+"/notify", "application/x-www-form-urlencoded; charset=utf-8",
		a.Body(t, platformtest.AlipayNotify(testAlipayAppID, "o-paid", trade, "TRADE_SUCCESS", "88.88")), nil)
	if r.Status != 200 || strings.TrimSpace(r.Body) != "success" || be.totalHits() != 1 {
		t.Fatalf("the late notify: %d %q, backend %d", r.Status, r.Body, be.totalHits())
	}

	// What changes nothing, and says why.
	for i, c := range []struct {
		set    func(bool)
		reason string
	}{
		{api.SignBadly, "response failed verification"},
		{api.AnswerNotExist, "NOT_EXIST"},
		{api.RefuseKey, "refused"},
	} {
		out := "o-bad-" + string(rune('a'+i))
		api.Put(platformapi.AlipayTrade{OutTradeNo: out, TradeNo: trade[:len(trade)-1] + string(rune('2'+i)), Status: "TRADE_SUCCESS", TotalAmount: "1.00", PaidAt: time.Now()})
		c.set(true)
		status, m := queryOrder(t, g, "alipay", "", out)
		c.set(false)
		if status != 200 || m.Outcome != "unknown" || !strings.Contains(m.Reason, c.reason) || m.Key != "" || be.totalHits() != 1 {
			t.Fatalf("%s: %d %+v, backend %d", c.reason, status, m, be.totalHits())
		}
	}
	srv.Close()
	status, m = queryOrder(t, g, "alipay", "", "o-down")
	if status != 200 || m.Outcome != "unknown" || !strings.Contains(m.Reason, "down") || be.totalHits() != 1 {
		t.Fatalf("API down: %d %+v, backend %d", status, m, be.totalHits())
	}
	v := missingOf(t, g, "?scope=alipay")
	if len(v.Missing) != 5 {
		t.Fatalf("missing list: %+v", v.Missing)
	}

	// The CLI: the list as a table, and an operator's query.
	out, err := runCLI(t, "missing", "--address", g.admin, "--scope", "alipay")
	if err != nil || !strings.Contains(out, "OUTCOME") || !strings.Contains(out, "recovered ("+wantKey+")") ||
		!strings.Contains(out, "response failed verification") || !strings.Contains(out, "88.88") {
		t.Fatalf("idemgate idempotency missing: %v\n%s", err, out)
	}
	// The API is down by now: the answer says so, nothing changes.
	out, err = runCLI(t, "query", "--address", g.admin, "--platform", "alipay", "o-paid")
	if err != nil || !strings.Contains(out, "unknown") || !strings.Contains(out, "the platform's API is down") || be.totalHits() != 1 {
		t.Fatalf("idemgate idempotency query: %v\n%s", err, out)
	}
}

// TestCatchUpValidate: `idemgate validate` refuses recover resend on a
// platform with no resend API, a credential whose {env.*} is unset, an
// unknown subdirective and an Alipay route that pins no single app_id —
// and a good block validates without one call to the platform's API
// (validate starts no engine).
func TestCatchUpValidate(t *testing.T) {
	testenv.Slow(t, "process test (go test -short)")
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	t.Cleanup(api.Close)
	_, appKey := platformtest.Keys(t)
	der, _ := x509.MarshalPKCS8PrivateKey(appKey)
	keyFile := platformtest.WriteFile(t, "app.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	pubFile := platformtest.WriteFile(t, "pub.pem", platformtest.PublicKeyPEM(t, &appKey.PublicKey))
	t.Setenv("CATCHUP_VALIDATE_KEY", "rk_test_validate")
	site := func(body string) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\thandle /n {\n\t\tidempotency {\n%s\n\t\t\tstore memory\n\t\t}\n\t\trespond 200\n\t}\n}\n", freePort(t), body)
	}
	for _, c := range []struct{ name, body, want string }{
		{"resend on alipay", "platform alipay\npublic_key " + pubFile + "\napp_id 2016091800538339\ncatch_up {\napp_private_key " + keyFile + "\nrecover resend\n}", "alipay has no resend API"},
		{"unset env", "platform stripe\nsecret " + testStripeSecret + "\ncatch_up {\napi_key {env.CATCHUP_NEVER_SET}\nendpoint we_x\nrecover resend\n}", "CATCHUP_NEVER_SET is not set"},
		{"unknown", "platform stripe\nsecret " + testStripeSecret + "\ncatch_up {\napi_key k\nfrobnicate yes\nrecover resend\n}", `unknown subdirective`},
		{"two app_ids", "platform alipay\npublic_key " + pubFile + "\napp_id 2016091800538339 2016091800538340\ncatch_up {\napp_private_key " + keyFile + "\nrecover alert\n}", "exactly one app_id"},
	} {
		out, err := validateCaddyfile(t, site(c.body))
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: validate %v, want %q in:\n%s", c.name, err, c.want, out)
		}
	}
	out, err := validateCaddyfile(t, site("platform stripe\nsecret "+testStripeSecret+"\ncatch_up {\napi "+api.URL+"\napi_key {env.CATCHUP_VALIDATE_KEY}\nendpoint we_x\nevery 10ms\ngrace 1ms\nrecover resend\n}"))
	if err != nil {
		t.Fatalf("a good block: %v\n%s", err, out)
	}
	if strings.Contains(out, "rk_test_validate") {
		t.Fatalf("the credential is in validate's output:\n%s", out)
	}
	time.Sleep(100 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("validate called the platform's API %d times", n)
	}
}

// TestCatchUpFleetAsksOnce: two gateway processes on one real Redis, each
// with the same catch_up block: the lease in the store lets one of them
// ask Stripe per period, so the stand-in is listed about once a period,
// not twice.
func TestCatchUpFleetAsksOnce(t *testing.T) {
	testenv.Slow(t, "process test (go test -short)")
	rd := redistest.Start(t)
	const key = "rk_test_51Fleet00000000000wxyz"
	stand := platformapi.NewStripe(key, "we_fleet", testStripeSecret, "")
	var lists atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			lists.Add(1)
		}
		stand.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	site := `
	handle /stripe {
		idempotency {
			platform stripe
			secret ` + testStripeSecret + `
			store redis ` + rd.Addr() + `
			catch_up {
				api ` + srv.URL + `
				api_key ` + key + `
				endpoint we_fleet
				every 1s
				grace 30s
				recover resend
			}
		}
		respond 200
	}`
	startProc(t, t.TempDir(), site)
	startProc(t, t.TempDir(), site)
	start := time.Now()
	time.Sleep(4 * time.Second)
	periods := int64(time.Since(start)/time.Second) + 1
	if n := lists.Load(); n < 2 || n > periods+1 {
		t.Fatalf("two instances listed Stripe's events %d times in %d periods: want about one a period", n, periods)
	}
	t.Logf("two instances listed Stripe's events %d times in %d periods", lists.Load(), periods)
}

// TestCatchUpWechatPayPartner: a WeChat Pay service provider's route
// (mchid = its sp_mchid) with catch_up, against a local WeChat Pay
// stand-in: an operator's query of a sub-merchant's order goes to the
// partner URL with sp_mchid and sub_mchid, signed with the merchant key,
// and its verified answer (paid) is kept as alert only (recover alert).
func TestCatchUpWechatPayPartner(t *testing.T) {
	testenv.Slow(t, "real module test")
	const (
		spMchID = "1230000109"
		subMch  = "1900000109"
		serial  = "3775B6A45ACD588826D15E583A95F5DD2C6D9B07"
		pubID   = "PUB_KEY_ID_0112300001092026031400000000000001"
	)
	platformKey, mchKey := platformtest.Keys(t)
	api := platformapi.NewWechatPayAPI(platformKey, pubID)
	api.AddMerchant(spMchID, serial, &mchKey.PublicKey)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	api.Put(platformapi.WechatPayOrder{SpMchID: spMchID, SubMchID: subMch, OutTradeNo: "O-SP-1", TransactionID: "4200000001202612040000000001",
		TradeState: "SUCCESS", Total: 2500, SuccessTime: time.Now().Add(-time.Hour)})
	keyFile := platformtest.WriteFile(t, "apiclient_key.pem", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(mchKey)}))
	pubFile := platformtest.WriteFile(t, "pub_key.pem", platformtest.PublicKeyPEM(t, &platformKey.PublicKey))
	be := newBackend(t)
	g := startGateway(t, `
	handle /wx {
		idempotency {
			platform wechatpay
			secret 0123456789abcdef0123456789abcdef
			public_key {pub}
			public_key_id `+pubID+`
			mchid `+spMchID+`
			store memory
			catch_up {
				api {api}
				merchant_private_key {key}
				merchant_serial `+serial+`
				recover alert
			}
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr(), "{api}", srv.URL, "{pub}", pubFile, "{key}", keyFile)

	u := "http://" + g.admin + "/idempotency/query?platform=wechatpay"
	resp, err := http.Post(u, "application/json", strings.NewReader(`{"out_trade_no": "O-SP-1", "sub_mchid": "`+subMch+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m store.Missing
	if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || m.Outcome != "alert only" || m.Amount != "25.00" ||
		m.Order != "wechatpay:"+subMch+":4200000001202612040000000001" {
		t.Fatalf("query: %d %s", resp.StatusCode, b)
	}
	want := "/v3/pay/partner/transactions/out-trade-no/O-SP-1?sp_mchid=" + spMchID + "&sub_mchid=" + subMch
	if paths := api.Paths(); len(paths) != 1 || paths[0] != want {
		t.Fatalf("the stand-in was asked %q, want %q", paths, want)
	}
	if be.totalHits() != 0 {
		t.Fatalf("recover alert ran the backend %d times", be.totalHits())
	}
}

// TestCatchUpReload: the engine is the config's: after a reload to the
// same config the route keeps catching up (the new config's engine), and
// after a reload to a config without catch_up the platform is asked no
// more (Cleanup stopped the old engine).
func TestCatchUpReload(t *testing.T) {
	testenv.Slow(t, "real module test")
	const key = "rk_test_51Reload0000000000wxyz"
	stand := platformapi.NewStripe(key, "we_reload", testStripeSecret, "")
	var lists atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			lists.Add(1)
		}
		stand.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	catchUp := `
			catch_up {
				api ` + srv.URL + `
				api_key ` + key + `
				endpoint we_reload
				every 100ms
				grace 30s
				recover resend
			}`
	port := freePort(t)
	config := func(block string) string {
		return fmt.Sprintf("{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n}\nhttp://127.0.0.1:%d {\n\thandle /stripe {\n\t\tidempotency {\n\t\t\tplatform stripe\n\t\t\tsecret %s\n\t\t\tstore memory\n%s\n\t\t}\n\t\trespond 200\n\t}\n}\n",
			port, testStripeSecret, block)
	}
	gatewaytest.LoadCaddyfile(t, config(catchUp))
	t.Cleanup(func() { caddy.Stop() })
	gatewaytest.Eventually(t, 5*time.Second, "the engine lists", func() bool { return lists.Load() >= 3 })
	gatewaytest.LoadCaddyfile(t, config(catchUp))
	n := lists.Load()
	gatewaytest.Eventually(t, 5*time.Second, "the reloaded config's engine lists", func() bool { return lists.Load() >= n+3 })
	gatewaytest.LoadCaddyfile(t, config(""))
	time.Sleep(300 * time.Millisecond) // a pass under way ends
	n = lists.Load()
	time.Sleep(time.Second)
	if m := lists.Load(); m != n {
		t.Fatalf("after a reload without catch_up the platform was listed %d more times", m-n)
	}
}
