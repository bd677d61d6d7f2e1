package caddymodule

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// copiedReturnSite is what a merchant writes first: the notify block
// copied for /return with `return business` (the legacy backend runs the
// payment on both channels), no `success` line, no on_duplicate. Each
// channel is then judged by Alipay's own rule for it: the notify by 200 +
// `success`, the browser's signed return by 2xx or 3xx.
const copiedReturnSite = `
	handle /alipay/notify {
		idempotency {
			platform alipay
			public_key {pub}
			store embedded {db}
			{extra}
		}
		reverse_proxy {backend}
	}
	handle /alipay/return {
		idempotency {
			platform alipay
			public_key {pub}
			return business
			store embedded {db}
			{extra}
		}
		reverse_proxy {backend}
	}
	handle /strict/return {
		idempotency {
			platform alipay
			public_key {pub}
			store embedded {db}
			scope strict
			return business
			success 200
		}
		reverse_proxy {backend}
	}`

// TestAlipayReturnRouteCopied: a return route copied from the notify
// route, its backend answering the browser with the shop's page (200) or
// a redirect (302). The return runs the business once; a config reload
// and the browser's second return change nothing (the page or redirect is
// replayed), and Alipay's notify gets `success` without reaching the
// backend. Before the return had its own rule, the page and the redirect
// were "failure" by the notify's rule: the key was released, and return,
// reload and notify ran the business three times.
func TestAlipayReturnRouteCopied(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.WriteFile(t, "alipay_public_key.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	alipay := platformtest.Alipay{Key: k}
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/notify"):
			return 200, "success", 0
		case strings.HasPrefix(order, "page-"):
			return 200, "<html><body>Thank you for your order " + order + "</body></html>", 0
		}
		return http.StatusFound, "", 0 // the legacy return handler redirects to the order page
	})
	db := filepath.Join(t.TempDir(), "idem.db")
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	port := freePort(t)
	config := func(extra string) string {
		site := strings.NewReplacer("{pub}", pub, "{backend}", be.addr(), "{db}", db, "{extra}", extra).Replace(copiedReturnSite)
		return fmt.Sprintf("{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n\tlog {\n\t\toutput file %s\n\t\tformat json\n\t\tlevel WARN\n\t}\n}\n"+
			"http://127.0.0.1:%d {\n%s\n}\n", logFile, port, site)
	}
	loadCaddyfile(t, config(""))
	t.Cleanup(func() { caddy.Stop() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitListening(t, base)

	returnOf := func(path, order string) delivery {
		return delivery{method: http.MethodGet, path: path,
			query: alipay.Query(t, platformtest.AlipayReturn(testAlipayAppID, order, "2026"+order, "30.00"))}
	}
	notifyOf := func(order string) delivery {
		return delivery{path: "/alipay/notify", ctype: "application/x-www-form-urlencoded; charset=utf-8",
			body: alipay.Body(t, platformtest.AlipayNotify(testAlipayAppID, order, "2026"+order, "TRADE_SUCCESS", "30.00"))}
	}
	orders := []string{"page-1", "redirect-1"}
	first := map[string]reply{}
	for _, order := range orders {
		r := send(t, base, order, returnOf("/alipay/return", order))
		if r.replayed || (r.status != 200 && r.status != http.StatusFound) {
			t.Fatalf("%s: first return got %d replayed=%v, want the shop's answer", order, r.status, r.replayed)
		}
		first[order] = r
	}

	// A config reload (another ttl), on the same port and store.
	loadCaddyfile(t, config("ttl 96h"))
	noRedirects.CloseIdleConnections() // the old server's kept-alive connections are closed
	waitListening(t, base)

	for _, order := range orders {
		want := first[order]
		r := send(t, base, order, returnOf("/alipay/return", order))
		if !r.replayed || r.status != want.status || r.body != want.body || r.header.Get("Location") != want.header.Get("Location") {
			t.Errorf("%s: second return got %d %q (Location %q) replayed=%v, want %d %q (Location %q) replayed", order,
				r.status, r.body, r.header.Get("Location"), r.replayed, want.status, want.body, want.header.Get("Location"))
		}
		n := send(t, base, order, notifyOf(order))
		if n.status != 200 || strings.TrimSpace(n.body) != "success" {
			t.Errorf("%s: Alipay's notify got %d %q, want 200 success", order, n.status, n.body)
		}
		if c := be.count(order); c != 1 {
			t.Errorf("%s: the business ran %d times, want once", order, c)
		}
	}
	if lines := logLines(t, logFile, "backend answered failure"); len(lines) != 0 {
		t.Errorf("a return or notify was judged a failure: %v", lines)
	}

	// A return route with a `success` line of statuses only (one with a
	// body judges the notify alone, returns_test.go): the redirect is a
	// failure by it, and the log says how to fix the route.
	if r := send(t, base, "redirect-2", returnOf("/strict/return", "redirect-2")); r.status != http.StatusFound || r.replayed {
		t.Fatalf("strict return: got %d replayed=%v, want the backend's 302", r.status, r.replayed)
	}
	eventually(t, 5*time.Second, "the failure's log line", func() bool {
		return len(logLines(t, logFile, "backend answered failure")) == 1
	})
	line := logLines(t, logFile, "backend answered failure")[0]
	hint, _ := line["hint"].(string)
	if !strings.Contains(hint, "browser return") || !strings.Contains(hint, "drop that line") {
		t.Errorf("the failure's log line should hint at the fix (the browser return's own rule), got %v", line)
	}
}
