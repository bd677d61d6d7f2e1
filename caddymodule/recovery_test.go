package caddymodule

import (
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/platforms"
)

// alertSink collects the alerts posted to it (gatewaytest.AlertSink).
type alertSink struct {
	*gatewaytest.AlertSink
	url string
}

func newAlertSink(t *testing.T) *alertSink {
	s := gatewaytest.NewAlertSink(t)
	return &alertSink{AlertSink: s, url: s.URL}
}

func (s *alertSink) count(event, key string) int { return s.Count(event, key) }

// TestRetryBudgetAlipay: a failed Alipay notification carries the
// platform's retry budget — after one copy, 7 retries left, the next 4
// minutes after it, the last at the schedule's end; after two copies, 6
// left, the next 10 minutes after the second. When the last expected retry
// has come and gone (the clock moved past it), idempotency.last_retry is
// alerted once, while the key still reads failed, not dead.
func TestRetryBudgetAlipay(t *testing.T) {
	a := newAlipayOrders(t)
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) { return 200, "fail", 0 })
	sink := newAlertSink(t)
	g := startGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+a.pub+`
			store memory
			alert `+sink.url+`
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())
	rewatch(t, onlyHandler(t), withRetryScanEvery(20*time.Millisecond))
	const key = "alipay:" + testAlipayAppID + ":t-budget:paid"
	d := a.notify("t-budget", "TRADE_SUCCESS")
	sched := platforms.Lookup("alipay").Schedule

	post(t, g.base+"/notify", d.ctype, d.body, nil)
	var rec admin.RecordView
	g.adminJSON(t, http.MethodGet, keyURI(key), &rec)
	pr := rec.PlatformRetries
	if rec.State != "failed" || pr == nil || pr.Left != 7 || pr.Next == nil ||
		!pr.Next.Equal(rec.LastSeen.Add(4*time.Minute)) || !pr.Last.Equal(rec.FirstSeen.Add(sched.Total())) {
		t.Fatalf("after one copy: state %s, platform_retries %+v (first %s), want 7 left, next +4m, last +%s", rec.State, pr, rec.FirstSeen, sched.Total())
	}
	time.Sleep(5 * time.Millisecond)
	post(t, g.base+"/notify", d.ctype, d.body, nil)
	g.adminJSON(t, http.MethodGet, keyURI(key), &rec)
	pr = rec.PlatformRetries
	if rec.Copies != 2 || pr == nil || pr.Left != 6 || pr.Next == nil || !pr.Next.Equal(rec.LastSeen.Add(10*time.Minute)) ||
		!pr.Last.Equal(rec.LastSeen.Add(sched.Total()-4*time.Minute)) {
		t.Fatalf("after two copies: %+v (last seen %s), want 6 left, next +10m", pr, rec.LastSeen)
	}
	if n := sink.count("idempotency.last_retry", key); n != 0 {
		t.Fatalf("last_retry sent %d times with 6 retries left", n)
	}

	// Past the last expected retry, short of the window.
	t.Cleanup(runningApp(t).SetClock(func() time.Time { return time.Now().Add(sched.Total() + 2*time.Minute) }))
	eventually(t, 5*time.Second, "idempotency.last_retry alerted", func() bool { return sink.count("idempotency.last_retry", key) > 0 })
	time.Sleep(200 * time.Millisecond) // ten scans
	if n := sink.count("idempotency.last_retry", key); n != 1 {
		t.Errorf("last_retry alerted %d times, want once", n)
	}
	g.adminJSON(t, http.MethodGet, keyURI(key), &rec)
	if rec.State != "failed" || rec.PlatformRetries == nil || rec.PlatformRetries.Left != 0 {
		t.Errorf("past the last retry: state %s, %+v; want failed (not yet dead), none left", rec.State, rec.PlatformRetries)
	}
	if n := be.count("o-t-budget"); n != 2 {
		t.Errorf("backend ran %d times, want 2", n)
	}
}

// TestSummaryTwoCurrencies: the money at stake, per currency, in exact
// decimals read from the signed content: two failed Alipay payments (CNY
// 88.88 + 31.12), a failed Stripe charge (USD 9.90), a Stripe event kept
// only in part (counted without amount). Past Alipay's retry window its
// keys read dead and move to dead's amounts.
func TestSummaryTwoCurrencies(t *testing.T) {
	const secret = "whsec_summary"
	a := newAlipayOrders(t)
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) { return 503, "down", 0 })
	g := startGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+a.pub+`
			store memory
		}
		reverse_proxy {backend}
	}
	handle /stripe {
		idempotency {
			platform stripe
			secret `+secret+`
			store memory
			journal_body 300
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())
	d1 := a.notify("t-s1", "TRADE_SUCCESS")
	p := platformtest.AlipayNotify(testAlipayAppID, "o-t-s2", "t-s2", "TRADE_SUCCESS", "31.12")
	d2 := delivery{path: "/notify", ctype: "application/x-www-form-urlencoded; charset=utf-8", body: a.signer.Body(t, p)}
	for _, d := range []delivery{d1, d2} {
		if r := post(t, g.base+"/notify", d.ctype, d.body, nil); r.status != 503 {
			t.Fatalf("alipay copy: %+v", r)
		}
	}
	small := []byte(`{"id":"evt_s1","object":"event","type":"payment_intent.payment_failed","data":{"object":{"id":"pi_1","amount":990,"currency":"usd"}}}`)
	big := platformtest.StripeEvent("evt_s2", "payment_intent.succeeded", "pi_2", 12345) // longer than journal_body
	for _, b := range [][]byte{small, big} {
		if r := post(t, g.base+"/stripe", "application/json", string(b), platformtest.StripeHeader(b, secret, time.Now())); r.status != 503 {
			t.Fatalf("stripe copy: %+v", r)
		}
	}
	var s admin.SummaryView
	g.adminJSON(t, http.MethodGet, "/idempotency/summary", &s)
	if s.Failed.Count != 4 || s.Failed.Amounts["CNY"] != "120.00" || s.Failed.Amounts["USD"] != "9.90" || len(s.Failed.Amounts) != 2 ||
		s.Failed.WithoutAmount != 1 || s.Dead.Count != 0 || s.InFlight.Count != 0 {
		t.Fatalf("summary: %+v", s)
	}
	var rec admin.RecordView
	g.adminJSON(t, http.MethodGet, keyURI("stripe:evt_s1"), &rec)
	if rec.Amount == nil || rec.Amount.Value != "9.90" || rec.Amount.Currency != "USD" {
		t.Fatalf("one key's amount: %+v", rec.Amount)
	}
	s = admin.SummaryView{}
	g.adminJSON(t, http.MethodGet, "/idempotency/summary?scope=stripe", &s)
	if s.Failed.Count != 2 || s.Failed.Amounts["USD"] != "9.90" || len(s.Failed.Amounts) != 1 {
		t.Fatalf("summary of scope stripe: %+v", s)
	}
	t.Cleanup(runningApp(t).SetClock(func() time.Time { return time.Now().Add(25*time.Hour + time.Minute) }))
	s = admin.SummaryView{}
	g.adminJSON(t, http.MethodGet, "/idempotency/summary", &s)
	if s.Dead.Count != 2 || s.Dead.Amounts["CNY"] != "120.00" || s.Failed.Count != 2 || s.Failed.Amounts["CNY"] != "" {
		t.Fatalf("summary past Alipay's window: %+v", s)
	}
}

