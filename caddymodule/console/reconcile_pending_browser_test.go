package console

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
)

// TestConsoleReconcilePendingBrowser uploads a day's bill through the page
// in a real headless Chromium (no JavaScript), no merchant given, to a
// scope that pins no app_id: the gateway tells the app from the seller_id
// its notifications signed, and the report shows every class — a
// settled-never-run payment, one run but not settled, one whose amount
// differs, the matched ones with their records' state, and a payment at
// 23:58 Beijing time pending the next bill, with why.
func TestConsoleReconcilePendingBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(string, int, *http.Request) (int, string, time.Duration) { return 200, "success", 0 })
	base := gatewaytest.StartCaddy(t, strings.Replace(reconcileSite, "app_id 2021004123456789", "", 1), "{backend}", be.Addr())
	cst := time.FixedZone("CST", 8*3600)
	day := time.Date(2026, 10, 3, 0, 0, 0, 0, cst)
	trade := func(i int) string { return fmt.Sprintf("2026100322001458860%09d", i) }
	var rows []billtest.Row
	for i, c := range []struct {
		at             time.Duration
		billed, notify string // "" for not in the bill / not notified
	}{
		{9 * time.Hour, "88.00", "88.00"},
		{10 * time.Hour, "12.50", "12.50"},
		{11 * time.Hour, "30.00", ""},              // settled, never run
		{12 * time.Hour, "", "45.00"},              // run, not settled
		{13 * time.Hour, "20.00", "25.00"},         // amount differs
		{24*time.Hour - 2*time.Minute, "", "9.90"}, // pending the next bill
	} {
		at := day.Add(c.at)
		if c.notify != "" {
			form := url.Values{"app_id": {"2021004123456789"}, "trade_no": {trade(i)}, "out_trade_no": {fmt.Sprintf("M%d", i)}, "seller_id": {"2088102177296610"},
				"trade_status": {"TRADE_SUCCESS"}, "total_amount": {c.notify}, "gmt_payment": {at.Format(time.DateTime)}}
			if r := gatewaytest.Post(t, base+"/alipay/notify", "application/x-www-form-urlencoded", form.Encode(), nil); r.Status != 200 {
				t.Fatalf("notify: %d %s", r.Status, r.Body)
			}
		}
		if c.billed != "" {
			rows = append(rows, billtest.Row{Kind: billtest.Payment, Order: trade(i), MerchantOrder: fmt.Sprintf("M%d", i), Amount: c.billed, Currency: "CNY", Time: at})
		}
	}
	file := filepath.Join(t.TempDir(), "20881021772966100156_20261003_业务明细.csv")
	bill := billtest.Bytes(func(w io.Writer) billtest.Writer {
		return alipaybill.NewWriter(w, "20881021772966100156", day, day.Add(24*time.Hour))
	}, rows)
	if err := os.WriteFile(file, bill, 0o600); err != nil {
		t.Fatal(err)
	}
	bctx, run, text := headlessBrowser(t)
	run("the form", chromedp.Navigate(base+"/console/reconcile"), chromedp.WaitVisible(chromedp.CSS("#reconcile-form")))
	run("upload", chromedp.SetUploadFiles(chromedp.CSS("#bill"), []string{file}), chromedp.Click(chromedp.CSS("#items")),
		chromedp.Click(chromedp.CSS("#reconcile-submit")), chromedp.WaitVisible(chromedp.CSS("#report")))
	for sel, want := range map[string][]string{
		"#report":                {"merchant 2021004123456789", "app_id 2021004123456789: the app_id whose notifications name the bill's seller account 20881021772966100156"},
		"#sum-settled_never_run": {"1", "30.00 CNY"},
		"#sum-run_not_settled":   {"1", "45.00 CNY"},
		"#sum-amount_differs":    {"1", "-5.00 CNY"}, // the difference: billed 20.00, notified 25.00
		"#cat-amount_differs":    {"DIFFERENCE", "20.00\t25.00\t-5.00"},
		"#sum-matched":           {"2", "100.50 CNY"},
		"#sum-pending_next_bill": {"Pending the next bill", "1", "9.90 CNY"},
		"#cat-pending_next_bill": {"ran in the last 15 minutes before the bill's end (2026-10-04 00:00 +08:00)", "Reconciling that bill matches them", trade(5), "answered", "ran 23:58:00"},
		"#cat-run_not_settled":   {trade(3), "answered"},
		"#cat-matched":           {trade(0), "answered"},
	} {
		got := text(sel)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s lacks %q: %q", sel, w, got)
			}
		}
	}
	assertFits(t, bctx, "reconcile report")
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveShot(t, artefactDir(t), "console-reconcile-pending.png", png)
}
