package console

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestConsoleSearchBrowser: in a real headless Chromium with JavaScript
// off, support types the customer's order number (Alipay's out_trade_no)
// into the header's search box and finds the key and its order — the
// payment answered with its amount, its refund by the same number, and,
// by another number, a payment whose backend failed — then follows the
// order link to the order's page.
func TestConsoleSearchBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	k, _ := platformtest.Keys(t)
	alipay := platformtest.Alipay{Key: k}
	pub := platformtest.WriteFile(t, "alipay.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "fail" {
			return 502, "database is down", 0
		}
		return 200, "success", 0
	})
	base := gatewaytest.StartCaddy(t, `
	handle /alipay/notify {
		idempotency {
			platform alipay
			public_key `+pub+`
			store embedded `+filepath.Join(t.TempDir(), "keys.db")+`
		}
		reverse_proxy {backend}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`, "{backend}", be.Addr())

	const app, trade, outTradeNo = "2021004100000001", "2026120322001437971000004242", "SHOP-20261203-0042"
	post := func(label string, p url.Values, want int) {
		t.Helper()
		r := gatewaytest.Post(t, base+"/alipay/notify", "application/x-www-form-urlencoded; charset=utf-8", alipay.Body(t, p), http.Header{"X-Order": {label}})
		if r.Status != want {
			t.Fatalf("%s: %d %q, want %d", label, r.Status, r.Body, want)
		}
	}
	paid := platformtest.AlipayNotify(app, outTradeNo, trade, "TRADE_SUCCESS", "128.00")
	post("paid", paid, 200)
	refund := platformtest.AlipayNotify(app, outTradeNo, trade, "TRADE_SUCCESS", "128.00")
	refund.Set("out_biz_no", "RF-20261203-1")
	refund.Set("refund_fee", "28.00")
	post("refund", refund, 200)
	post("fail", platformtest.AlipayNotify(app, "SHOP-20261203-0043", "2026120322001437971000004343", "TRADE_SUCCESS", "59.90"), 502)

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

	order := "alipay:" + app + ":" + trade
	run("overview", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS(`header input[name="q"]`)))
	run("search", chromedp.SetValue(chromedp.CSS(`header input[name="q"]`), outTradeNo),
		chromedp.Submit(chromedp.CSS(`header form`)), chromedp.WaitVisible(chromedp.CSS("#matches")))
	m := text("#matches")
	for _, want := range []string{order + ":paid", order + ":refund:RF-20261203-1", "128.00 CNY", "28.00 CNY", outTradeNo, "answered"} {
		if !strings.Contains(m, want) {
			t.Errorf("results for %s lack %q:\n%s", outTradeNo, want, m)
		}
	}
	if strings.Contains(m, "SHOP-20261203-0043") {
		t.Errorf("results for %s show another order's key:\n%s", outTradeNo, m)
	}
	if v, err := chromedp.Run(bctx, chromedp.Value(chromedp.CSS(`header input[name="q"]`))); err != nil || v != outTradeNo {
		t.Errorf("the search box holds %q (%v), want the text searched", v, err)
	}
	shot("console-search.png")
	assertFits(t, bctx, "search results")

	// The refund's own number, and a failed payment's order number.
	run("refund", chromedp.SetValue(chromedp.CSS(`header input[name="q"]`), "RF-20261203-1"),
		chromedp.Submit(chromedp.CSS(`header form`)), chromedp.WaitVisible(chromedp.CSS("#matches")))
	if m := text("#matches"); !strings.Contains(m, "refund:RF-20261203-1") || strings.Contains(m, ":paid") {
		t.Errorf("results for the refund number:\n%s", m)
	}
	run("failed", chromedp.SetValue(chromedp.CSS(`header input[name="q"]`), "SHOP-20261203-0043"),
		chromedp.Submit(chromedp.CSS(`header form`)), chromedp.WaitVisible(chromedp.CSS("#matches")))
	if m := text("#matches"); !strings.Contains(m, "failed") || !strings.Contains(m, "2026120322001437971000004343:paid") || !strings.Contains(m, "59.90 CNY") {
		t.Errorf("results for the failed payment's number:\n%s", m)
	}
	shot("console-search-failed.png")
	assertFits(t, bctx, "search results of a failed payment")

	// The order link opens the order's page with both events.
	run("back", chromedp.SetValue(chromedp.CSS(`header input[name="q"]`), outTradeNo),
		chromedp.Submit(chromedp.CSS(`header form`)), chromedp.WaitVisible(chromedp.CSS("#matches")))
	run("order", chromedp.Click(chromedp.CSS(`#matches a[href*="order?"]`)), chromedp.WaitVisible(chromedp.CSS("#events")))
	if o := text("#order"); o != order {
		t.Errorf("order page of %q", o)
	}
	if ev := text("#events"); !strings.Contains(ev, "paid") || !strings.Contains(ev, "refund:RF-20261203-1") {
		t.Errorf("order page events:\n%s", ev)
	}
	shot("console-search-order.png")
	// The order's keys are long: the events table wraps them inside its
	// card, at a laptop's width and at a narrow window's.
	assertFits(t, bctx, "order page")
	shotAt(t, bctx, dir, "console-order-800.png", 800)

	run("nothing", chromedp.Navigate(base+"/console/search?q=SHOP-NONE"), chromedp.WaitVisible(chromedp.CSS("#no-matches")))
}