// TestAsyncStatesBackendRefusing: deliver async to a backend that refuses
// connections. The acked notification reads retrying with its next
// attempt (never in_flight), every attempt keeps "connection refused" as
// its error, and once give_up has passed the key reads dead, async: the
// platform has its ack. A redelivery of a queued key is refused.
func TestAsyncStatesBackendRefusing(t *testing.T) {
	testenv.Slow(t, "runs for seconds: retries until give_up")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	g := startGateway(t, `
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope demo
			store memory
			lock_ttl 1s
			deliver async {
				to http://`+closed+`
				ack 200 success
				retry 200ms 400ms
				give_up 2s
			}
		}
	}`)
	if r := post(t, g.base+"/notify", "application/x-www-form-urlencoded", "out_trade_no=r-1", nil); r.status != 200 || r.body != "success" {
		t.Fatalf("ack: %+v", r)
	}
	var rec admin.RecordView
	eventually(t, 5*time.Second, "the key retrying", func() bool {
		g.adminJSON(t, http.MethodGet, keyURI("demo:r-1"), &rec)
		return rec.State == "retrying" && rec.NextAttempt != nil
	})
	if len(rec.Attempts) == 0 || rec.Attempts[0].Error != "connection refused" || rec.Attempts[0].Outcome != "unreachable" || !rec.Async {
		t.Fatalf("retrying record: %+v", rec)
	}
	if status, body := g.adminDo(t, http.MethodPost, keyURI("demo:r-1")+"/redeliver"); status != http.StatusConflict || !strings.Contains(body, "delivers it itself") {
		t.Fatalf("redelivery of a queued key: %d %s, want 409", status, body)
	}
	// The CLI's queue table, for people.
	if out, err := runCLI(t, "deliveries", "--address", g.admin); err != nil ||
		!regexp.MustCompile(`(?m)^SCOPE +PLATFORM +DEPTH +LEASED +OLDEST +PAUSED +TO\ndemo +generic +1 +[01] +\S+ +no +http://`).MatchString(out) {
		t.Errorf("deliveries as a table: %v\n%s", err, out)
	}
	var page admin.PageView
	g.adminJSON(t, http.MethodGet, "/idempotency/keys?state=in_flight", &page)
	if len(page.Keys) != 1 || page.Keys[0].State == "in_flight" {
		t.Fatalf("in-flight listing: %+v, want the key by its async state", page.Keys)
	}
	eventually(t, 10*time.Second, "the key dead after give_up", func() bool {
		g.adminJSON(t, http.MethodGet, keyURI("demo:r-1"), &rec)
		return rec.State == "dead"
	})
	for i, a := range rec.Attempts {
		if a.Error != "connection refused" {
			t.Errorf("attempt %d: error %q, want connection refused", i, a.Error)
		}
	}
	if !rec.Async || len(rec.Attempts) < 2 {
		t.Fatalf("dead record: %+v", rec)
	}
}

