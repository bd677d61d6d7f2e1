package catchup_test

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
	_ "github.com/caddyserver/caddy/v2/modules/metrics" // the admin endpoint's /metrics

	_ "github.com/idemgate/idemgate/caddymodule"
	"github.com/idemgate/idemgate/caddymodule/admin"
	_ "github.com/idemgate/idemgate/caddymodule/command"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// Catch-up through the real module (internal/gatewaytest): a route's
// catch_up engine against a local stand-in of the platform's API, the
// missing list and the operator's query through the admin API and the CLI.
// `idemgate validate` and a fleet of processes sharing the engine's lease:
// caddymodule's catchup_process_test.go.

// Test secrets; they sign nothing real.
const (
	stripeSecret = "whsec_test_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"
	payPalHookID = "1JE4291016473214C"
)

// missingOf reads GET /idempotency/missing.
func missingOf(t *testing.T, g gatewaytest.Gateway, query string) admin.MissingView {
	t.Helper()
	var v admin.MissingView
	g.AdminJSON(t, http.MethodGet, "/idempotency/missing"+query, &v)
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
	be := gatewaytest.NewBackend(t)
	api := platformapi.NewStripe(key, "we_catchup", stripeSecret, "")
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	sink := gatewaytest.NewAlertSink(t)
	t.Setenv("CATCHUP_STRIPE_KEY", key)
	g := gatewaytest.StartGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret `+stripeSecret+`
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
	}`, "{backend}", be.Addr(), "{api}", srv.URL, "{alerts}", sink.URL)
	api.URL = g.Base + "/stripe"

	// Delivered before: through the gate, as Stripe did.
	obj := `{"id": "pi_%s", "object": "payment_intent", "amount": 2500, "currency": "usd", "metadata": {"order_id": "o-%s"}}`
	past := time.Now().Add(-time.Hour)
	seen := platformapi.StripeEvent("evt_seen", "payment_intent.succeeded", past, strings.ReplaceAll(obj, "%s", "seen"), "", 1)
	if r := gatewaytest.Post(t, g.Base+"/stripe", "application/json", string(seen), platformtest.StripeHeader(seen, stripeSecret, time.Now())); r.Status != 200 || be.Total.Load() != 1 {
		t.Fatalf("the first delivery: %d, backend %d", r.Status, be.Total.Load())
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
	if be.Total.Load() != 2 || api.Resends("evt_missed") != 1 || api.Resends("evt_seen") != 0 || api.Resends("evt_fresh") != 0 {
		t.Fatalf("backend ran %d times; resends: missed %d, seen %d, fresh %d", be.Total.Load(),
			api.Resends("evt_missed"), api.Resends("evt_seen"), api.Resends("evt_fresh"))
	}
	v := missingOf(t, g, "")
	m := v.Missing[0]
	if m.ID != "evt_missed" || m.Action != "resent" || m.Key != "stripe:evt_missed" || m.MerchantRef != "o-evt_missed" || m.Amount == "" {
		t.Fatalf("missing entry %+v", m)
	}
	gatewaytest.Eventually(t, 5*time.Second, "the missing alert", func() bool { return len(sink.Named("idempotency.missing")) > 0 })
	if ev := sink.Named("idempotency.missing")[0]; ev.Platform != "stripe" || ev.Details["id"] != "evt_missed" {
		t.Fatalf("alert %v", ev)
	}
	// The config shows what the Caddyfile wrote, never the credential.
	if _, cfg := g.AdminDo(t, http.MethodGet, "/config/"); strings.Contains(cfg, key) || !strings.Contains(cfg, "{env.CATCHUP_STRIPE_KEY}") {
		t.Fatalf("GET /config shows the credential, or not its placeholder:\n%s", cfg)
	}
	_, metrics := g.AdminDo(t, http.MethodGet, "/metrics")
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
	be := gatewaytest.NewBackend(t)
	api := &platformapi.PayPal{ClientID: clientID, Secret: secret, Signer: signer.PayPal{Key: k, WebhookID: payPalHookID}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Setenv("CATCHUP_PAYPAL_SECRET", secret)
	g := gatewaytest.StartGateway(t, `
	handle /paypal {
		idempotency {
			platform paypal
			webhook_id `+payPalHookID+`
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
	}`, "{backend}", be.Addr(), "{api}", srv.URL, "{cert}", certFile)
	api.URL = g.Base + "/paypal"

	event := func(id string, at time.Time) []byte {
		return []byte(fmt.Sprintf(`{"id":%q,"event_version":"1.0","create_time":%q,"resource_type":"capture","event_type":"PAYMENT.CAPTURE.COMPLETED",`+
			`"resource":{"id":"CAP-%s","invoice_id":"o-%s","amount":{"currency_code":"USD","value":"7.47"},"final_capture":true,"status":"COMPLETED"}}`,
			id, at.UTC().Format(time.RFC3339), id, id))
	}
	// Delivered before: through the gate, as PayPal did.
	past := time.Now().Add(-time.Hour)
	seen := event("WH-SEEN", past)
	pp := platformtest.PayPal{Key: k, WebhookID: payPalHookID}
	if r := gatewaytest.Post(t, g.Base+"/paypal", "application/json", string(seen), pp.Header(t, seen, time.Now())); r.Status != 200 || be.Total.Load() != 1 {
		t.Fatalf("the first delivery: %d %q, backend %d", r.Status, r.Body, be.Total.Load())
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
	if be.Total.Load() != 2 || api.Resends("WH-MISSED") != 1 || api.Resends("WH-SEEN") != 0 || api.Resends("WH-FRESH") != 0 {
		t.Fatalf("backend ran %d times; resends: missed %d, seen %d, fresh %d", be.Total.Load(),
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
	if _, cfg := g.AdminDo(t, http.MethodGet, "/config/"); strings.Contains(cfg, secret) || !strings.Contains(cfg, "{env.CATCHUP_PAYPAL_SECRET}") {
		t.Fatalf("GET /config shows the secret, or not its placeholder:\n%s", cfg)
	}
}

// queryOrder POSTs /idempotency/query for out_trade_no.
func queryOrder(t *testing.T, g gatewaytest.Gateway, platform, scope, outTradeNo string) (int, store.Missing) {
	t.Helper()
	u := "http://" + g.Admin + "/idempotency/query?platform=" + platform
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
	api := platformapi.NewAlipayAPI(gatewaytest.AlipayAppID, &appKey.PublicKey, alipayKey)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if r.URL.Path == "/orders/query" {
			return 200, "TRADE_SUCCESS", 0
		}
		return 200, "success", 0
	})
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key {pub}
			app_id `+gatewaytest.AlipayAppID+`
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
	}`, "{backend}", be.Addr(), "{api}", srv.URL, "{pub}", pubFile, "{appkey}", appKeyFile)

	const trade = "2026120422001400000000000001"
	api.Put(platformapi.AlipayTrade{OutTradeNo: "o-paid", TradeNo: trade, Status: "TRADE_SUCCESS", TotalAmount: "88.88", PaidAt: time.Now().Add(-time.Hour)})
	status, m := queryOrder(t, g, "alipay", "", "o-paid")
	wantKey := "alipay:" + gatewaytest.AlipayAppID + ":" + trade + ":paid"
	if status != 200 || m.Outcome != "recovered" || m.Action != "query_route" || m.Key != wantKey || m.Amount != "88.88" || m.MerchantRef != "o-paid" {
		t.Fatalf("query: %d %+v", status, m)
	}
	if be.Total.Load() != 1 {
		t.Fatalf("the backend ran %d times", be.Total.Load())
	}
	// Asked again: the order's paid event ran; nothing is sent.
	if status, m = queryOrder(t, g, "alipay", "", "o-paid"); status != 200 || m.Outcome != "recovered" || be.Total.Load() != 1 {
		t.Fatalf("second query: %d %+v, backend %d", status, m, be.Total.Load())
	}
	// Alipay's notify, late: answered from the order, never forwarded.
	a := platformtest.Alipay{Key: alipayKey}
	r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded; charset=utf-8",
		a.Body(t, platformtest.AlipayNotify(gatewaytest.AlipayAppID, "o-paid", trade, "TRADE_SUCCESS", "88.88")), nil)
	if r.Status != 200 || strings.TrimSpace(r.Body) != "success" || be.Total.Load() != 1 {
		t.Fatalf("the late notify: %d %q, backend %d", r.Status, r.Body, be.Total.Load())
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
		if status != 200 || m.Outcome != "unknown" || !strings.Contains(m.Reason, c.reason) || m.Key != "" || be.Total.Load() != 1 {
			t.Fatalf("%s: %d %+v, backend %d", c.reason, status, m, be.Total.Load())
		}
	}
	srv.Close()
	status, m = queryOrder(t, g, "alipay", "", "o-down")
	if status != 200 || m.Outcome != "unknown" || !strings.Contains(m.Reason, "down") || be.Total.Load() != 1 {
		t.Fatalf("API down: %d %+v, backend %d", status, m, be.Total.Load())
	}
	v := missingOf(t, g, "?scope=alipay")
	if len(v.Missing) != 5 {
		t.Fatalf("missing list: %+v", v.Missing)
	}

	// The CLI: the list as a table, and an operator's query.
	out, err := gatewaytest.RunCLI(t, io.Discard, "missing", "--address", g.Admin, "--scope", "alipay")
	if err != nil || !strings.Contains(out, "OUTCOME") || !strings.Contains(out, "recovered ("+wantKey+")") ||
		!strings.Contains(out, "response failed verification") || !strings.Contains(out, "88.88") {
		t.Fatalf("idemgate idempotency missing: %v\n%s", err, out)
	}
	// The API is down by now: the answer says so, nothing changes.
	out, err = gatewaytest.RunCLI(t, io.Discard, "query", "--address", g.Admin, "--platform", "alipay", "o-paid")
	if err != nil || !strings.Contains(out, "unknown") || !strings.Contains(out, "the platform's API is down") || be.Total.Load() != 1 {
		t.Fatalf("idemgate idempotency query: %v\n%s", err, out)
	}
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
	be := gatewaytest.NewBackend(t)
	g := gatewaytest.StartGateway(t, `
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
	}`, "{backend}", be.Addr(), "{api}", srv.URL, "{pub}", pubFile, "{key}", keyFile)

	u := "http://" + g.Admin + "/idempotency/query?platform=wechatpay"
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
	if be.Total.Load() != 0 {
		t.Fatalf("recover alert ran the backend %d times", be.Total.Load())
	}
}

// TestCatchUpReload: the engine is the config's: after a reload to the
// same config the route keeps catching up (the new config's engine), and
// after a reload to a config without catch_up the platform is asked no
// more (Cleanup stopped the old engine).
func TestCatchUpReload(t *testing.T) {
	testenv.Slow(t, "real module test")
	const key = "rk_test_51Reload0000000000wxyz"
	stand := platformapi.NewStripe(key, "we_reload", stripeSecret, "")
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
	port := gatewaytest.FreePort(t)
	config := func(block string) string {
		return fmt.Sprintf("{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n}\nhttp://127.0.0.1:%d {\n\thandle /stripe {\n\t\tidempotency {\n\t\t\tplatform stripe\n\t\t\tsecret %s\n\t\t\tstore memory\n%s\n\t\t}\n\t\trespond 200\n\t}\n}\n",
			port, stripeSecret, block)
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
