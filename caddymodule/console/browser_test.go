package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// chromiumPath is Debian's chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

// consoleSite is a gateway with a JSON notification route, whose backend
// the test fails and heals, and the console mounted under two prefixes:
// once in a route, once behind handle_path (which strips its prefix).
const consoleSite = `
	route /shop/notify {
		idempotency {
			scope shop
			key {idempotency.json.order.id}
			store memory
		}
		reverse_proxy {backend}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}
	handle_path /ops/idem/* {
		idempotency_console
	}
`

// shopOrder is a notification for order id, with markup in it that the
// console must show, never run.
func shopOrder(id string) string {
	return `{"order":{"id":"` + id + `","amount":"9.90","currency":"EUR"},"note":"<script>document.title='owned'</script>","items":[{"sku":"A-1","qty":2}]}`
}

func postShop(t testing.TB, base, id string) gatewaytest.Reply {
	t.Helper()
	return gatewaytest.Post(t, base+"/shop/notify", "application/json", shopOrder(id),
		http.Header{"X-Order": {id}, "Authorization": {"Bearer do-not-show"}})
}

// artefactDir is where screenshots go: $IDEMGATE_ARTIFACTS, or a kept
// temporary directory that the test names.
func artefactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("IDEMGATE_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "idemgate-console-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// saveShot writes a PNG to the artefacts, and to docs/ for the README when
// IDEMGATE_UPDATE_DOCS=1.
func saveShot(t *testing.T, dir, name string, png []byte) {
	t.Helper()
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("%s: not a PNG (%d bytes)", name, len(png))
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("IDEMGATE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConsoleBrowser drives a real headless Chromium through the console
// of a running gateway: a failed notification is on the overview, its page
// shows the attempts and the pretty-printed JSON body (the markup in it as
// text), Redeliver runs the healed backend exactly once more, and Purge
// asks for confirmation before it forgets the key.
func TestConsoleBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	be := gatewaytest.NewBackend(t)
	healed := make(chan struct{})
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		select {
		case <-healed:
			return 200, "ok " + order, 0
		default:
			return 503, `{"error":"database is down"}`, 0
		}
	})
	base := gatewaytest.StartCaddy(t, consoleSite, "{backend}", be.Addr())

	// The chart counts the whole process: forget the earlier tests'.
	gatewaytest.App(t).Counts().Reset()
	const order = "A-1001"
	key := "shop:" + order
	for range 2 {
		if r := postShop(t, base, order); r.Status != 503 {
			t.Fatalf("notification: %d %q, want the backend's 503", r.Status, r.Body)
		}
	}
	if r := postShop(t, base, "A-1002"); r.Status != 503 {
		t.Fatalf("second order: %d", r.Status)
	}
	close(healed)
	if r := postShop(t, base, "A-1003"); r.Status != 200 {
		t.Fatalf("third order: %d", r.Status)
	}
	postShop(t, base, "A-1003") // a replay, for the chart
	if n := be.Count(order); n != 2 {
		t.Fatalf("backend ran %d times for %s before the console, want 2", n, order)
	}

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

	// The overview lists the failed key with its attempts.
	run("overview", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#failed table")))
	failed := text("#failed")
	for _, want := range []string{key, "shop:A-1002", "failed"} {
		if !strings.Contains(failed, want) {
			t.Fatalf("failed section lacks %q:\n%s", want, failed)
		}
	}
	if chart := text("#chart"); !strings.Contains(chart, "backend failed 3") || !strings.Contains(chart, "replayed 1") {
		t.Errorf("chart legend: %q", chart)
	}
	if stores := text("#stores"); !strings.Contains(stores, "memory") || !strings.Contains(stores, "synchronous delivery") {
		t.Errorf("stores section: %q", stores)
	}
	assertFits(t, bctx, "overview")
	shot("console-shop-overview.png") // docs/console-overview.png is TestConsoleRecoveryBrowser's

	// Its page: two failed attempts with status and the backend's answer,
	// the JSON indented, the markup as text, no Authorization value.
	run("open key", chromedp.Click(chromedp.CSS(`#failed a[href*="A-1001"]`)), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if got := text("#key"); got != key {
		t.Fatalf("key page for %q", got)
	}
	timeline := text("#timeline")
	if strings.Count(timeline, "attempt ") != 2 || strings.Count(timeline, "\t503\t") != 2 || strings.Count(timeline, "status 503") != 2 ||
		!strings.Contains(timeline, "failed") ||
		!strings.Contains(timeline, `"error": "database is down"`) {
		t.Errorf("timeline:\n%s", timeline)
	}
	note := text("#notification pre")
	if !strings.Contains(note, "\n  \"order\": {\n    \"id\": \"A-1001\"") || !strings.Contains(note, "<script>document.title='owned'</script>") {
		t.Errorf("notification body not indented JSON with its markup as text:\n%s", note)
	}
	title, err := chromedp.Run(bctx, chromedp.Evaluate[string]("document.title"))
	if err != nil || title == "owned" || !strings.Contains(title, key) {
		t.Errorf("page title %q (%v): the body's script must not run", title, err)
	}
	page, err := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page, "do-not-show") || strings.Contains(page, "Bearer") {
		t.Errorf("the key's page shows the Authorization header")
	}
	assertFits(t, bctx, "key page")
	shot("console-key.png")

	// Redeliver: the healed backend runs once more, and the page says so.
	run("redeliver", chromedp.Click(chromedp.CSS("#redeliver button")), chromedp.WaitVisible(chromedp.CSS(".note")))
	if n := be.Count(order); n != 3 {
		t.Fatalf("backend ran %d times after one redelivery, want 3", n)
	}
	if msg := text(".note"); !strings.Contains(msg, "answered 200") {
		t.Errorf("after redeliver: %q", msg)
	}
	if st := text("#state"); st != "answered" {
		t.Errorf("state after redeliver: %q", st)
	}
	if ans := text("#answer"); !strings.Contains(ans, "ok A-1001") {
		t.Errorf("remembered answer: %q", ans)
	}

	// Purge asks first: the key is still there on the confirmation page.
	run("purge", chromedp.Click(chromedp.CSS("#purge button")), chromedp.WaitVisible(chromedp.CSS("#confirm-purge")))
	if _, err := (appData{gatewaytest.App(t)}).lookup(context.Background(), "memory", key); err != nil {
		t.Fatalf("the key is gone before the purge was confirmed: %v", err)
	}
	run("confirm purge", chromedp.Click(chromedp.CSS("#confirm-purge")), chromedp.WaitVisible(chromedp.CSS(".note")))
	if msg := text(".note"); !strings.Contains(msg, "Purged") {
		t.Errorf("after purge: %q", msg)
	}
	if _, err := (appData{gatewaytest.App(t)}).lookup(context.Background(), "memory", key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after the confirmed purge, lookup: %v", err)
	}
	if n := be.Count(order); n != 3 {
		t.Fatalf("backend ran %d times after the purge, want still 3", n)
	}

	// The search box finds keys by their start too, answered and failed.
	run("search", chromedp.SetValue(chromedp.CSS(`header input[name="q"]`), "shop:A-100"),
		chromedp.Submit(chromedp.CSS(`header form`)), chromedp.WaitVisible(chromedp.CSS("#matches")))
	if m := text("#matches"); !strings.Contains(m, "shop:A-1003") || !strings.Contains(m, "answered") || !strings.Contains(m, "shop:A-1002") {
		t.Errorf("search results: %q", m)
	}
	assertFits(t, bctx, "search by key prefix")

	// A cross-site POST (another site's form, without the page's token)
	// is refused and runs nothing.
	form := url.Values{"store": {"memory"}, "k": {"shop:A-1002"}}
	req, _ := http.NewRequest(http.MethodPost, base+"/console/redeliver", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := gatewaytest.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || be.Count("A-1002") != 1 {
		t.Fatalf("cross-site redeliver: %d, backend ran %d times for A-1002 (want 403, 1)", resp.StatusCode, be.Count("A-1002"))
	}

	// The same console under handle_path's stripped prefix links under it.
	run("second prefix", chromedp.Navigate(base+"/ops/idem/"), chromedp.WaitVisible(chromedp.CSS(`#failed a[href*="A-1002"]`)))
	run("open key under /ops/idem/", chromedp.Click(chromedp.CSS(`#failed a[href*="A-1002"]`)), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	loc, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil || !strings.HasPrefix(loc, base+"/ops/idem/key?") {
		t.Errorf("key page under the second prefix at %q (%v)", loc, err)
	}
	u, _ := url.Parse(loc)
	if u.Query().Get("k") != "shop:A-1002" {
		t.Errorf("key link: %s", loc)
	}
}

// headlessBrowser starts Debian's Chromium headless with page scripts off
// (the operator's browser may run no JavaScript: every step works
// without), for at most a minute. run performs steps (15s each) and, on
// failure, says what the page shows instead; text reads an element's text.
func headlessBrowser(t *testing.T) (bctx context.Context, run func(what string, steps ...chromedp.Action[chromedp.Void]), text func(sel string) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	bctx = startChromium(t, ctx)
	if _, err := chromedp.Call(bctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatalf("turning JavaScript off: %v", err)
	}
	run = func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 15*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("main")))
			t.Fatalf("%s: %v; the page says:\n%s", what, err, body)
		}
	}
	text = func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	return bctx, run, text
}

