package console

import (
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

const recoveryAppID = "2021000000000001"

// TestConsoleRecoveryBrowser: after an outage, in a real headless Chromium
// with JavaScript off. The overview shows the money at stake first — the
// failed Alipay payments in CNY and the Stripe one in USD received, and
// apart from them the Stripe refund owed (never added up) — then the
// chart, with the async route's acks apart from forwards, and each failed
// key's retries left at its platform. Filtered to the alipay scope, the
// failed list offers "Redeliver all 2"; the confirmation page (a dry run)
// sends nothing; confirming redelivers each key once. A dead async key's
// page says the platform has its ack and shows "connection refused" for
// its attempts. A forged POST without the page's token runs nothing.
func TestConsoleRecoveryBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	const secret = "whsec_console_recovery"
	k, _ := platformtest.Keys(t)
	alipay := platformtest.Alipay{Key: k}
	pub := platformtest.WriteFile(t, "alipay.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	be := gatewaytest.NewBackend(t)
	healed := make(chan struct{})
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		select {
		case <-healed:
			return 200, "success", 0
		default:
			return 502, "database is down", 0
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := ln.Addr().String()
	ln.Close()
	base := gatewaytest.StartCaddy(t, `
	handle /alipay/notify {
		idempotency {
			platform alipay
			public_key `+pub+`
			store memory
		}
		reverse_proxy {backend}
	}
	handle /stripe {
		idempotency {
			platform stripe
			secret `+secret+`
			store memory
		}
		reverse_proxy {backend}
	}
	handle /queued {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope shop
			store memory
			deliver async {
				to http://`+refusing+`
				ack 200 success
				retry 100ms 200ms
				give_up 600ms
			}
		}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`, "{backend}", be.Addr())

	gatewaytest.App(t).Counts().Reset()
	for _, p := range []url.Values{
		platformtest.AlipayNotify(recoveryAppID, "o-1", "2026120122001", "TRADE_SUCCESS", "88.88"),
		platformtest.AlipayNotify(recoveryAppID, "o-2", "2026120122002", "TRADE_SUCCESS", "31.12"),
	} {
		if r := gatewaytest.Post(t, base+"/alipay/notify", "application/x-www-form-urlencoded; charset=utf-8", alipay.Body(t, p), nil); r.Status != 502 {
			t.Fatalf("alipay notify: %+v", r)
		}
	}
	ev := platformtest.StripeEvent("evt_console_1", "payment_intent.succeeded", "pi_1", 4200)
	if r := gatewaytest.Post(t, base+"/stripe", "application/json", string(ev), platformtest.StripeHeader(ev, secret, time.Now())); r.Status != 502 {
		t.Fatalf("stripe: %+v", r)
	}
	// A refund failed too: money owed, shown apart from the payments.
	rf := platformtest.StripeEvent("evt_console_rf", "refund.created", "re_1", 500)
	if r := gatewaytest.Post(t, base+"/stripe", "application/json", string(rf), platformtest.StripeHeader(rf, secret, time.Now())); r.Status != 502 {
		t.Fatalf("stripe refund: %+v", r)
	}
	for _, o := range []string{"q-1", "q-2"} {
		if r := gatewaytest.Post(t, base+"/queued", "application/x-www-form-urlencoded", "out_trade_no="+o, nil); r.Status != 200 {
			t.Fatalf("async ack: %+v", r)
		}
	}
	gatewaytest.Eventually(t, 10*time.Second, "the async keys dead", func() bool {
		for _, k := range []string{"shop:q-1", "shop:q-2"} {
			if rec := gatewaytest.Record(t, k); rec == nil || rec.StateAt(gatewaytest.App(t).Now(), gatewaytest.App(t).WindowOf(k)) != "dead" {
				return false
			}
		}
		return true
	})

	bctx, run, text := headlessBrowser(t)
	dir := artefactDir(t)
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		saveShot(t, dir, name, png)
	}

	run("overview", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#stake")))
	main := text("main")
	if !strings.HasPrefix(strings.TrimSpace(main), "Money at stake") {
		t.Errorf("the overview does not start with the money at stake:\n%s", main[:min(len(main), 300)])
	}
	if f := text("#stake-failed"); !strings.Contains(f, "120.00 CNY received at stake") || !strings.Contains(f, "42.00 USD received at stake") ||
		!strings.Contains(f, "5.00 USD of refunds owed") || strings.Contains(f, "47.00") {
		t.Errorf("failed money at stake: %q, want 120.00 CNY and 42.00 USD received, 5.00 USD of refunds owed apart", f)
	}
	if d := text("#stake-dead"); !strings.Contains(d, "Dead") || !strings.Contains(d, "(2)") {
		t.Errorf("dead money at stake: %q, want the 2 async keys", d)
	}
	if c := text("#chart"); !strings.Contains(c, "acked (async) 2") || !strings.Contains(c, "forwarded 0") {
		t.Errorf("chart legend: %q, want the 2 async acks apart from forwards", c)
	}
	if f := text("#failed"); !strings.Contains(f, "Alipay's next retry in ~4m, 7 left") || !strings.Contains(f, "Stripe's next retry in ~1h") {
		t.Errorf("failed list: %q, want each key's retries left", f)
	}
	assertFits(t, bctx, "overview with failed and dead keys")
	shot("console-overview.png")

	// A dead async key: the platform has its ack; the attempts say why.
	run("async key", chromedp.Click(chromedp.CSS(`#dead a[href*="q-1"]`)), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if n := text("#async-note"); !strings.Contains(n, "the platform has its ack and will never retry") {
		t.Errorf("dead async key's note: %q", n)
	}
	if tl := text("#timeline"); !strings.Contains(tl, "connection refused") {
		t.Errorf("timeline of the async key: %q", tl)
	}
	if a := text("#answer"); !strings.Contains(a, "the platform has its ack") || strings.Contains(a, "next copy is forwarded") {
		t.Errorf("answer of a dead async key: %q", a)
	}
	assertFits(t, bctx, "dead async key page")
	shot("console-async-dead.png")

	// Redeliver all, on the alipay scope's list.
	run("scope", chromedp.Navigate(base+"/console/?scope=alipay"), chromedp.WaitVisible(chromedp.CSS("#redeliver-all-failed")))
	if b := text("#redeliver-all-failed"); !strings.Contains(b, "Redeliver all 2") {
		t.Fatalf("bulk button: %q", b)
	}
	assertFits(t, bctx, "overview of a scope")
	run("confirm page", chromedp.Click(chromedp.CSS("#redeliver-all-failed")), chromedp.WaitVisible(chromedp.CSS("#confirm-bulk")))
	if be.Total.Load() != 4 {
		t.Fatalf("the confirmation page reached the backend: %d requests", be.Total.Load())
	}
	// A forged POST without the page's token runs nothing.
	if got := consolePost(t, base+"/console/redeliver-all", url.Values{"store": {"memory"}, "state": {"failed"}, "scope": {"alipay"}, "confirm": {"yes"}},
		map[string]string{"Origin": base}); got != http.StatusForbidden || be.Total.Load() != 4 {
		t.Fatalf("forged bulk POST: %d, backend %d requests", got, be.Total.Load())
	}
	close(healed)
	run("confirm", chromedp.Click(chromedp.CSS("#confirm-bulk button")), chromedp.WaitVisible(chromedp.CSS("#bulk-done")))
	res := text("#bulk-results")
	if strings.Count(res, "answered") != 2 || strings.Count(res, "\t200\t") != 2 {
		t.Errorf("bulk results: %q", res)
	}
	for _, o := range []string{"o-1", "o-2"} {
		if n := be.Count(o); n != 2 {
			t.Errorf("%s ran %d times, want 2 (the failed copy, the redelivery)", o, n)
		}
	}
	if n := be.Count("evt_console_1"); n > 1 {
		t.Errorf("the Stripe key (another scope) ran %d times", n)
	}
	assertFits(t, bctx, "bulk redelivery results")
	shot("console-bulk.png")
}
