package console

import (
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// hostile is what a notification may carry that would steer an
// operator's page: a terminal escape, a C1 control (CSI), bidirectional
// overrides, isolates and marks, and markup.
const hostile = "\x1b[2J\u009b31m\u202eevil\u202c\u2066iso\u2069\u200f\u200e\u061c<img src=x><b>bold</b>"

// steering are the characters no page's text may hold raw.
const steering = "\x1b\u009b\u202e\u202c\u2066\u2069\u200f\u200e\u061c"

// TestConsoleInertBrowser, in a real headless Chromium with JavaScript
// off: a key that holds bidirectional overrides and markup, and a
// notification whose form fields and header carry terminal escapes, C1
// controls, overrides and markup. Every page that shows the key or the
// notification (the overview's list, the key's page with its journal and
// notification, search, the order's page, the purge confirmation) shows
// them escaped (\x1b, \u202e) and the markup as text, as the Refused page
// and the CLI do; the key's forms still post the key as it is: Purge
// forgets it.
func TestConsoleInertBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 500, "down", 0
	})
	base := gatewaytest.StartCaddy(t, `
	route /shop/notify {
		idempotency {
			scope shop
			key {idempotency.form.order}
			store memory
		}
		reverse_proxy {backend}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`, "{backend}", be.Addr())

	order := "o-1\u202e<b>x</b>\u2066y\u2069\u200f"
	key := "shop:" + order
	form := url.Values{"order": {order}, "note": {hostile}}
	if r := gatewaytest.Post(t, base+"/shop/notify", "application/x-www-form-urlencoded", form.Encode(),
		http.Header{"X-Note": {"\u202eevil\u2066<i>i</i>"}}); r.Status != 500 {
		t.Fatalf("notification: %d %q", r.Status, r.Body)
	}

	bctx, run, text := headlessBrowser(t)
	dir := artefactDir(t)
	// check reads the page's text: nothing in it steers, the key and the
	// markup show as text, escaped.
	check := func(name string, wants ...string) {
		t.Helper()
		// Every collapsed part open (the notification's headers), for
		// the screenshot; the text is the DOM's, hidden parts included.
		body, err := chromedp.Run(bctx, chromedp.Evaluate[string](
			`document.querySelectorAll("details").forEach(d => d.open = true); document.title + "\n" + document.body.textContent`))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if i := strings.IndexAny(body, steering); i >= 0 {
			t.Errorf("%s: its text holds %q raw:\n%s", name, []rune(body[i:])[0], body)
		}
		for _, want := range append(wants, `o-1\u202e<b>x</b>\u2066y\u2069\u200f`) {
			if !strings.Contains(body, want) {
				t.Errorf("%s: its text lacks %q:\n%s", name, want, body)
			}
		}
		// The notification's markup made no element.
		n, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`[...document.querySelectorAll("b, i, img")].filter(e =>
			e.tagName == "IMG" ? e.getAttribute("src") == "x" : ["x", "i", "bold"].includes(e.textContent)).length`))
		if err != nil || n != 0 {
			t.Errorf("%s: the notification's markup made %v elements (%v)", name, n, err)
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		saveShot(t, dir, "inert-"+name+".png", png)
	}
	keyQuery := url.Values{"store": {"memory"}, "k": {key}}.Encode()
	run("overview", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("main")))
	check("overview")
	run("key page", chromedp.Navigate(base+"/console/key?"+keyQuery), chromedp.WaitVisible(chromedp.CSS("#key")))
	check("key", `\x1b[2J\u009b31m\u202eevil\u202c\u2066iso\u2069\u200f\u200e\u061c<img src=x><b>bold</b>`, `\u202eevil\u2066<i>i</i>`)
	run("search", chromedp.Navigate(base+"/console/search?"+url.Values{"q": {"shop:o-1"}}.Encode()), chromedp.WaitVisible(chromedp.CSS("main")))
	check("search")
	run("order page", chromedp.Navigate(base+"/console/order?"+url.Values{"store": {"memory"}, "o": {key}}.Encode()),
		chromedp.WaitVisible(chromedp.CSS("main")))
	check("order")
	run("purge", chromedp.Navigate(base+"/console/purge?"+keyQuery), chromedp.WaitVisible(chromedp.CSS("#confirm-purge")))
	check("purge")
	// The hidden key posts back as it is.
	run("confirm purge", chromedp.Click(chromedp.CSS("#confirm-purge")), chromedp.WaitVisible(chromedp.CSS(".note")))
	if note := text(".note"); !strings.Contains(note, "Purged") {
		t.Errorf("after the purge: %q", note)
	}
	if r := gatewaytest.Post(t, base+"/shop/notify", "application/x-www-form-urlencoded", form.Encode(), nil); r.Status != 500 || be.Total.Load() != 2 {
		t.Errorf("the copy after the purge: %d, backend ran %d times, want it forwarded again", r.Status, be.Total.Load())
	}
}