// chromiumStarts is how many times startChromium launches the browser
// before the test fails. A CI run once saw Chromium exit within half a
// second of its launch, before it printed its DevTools address, with
// nothing in its output but the usual D-Bus complaints; the next test's
// launch in the same run worked. The launch is the environment, not the
// console under test, so it is tried again; a browser that never starts
// still fails the test.
const chromiumStarts = 3

// startChromium launches headless Chromium bound to ctx, with the extra
// flags opts, and returns the browser's context, once it has opened a
// blank page.
func startChromium(t *testing.T, ctx context.Context, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	var err error
	for attempt := 1; attempt <= chromiumStarts; attempt++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.WindowSize(1280, 1000)), opts...)...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		// The first run starts the browser, bound to bctx (not to a
		// step's shorter context).
		if err = chromedp.Do(bctx, chromedp.Navigate("about:blank")); err == nil {
			t.Cleanup(cancelAlloc)
			t.Cleanup(cancelBrowser)
			return bctx
		}
		cancelBrowser()
		cancelAlloc()
		if ctx.Err() != nil || attempt == chromiumStarts {
			break
		}
		t.Logf("starting chromium, attempt %d of %d: %v", attempt, chromiumStarts, err)
		time.Sleep(time.Second)
	}
	t.Fatalf("starting chromium: %v", err)
	return nil
}