// TestRedeliverProbeRefusesAnotherRoute: a config reload moved /notify to
// another scope's route and the key's own route to /demo; that route has
// served nothing yet, so the redelivery probes the site's routing with the
// journaled request, finds the other route, and is refused — nothing is
// sent, the key stays failed. Once its own route has served a request,
// the redelivery enters it directly.
func TestRedeliverProbeRefusesAnotherRoute(t *testing.T) {
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 500, "down", 0
		}
		return 200, "ok " + order + " at " + r.URL.Path, 0
	})
	route := func(path, scope string) string {
		return `
	handle ` + path + ` {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope ` + scope + `
			store memory
		}
		reverse_proxy ` + be.addr() + `
	}`
	}
	adminAddr := reservePort(t)
	port := freePort(t)
	cf := func(site string) string {
		return "{\n\tadmin " + adminAddr + "\n\tauto_https off\n\tpersist_config off\n\tstorage file_system " + t.TempDir() +
			"\n\tlog {\n\t\tlevel ERROR\n\t}\n}\nhttp://127.0.0.1:" + itoa(port) + " {\n" + site + "\n}\n"
	}
	loadCaddyfile(t, cf(route("/notify", "demo")))
	t.Cleanup(func() { caddy.Stop() })
	base := "http://127.0.0.1:" + itoa(port)
	waitListening(t, base)
	g := gateway{base: base, admin: adminAddr}
	if r := post(t, base+"/notify", "application/x-www-form-urlencoded", "out_trade_no=m-1", nil); r.status != 500 {
		t.Fatalf("first copy: %+v", r)
	}
	loadCaddyfile(t, cf(route("/notify", "other")+route("/demo", "demo")))
	g.waitReloaded(t)
	status, body := g.adminDo(t, http.MethodPost, keyURI("demo:m-1")+"/redeliver")
	if status != http.StatusConflict || !strings.Contains(body, "to route other#1, not demo#1") || be.count("m-1") != 1 {
		t.Fatalf("redelivery after the reload: %d %s, backend %d; want 409 naming other#1, nothing sent", status, body, be.count("m-1"))
	}
	var rec admin.RecordView
	g.adminJSON(t, http.MethodGet, keyURI("demo:m-1"), &rec)
	if rec.State != "failed" {
		t.Fatalf("state after the refused redelivery: %s", rec.State)
	}
	// The demo route serves a request: now it knows its chain.
	post(t, base+"/demo", "application/x-www-form-urlencoded", "out_trade_no=m-2", nil)
	var red admin.RedeliveryView
	g.adminJSON(t, http.MethodPost, keyURI("demo:m-1")+"/redeliver", &red)
	if red.State != "answered" || red.Body != "ok m-1 at /notify" || be.count("m-1") != 2 {
		t.Fatalf("redelivery into the known route: %+v, backend %d", red, be.count("m-1"))
	}
}
