package console

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestConsoleRefusedBrowser, in a real headless Chromium with JavaScript
// off: Stripe rotated its signing secret and the gateway was not told, so
// its notifications, signed with the new secret, are refused 401; a
// shop's sender posts an empty key whose body holds a bidirectional
// override, then a body with a raw terminal escape. The Refused page,
// reached from the header, lists them, newest first, with route, status,
// reason class, length, SHA-256 and the body's first bytes, the escape
// and the override shown as text; the scope filter (a GET form) narrows
// it to Stripe's. Nothing reached the backend.
func TestConsoleRefusedBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	be := gatewaytest.NewBackend(t)
	base := gatewaytest.StartCaddy(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret whsec_before_rotation
			store memory
		}
		reverse_proxy {backend}
	}
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
	}`, "{backend}", be.Addr())

	event := platformtest.StripeEvent("evt_rotated_1", "payment_intent.succeeded", "pi_1", 4200)
	hdr := platformtest.StripeHeader(event, "whsec_after_rotation", time.Now())
	if r := gatewaytest.Post(t, base+"/stripe", "application/json", string(event), hdr); r.Status != 401 {
		t.Fatalf("Stripe signed with the rotated secret: %d %q", r.Status, r.Body)
	}
	// An empty key, the body holding a bidirectional override; then a body
	// with a raw terminal escape, which is no JSON.
	for _, body := range []string{`{"order":{"id":""},"note":"` + "\u202eevil" + `"}`, "\x1b[2J{not json"} {
		if r := gatewaytest.Post(t, base+"/shop/notify", "application/json", body,
			http.Header{"Authorization": {"Bearer do-not-show"}}); r.Status != 400 {
			t.Fatalf("%q: %d %q", body, r.Status, r.Body)
		}
	}
	if be.Total.Load() != 0 {
		t.Fatalf("the backend ran %d times for refusals", be.Total.Load())
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

	run("overview", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#nav-refused")))
	run("open refused", chromedp.Click(chromedp.CSS("#nav-refused")), chromedp.WaitVisible(chromedp.CSS("#refused")))
	if h := text("#refused-count"); h != "3 refused notifications" {
		t.Errorf("heading: %q", h)
	}
	rows := text("#refused tbody")
	lines := strings.Split(strings.TrimSpace(rows), "\n")
	if len(lines) != 3 {
		t.Fatalf("rows:\n%s", rows)
	}
	for i, wants := range [][]string{
		{"shop", "shop#1", "400", "bad_request", "body is not JSON", `\x1b[2J{not json`},
		{"shop", "shop#1", "400", "bad_request", "key: {idempotency.json.order.id} is empty", `\u202eevil`},
		{"stripe", "stripe#1", "401", "rejected_signature", "signature verification failed",
			strconv.Itoa(len(event)), `"id": "evt_rotated_1"`},
	} {
		for _, want := range wants {
			if !strings.Contains(lines[i], want) {
				t.Errorf("row %d lacks %q:\n%s", i, want, rows)
			}
		}
	}
	page, err := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(page, "\x1b\u202e") || strings.Contains(page, "do-not-show") || strings.Contains(page, "whsec_") {
		t.Errorf("the page holds a raw escape, an override, a credential or a secret")
	}
	assertFits(t, bctx, "refused list")
	shot("h42-refused-console.png")

	// The filter is a plain GET form.
	run("filter stripe", chromedp.SetValue(chromedp.CSS(`#refused-filter select[name="scope"]`), "stripe"),
		chromedp.Click(chromedp.CSS(`#refused-filter button`)),
		// The new page's: the option is selected by its attribute, not by
		// SetValue's property on the old one.
		chromedp.WaitReady(chromedp.CSS(`#refused-filter option[value="stripe"][selected]`)), chromedp.WaitVisible(chromedp.CSS("#refused")))
	if h := text("#refused-count"); h != "1 refused notification" {
		t.Errorf("filtered heading: %q", h)
	}
	if rows := text("#refused tbody"); strings.Contains(rows, "shop") || !strings.Contains(rows, "401") {
		t.Errorf("filtered to stripe:\n%s", rows)
	}
	loc, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil || !strings.Contains(loc, "/console/refused?scope=stripe") {
		t.Errorf("filtered at %q (%v)", loc, err)
	}
	assertFits(t, bctx, "refused list filtered")
	shot("h42-refused-console-filtered.png")
}
