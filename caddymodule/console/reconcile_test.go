package console

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
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

// reconcileSite is an Alipay route (signatures off: the console is under
// test, not the verifier) pinned to one app, and the console.
const reconcileSite = `
	route /alipay/notify {
		idempotency {
			platform alipay
			verify off
			app_id 2021004123456789
			store memory
		}
		reverse_proxy {backend}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`

// reconcileFixture runs the site: trade 1 answered, trade 2 failed, trade
// 3 never sent; it returns the gateway and the day's bill of all three.
func reconcileFixture(t *testing.T) (base string, bill []byte) {
	t.Helper()
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "M2" {
			return 500, "down", 0
		}
		return 200, "success", 0
	})
	base = gatewaytest.StartCaddy(t, reconcileSite, "{backend}", be.Addr())
	now := time.Now().Truncate(time.Second)
	var rows []billtest.Row
	for i := 1; i <= 3; i++ {
		trade, amount := fmt.Sprintf("2026100322001458860%09d", i), fmt.Sprintf("%d.00", 10*i)
		rows = append(rows, billtest.Row{Kind: billtest.Payment, Order: trade, MerchantOrder: fmt.Sprintf("M%d", i), Amount: amount, Currency: "CNY", Time: now})
		if i < 3 {
			form := url.Values{"app_id": {"2021004123456789"}, "trade_no": {trade}, "out_trade_no": {fmt.Sprintf("M%d", i)},
				"trade_status": {"TRADE_SUCCESS"}, "total_amount": {amount}, "gmt_payment": {now.In(time.FixedZone("CST", 8*3600)).Format(time.DateTime)}}
			gatewaytest.Post(t, base+"/alipay/notify", "application/x-www-form-urlencoded", form.Encode(), nil)
		}
	}
	bill = billtest.Bytes(func(w io.Writer) billtest.Writer {
		return alipaybill.NewWriter(w, "20881021772966100156", now.Add(-12*time.Hour), now.Add(12*time.Hour))
	}, rows)
	return base, bill
}

// multipartBill is the upload form's body, its fields in the given order
// ("bill" is the file).
func multipartBill(t *testing.T, bill []byte, fields ...string) (string, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "bill" {
			fw, _ := mw.CreateFormFile("bill", "2088102177296610_20261003_业务明细.csv")
			fw.Write(bill)
			continue
		}
		mw.WriteField(fields[i], fields[i+1])
	}
	mw.Close()
	return mw.FormDataContentType(), &b
}

func consoleUpload(t *testing.T, u, ctype string, body io.Reader, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, body)
	req.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := consoleClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestConsoleReconcile: the page's form (its token first, the bill last)
