package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// lowCostHash is "s3cret" hashed by bcrypt at its least cost: the default
// cost takes seconds per request under -race on a loaded machine.
const lowCostHash = "$2a$04$ZbIBWrioS.0jm.rwMAFToeZMsA7mXDFbSvarWA7qEDzF14EBS3v8."

// rebindingGateway starts a gateway with a notification site and three
// consoles, each on a site that names no host and is bound to loopback
// (http://:N { bind 127.0.0.1 }, one of the ways the docs protect a
// console): one with nothing else, one behind basic_auth (ops/s3cret),
// one with `hosts ops.internal`; and a console on a site named ops.test,
// under handle_path. It returns the notification site's base and the
// consoles' ports.
func rebindingGateway(t *testing.T, be *gatewaytest.Backend) (base string, open, auth, named, site int) {
	t.Helper()
	pay, open, auth, named, site := gatewaytest.FreePort(t), gatewaytest.FreePort(t), gatewaytest.FreePort(t), gatewaytest.FreePort(t), gatewaytest.FreePort(t)
	cf := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	storage file_system %s
	log {
		level ERROR
	}
}
http://127.0.0.1:%d {
	route /shop/notify {
		idempotency {
			scope shop
			key {idempotency.json.order.id}
			store memory
		}
		reverse_proxy %s
	}
}
http://:%d {
	bind 127.0.0.1
	route /console/* {
		idempotency_console {
			refresh off
		}
	}
}
http://:%d {
	bind 127.0.0.1
	route /console/* {
		basic_auth {
			ops %s
		}
		idempotency_console
	}
}
http://:%d {
	bind 127.0.0.1
	route /console/* {
		idempotency_console {
			hosts ops.internal
		}
	}
}
http://ops.test:%d {
	bind 127.0.0.1
	handle_path /ops/* {
		route /console/* {
			idempotency_console
		}
	}
}
`, t.TempDir(), pay, be.Addr(), open, auth, lowCostHash, named, site)
	gatewaytest.LoadCaddyfile(t, cf)
	t.Cleanup(func() { caddy.Stop() })
	base = fmt.Sprintf("http://127.0.0.1:%d", pay)
	for _, p := range []int{pay, open, auth, named, site} {
		gatewaytest.WaitListening(t, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	return base, open, auth, named, site
}

// hostRequest sends a request to the console on 127.0.0.1:port with Host
// host (a foreign name that a rebinding page's DNS points at 127.0.0.1),
// as a browser on that name would, and returns the status and body.
func hostRequest(t *testing.T, method string, port int, host, path string, form url.Values, user string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		// What a page on that name sends with its own fetch or form.
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	if user != "" {
		req.SetBasicAuth(user, "s3cret")
	}
	resp, err := consoleClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestConsoleRefusesForeignHost: DNS rebinding, with plain requests. A
// console on a site that names no host, bound to loopback, is reached
// under a foreign name (evil.test, pointed at 127.0.0.1): its pages are
// refused without their token, and a redelivery of an answered payment
// with force=yes, carrying the right token and an Origin equal to its
// Host, is refused and runs nothing. Under a loopback name the same
// console serves and the same redelivery runs the backend once; behind
// basic_auth any name is served to the authenticated; `hosts` adds a name;
// a site that names its host serves that name.
func TestConsoleRefusesForeignHost(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	base, open, auth, named, site := rebindingGateway(t, be)
	const order = "R-1"
	if r := postShop(t, base, order); r.Status != 200 {
		t.Fatalf("notification: %d %q", r.Status, r.Body)
	}
	redeliver := url.Values{"csrf": {consoleToken}, "store": {"memory"}, "k": {"shop:" + order}, "force": {"yes"}, "again": {"yes"}}

	for _, host := range []string{fmt.Sprintf("evil.test:%d", open), "evil.test", fmt.Sprintf("127.0.0.1.evil.test:%d", open)} {
		for _, path := range []string{"/console/", "/console/key?store=memory&k=shop%3AR-1", "/console/reconcile"} {
			st, body := hostRequest(t, http.MethodGet, open, host, path, nil, "")
			if st != http.StatusForbidden || strings.Contains(body, consoleToken) || strings.Contains(body, "<form") {
				t.Errorf("GET %s with Host %s: %d, want 403 without a page or its token:\n%.300s", path, host, st, body)
			}
		}
		if st, _ := hostRequest(t, http.MethodPost, open, host, "/console/redeliver", redeliver, ""); st != http.StatusForbidden {
			t.Errorf("redeliver force=yes with Host %s: %d, want 403", host, st)
		}
	}
	if n := be.Count(order); n != 1 {
		t.Fatalf("the backend ran the answered payment %d times, want 1: a rebinding page re-ran it", n)
	}

	// Under loopback names the console serves, and the action runs.
	for _, host := range []string{fmt.Sprintf("localhost:%d", open), fmt.Sprintf("127.0.0.1:%d", open), fmt.Sprintf("[::1]:%d", open), "localhost"} {
		if st, body := hostRequest(t, http.MethodGet, open, host, "/console/", nil, ""); st != http.StatusOK || !strings.Contains(body, "Overview") {
			t.Errorf("GET /console/ with Host %s: %d, want the overview", host, st)
		}
	}
	if st, _ := hostRequest(t, http.MethodPost, open, fmt.Sprintf("localhost:%d", open), "/console/redeliver", redeliver, ""); st != http.StatusSeeOther {
		t.Fatalf("redeliver from the console's own loopback page: %d, want 303", st)
	}
	if n := be.Count(order); n != 2 {
		t.Fatalf("the backend ran %d times after the one legitimate redelivery, want 2", n)
	}

	// Behind basic_auth: the console has authentication of its own.
	if st, _ := hostRequest(t, http.MethodGet, auth, fmt.Sprintf("evil.test:%d", auth), "/console/", nil, ""); st != http.StatusUnauthorized {
		t.Errorf("basic_auth console, foreign name, no password: %d, want 401", st)
	}
	if st, _ := hostRequest(t, http.MethodGet, auth, fmt.Sprintf("10.1.2.3:%d", auth), "/console/", nil, "ops"); st != http.StatusOK {
		t.Errorf("basic_auth console, another name, with the password: %d, want 200", st)
	}

	// `hosts` names one more.
	if st, _ := hostRequest(t, http.MethodGet, named, fmt.Sprintf("ops.internal:%d", named), "/console/", nil, ""); st != http.StatusOK {
		t.Errorf("console with hosts ops.internal, Host ops.internal: %d, want 200", st)
	}
	if st, _ := hostRequest(t, http.MethodGet, named, fmt.Sprintf("evil.test:%d", named), "/console/", nil, ""); st != http.StatusForbidden {
		t.Errorf("console with hosts ops.internal, Host evil.test: %d, want 403", st)
	}

	// A site that names its host serves it, under any prefix.
	if st, body := hostRequest(t, http.MethodGet, site, fmt.Sprintf("ops.test:%d", site), "/ops/console/", nil, ""); st != http.StatusOK || !strings.Contains(body, "Overview") {
		t.Errorf("console on the site ops.test, Host ops.test: %d, want the overview", st)
	}
}

// TestConsoleRebindingBrowser: DNS rebinding in a real Chromium, told to
// resolve evil.test to 127.0.0.1. A page on http://evil.test:<port> (the
// attacker's, now answered by the gateway) reads the console under its
// own name and posts a forced redelivery with what it found, and again
// with the console's real token: both are refused, and the backend ran
// the answered payment once. Navigating to the console under that name
// shows the refusal, not the overview.
func TestConsoleRebindingBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	be := gatewaytest.NewBackend(t)
	base, open, _, _, _ := rebindingGateway(t, be)
	const order = "R-2"
	if r := postShop(t, base, order); r.Status != 200 {
		t.Fatalf("notification: %d %q", r.Status, r.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bctx := startChromium(t, ctx,
		chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1"),
		chromedp.Flag("disable-features", "HttpsUpgrades"))
	evil := fmt.Sprintf("http://evil.test:%d", open)

	// The attacker's page: any path of the name, now at the gateway.
	if err := chromedp.Do(bctx, chromedp.Navigate(evil+"/")); err != nil {
		t.Fatal(err)
	}
	// Its script reads the console under its own name, takes the token
	// from the page, and posts a forced redelivery with it; then again
	// with the console's real token, as if it had it.
	script := `(async () => {
		const page = await fetch("/console/key?store=memory&k=shop%3A` + order + `");
		const html = await page.text();
		const m = html.match(/name="csrf" value="([^"]+)"/);
		const post = async (tok) => (await fetch("/console/redeliver", {method: "POST",
			body: new URLSearchParams({csrf: tok, store: "memory", k: "shop:` + order + `", force: "yes", again: "yes"})})).status;
		const found = m ? m[1] : "";
		return [page.status, found ? 1 : 0, found ? await post(found) : 0, await post("` + consoleToken + `")].join(",");
	})()`
	got, err := chromedp.Run(bctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("the rebinding page's script: %v", err)
	}
	t.Logf("page status, token found, post with it, post with the real token: %s", got)
	if got != "403,0,0,403" {
		t.Errorf("rebinding page: %s, want 403,0,0,403 (the page refused, no token, the forced redelivery refused)", got)
	}
	if n := be.Count(order); n != 1 {
		t.Fatalf("the backend ran the answered payment %d times, want 1: the rebinding page re-ran it", n)
	}

	// Navigating there shows the refusal, not the console.
	if err := chromedp.Do(bctx, chromedp.Navigate(evil+"/console/")); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "does not answer for evil.test") || strings.Contains(text, "Overview") {
		t.Errorf("the console under evil.test shows:\n%.300s", text)
	}
	// The same browser at the loopback name gets the console.
	if err := chromedp.Do(bctx, chromedp.Navigate(fmt.Sprintf("http://localhost:%d/console/", open)), chromedp.WaitVisible(chromedp.CSS("#failed"))); err != nil {
		t.Fatalf("the console at localhost: %v", err)
	}
}