// reconciles an uploaded bill and shows the report — counts, amounts, the
// failed event linked to its key — as does a raw-body POST with the token
// in its header; a POST without the token, with a stale one, from
// another site, or with the bill before the token is refused (403), and
// a malformed bill is a 400 naming its line, with the form to try again.
func TestConsoleReconcile(t *testing.T) {
	base, bill := reconcileFixture(t)
	resp, err := consoleClient.Get(base + "/console/reconcile")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `name="csrf" value="`+consoleToken+`"`) ||
		!strings.Contains(string(page), `enctype="multipart/form-data"`) || !strings.Contains(string(page), `id="nav-reconcile"`) {
		t.Fatalf("the form: %d\n%s", resp.StatusCode, page)
	}
	same := map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin"}
	failedKey := "alipay:2021004123456789:2026100322001458860000000002:paid"
	report := func(what string, status int, body string) {
		t.Helper()
		// Payments and refunds apart: this bill has no refunds.
		for _, want := range []string{`<th class="num">Payments</th><th class="num">Refunds</th>`,
			`id="sum-settled_never_run"><td>Settled, never run</td><td class="num">2</td><td class="num">50.00 CNY</td><td class="num"></td></tr>`,
			`id="sum-matched"><td>Matched</td><td class="num">1</td><td class="num">10.00 CNY</td><td class="num"></td></tr>`,
			`key?k=` + url.QueryEscape(failedKey) + `&amp;store=memory`, "idemgate idempotency redeliver &#39;" + failedKey + "&#39;"} {
			if status != 200 || !strings.Contains(body, want) {
				t.Errorf("%s: %d, the report lacks %s:\n%s", what, status, want, body)
			}
		}
	}
	ctype, body := multipartBill(t, bill, "csrf", consoleToken, "platform", "alipay", "scope", "", "merchant", "", "bill", "")
	status, out := consoleUpload(t, base+"/console/reconcile", ctype, body, same)
	report("the form", status, out)
	status, out = consoleUpload(t, base+"/console/reconcile?platform=alipay", "text/csv", bytes.NewReader(bill),
		map[string]string{"Idemgate-Console-Token": consoleToken})
	report("a raw body", status, out)

	for _, c := range []struct {
		name   string
		ctype  string
		body   io.Reader
		hdr    map[string]string
		status int
		says   string
	}{
		{"bill before the token", "", nil, same, 403, "must come before the bill"},
		{"stale token", "", nil, same, 403, "missing or stale"},
		{"foreign origin", "", nil, map[string]string{"Origin": "http://evil.example"}, 403, "cross-site"},
		{"cross-site fetch", "", nil, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "cross-site"},
		{"raw body without the token", "text/csv", bytes.NewReader(bill), nil, 403, "missing or stale"},
		{"malformed bill", "", nil, same, 400, "line 6"},
	} {
		var fields []string
		switch c.name {
		case "bill before the token":
			fields = []string{"platform", "alipay", "bill", "", "csrf", consoleToken}
		case "stale token":
			fields = []string{"csrf", "old", "platform", "alipay", "bill", ""}
		default:
			fields = []string{"csrf", consoleToken, "platform", "alipay", "bill", ""}
		}
		b := bill
		if c.name == "malformed bill" {
			b = bytes.Replace(bill, []byte("10.00,10.00"), []byte("10.00,ten"), 1)
		}
		if c.body == nil {
			c.ctype, c.body = multipartBill(t, b, fields...)
		}
		status, out := consoleUpload(t, base+"/console/reconcile", c.ctype, c.body, c.hdr)
		if status != c.status || !strings.Contains(out, c.says) {
			t.Errorf("%s: %d, want %d saying %q:\n%s", c.name, status, c.status, c.says, out)
		}
		if c.status == 400 && !strings.Contains(out, `id="reconcile-form"`) {
			t.Errorf("%s: no form to try again", c.name)
		}
	}
}

// TestConsoleReconcileBrowser uploads a bill through the page in a real
// headless Chromium (no JavaScript): the form posts it with the page's
// token, and the report shows the failed payment, linked to its key.
func TestConsoleReconcileBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	base, bill := reconcileFixture(t)
	file := filepath.Join(t.TempDir(), "2088102177296610_20261003_业务明细.csv")
	if err := os.WriteFile(file, bill, 0o600); err != nil {
		t.Fatal(err)
	}
	bctx, run, text := headlessBrowser(t)
	run("the form", chromedp.Navigate(base+"/console/"), chromedp.Click(chromedp.CSS("#nav-reconcile")),
		chromedp.WaitVisible(chromedp.CSS("#reconcile-form")))
	run("upload", chromedp.SetUploadFiles(chromedp.CSS("#bill"), []string{file}),
		chromedp.Click(chromedp.CSS("#reconcile-submit")), chromedp.WaitVisible(chromedp.CSS("#report")))
	if got := text("#sum-settled_never_run"); !strings.Contains(got, "2") || !strings.Contains(got, "50.00 CNY") {
		t.Errorf("settled, never run: %q", got)
	}
	if got := text("#cat-settled_never_run"); !strings.Contains(got, "2026100322001458860000000002:paid") || !strings.Contains(got, "failed") {
		t.Errorf("the failed payment: %q", got)
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveShot(t, artefactDir(t), "console-reconcile.png", png)
	run("open the failed key", chromedp.Click(chromedp.CSS(`#cat-settled_never_run a[href*="key?k="]`)), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if got := text("#key"); got != "alipay:2021004123456789:2026100322001458860000000002:paid" {
		t.Errorf("the key page of %q", got)
	}
}
