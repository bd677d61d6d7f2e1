package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/caddyauth"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// renderKey renders a key's page for rec as the console would.
func renderKey(t *testing.T, rec *store.Record) string {
	t.Helper()
	v := &consolePage{Base: "/console/", Page: "key", Title: "Key " + rec.Key, Nonce: "n0nce", CSRF: "tok", Now: time.Now()}
	v.Key = newKeyDetail(app.New(), "memory", rec, admin.KeyState{State: string(rec.State)}, v.Now)
	var buf bytes.Buffer
	if err := consoleTemplates.ExecuteTemplate(&buf, "page", v); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestConsoleEscapes: markup in a notification's body, its key, a header
// and a failure's answer is shown as text, never as markup; credential
// headers are hidden.
func TestConsoleEscapes(t *testing.T) {
	evil := `<script>alert(1)</script>`
	for _, tc := range []struct{ name, ctype, body string }{
		{"json", "application/json", `{"note":"` + evil + `"}`},
		{"form", "application/x-www-form-urlencoded", "note=" + url.QueryEscape(evil)},
		{"xml", "text/xml", `<xml><note><![CDATA[` + evil + `]]></note></xml>`},
		{"text", "text/plain", evil},
		{"broken json", "application/json", `{"note":"` + evil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			rec := &store.Record{Key: "shop:" + evil, State: store.StateFailed, Copies: 1, AttemptCount: 1,
				FirstSeen: now, LastSeen: now, ExpiresAt: now.Add(time.Hour),
				Notification: &store.Notification{Method: "POST", URI: "/notify?x=" + evil, Host: "example.com",
					Header: http.Header{"Content-Type": {tc.ctype}, "X-Evil": {evil}, "Authorization": {"Bearer s3cret"},
						"Cookie": {"sid=s3cret"}, "X-Webhook-Token": {"s3cret"}},
					Body: []byte(tc.body), BodySize: int64(len(tc.body))},
				Attempts: []store.Attempt{{Start: now, Duration: time.Millisecond, Status: 500, Outcome: "failed", Body: []byte(evil)}},
			}
			page := renderKey(t, rec)
			if strings.Contains(page, "<script>alert") {
				t.Fatalf("unescaped markup on the page:\n%s", page)
			}
			if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
				t.Errorf("the markup is not shown as text")
			}
			if strings.Contains(page, "s3cret") {
				t.Errorf("a credential header's value is on the page")
			}
			// The only scripts are the page's own, with its nonce.
			for _, m := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1) {
				if m != `<script nonce="n0nce">` {
					t.Errorf("script tag %s", m)
				}
			}
		})
	}
}

// TestConsolePrettyBody: each format is recognised and laid out.
func TestConsolePrettyBody(t *testing.T) {
	for _, tc := range []struct {
		name, ctype, body string
		format, text      string
		fields            []headerRow
		truncated         bool
	}{
		{name: "json", ctype: "application/json; charset=utf-8", body: `{"a":{"b":[1,2]}}`, format: "JSON",
			text: "{\n  \"a\": {\n    \"b\": [\n      1,\n      2\n    ]\n  }\n}"},
		{name: "json sniffed", body: ` [1]`, format: "JSON", text: "[\n  1\n]"},
		{name: "form in order", ctype: "application/x-www-form-urlencoded", body: "z=1&a=%E4%B8%AD+x&empty=",
			format: "form", fields: []headerRow{{"z", "1"}, {"a", "中 x"}, {"empty", ""}}},
		{name: "xml", ctype: "text/xml", body: `<xml><return_code><![CDATA[SUCCESS]]></return_code><n>1</n></xml>`, format: "XML",
			text: "<xml>\n  <return_code>SUCCESS</return_code>\n  <n>1</n>\n</xml>"},
		{name: "cut json", ctype: "application/json", body: `{"a":`, format: "text", text: `{"a":`, truncated: true},
		{name: "binary", ctype: "application/octet-stream", body: "\xff\xfe\x00", format: "binary"},
		{name: "empty", format: "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := int64(len(tc.body))
			if tc.truncated {
				size += 10
			}
			p := newPrettyBody([]byte(tc.body), size, tc.ctype)
			if p.Format != tc.format || p.Text != tc.text || p.Truncated != tc.truncated {
				t.Errorf("got %s %q truncated=%v, want %s %q", p.Format, p.Text, p.Truncated, tc.format, tc.text)
			}
			if tc.fields != nil && gatewaytest.MustJSON(p.Fields) != gatewaytest.MustJSON(tc.fields) {
				t.Errorf("fields %v, want %v", p.Fields, tc.fields)
			}
		})
	}
}

// TestConsoleRefusesCrossSite: a POST from another site (its Origin, its
// Sec-Fetch-Site, or without the console's token) is refused with 403 and
// changes nothing; the same POST from the console's own page purges.
// Both mount points answer with links under their own prefix.
func TestConsoleRefusesCrossSite(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) { return 500, "down", 0 })
	base := gatewaytest.StartCaddy(t, consoleSite, "{backend}", be.Addr())
	const key = "shop:X-1"
	if r := postShop(t, base, "X-1"); r.Status != 500 {
		t.Fatalf("notification: %d", r.Status)
	}
	for _, prefix := range []string{"/console/", "/ops/idem/"} {
		resp, err := gatewaytest.Client.Get(base + prefix)
		if err != nil {
			t.Fatal(err)
		}
		var page bytes.Buffer
		page.ReadFrom(resp.Body)
		resp.Body.Close()
		want := `href="` + prefix + `key?k=shop%3AX-1&amp;store=memory"`
		if resp.StatusCode != 200 || !strings.Contains(page.String(), want) {
			t.Errorf("GET %s: %d, want a link %s in:\n%s", prefix, resp.StatusCode, want, page.String())
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("CSP %q", csp)
		}
	}

	send := func(path string, form url.Values, hdr map[string]string) int {
		t.Helper()
		return consolePost(t, base+path, form, hdr)
	}
	good := url.Values{"csrf": {consoleToken}, "store": {"memory"}, "k": {key}, "confirm": {"yes"}}
	noToken := url.Values{"store": {"memory"}, "k": {key}, "confirm": {"yes"}}
	wrongToken := url.Values{"csrf": {"guess"}, "store": {"memory"}, "k": {key}, "confirm": {"yes"}}
	for _, tc := range []struct {
		name string
		path string
		form url.Values
		hdr  map[string]string
	}{
		{"foreign origin", "/console/purge", good, map[string]string{"Origin": "http://evil.example"}},
		{"null origin", "/console/purge", good, map[string]string{"Origin": "null"}},
		{"cross-site fetch", "/console/purge", good, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"same-site fetch", "/ops/idem/purge", good, map[string]string{"Sec-Fetch-Site": "same-site"}},
		{"no token", "/console/purge", noToken, nil},
		{"wrong token", "/ops/idem/purge", wrongToken, map[string]string{"Sec-Fetch-Site": "same-origin"}},
		{"redeliver, foreign origin", "/console/redeliver", good, map[string]string{"Origin": "http://evil.example"}},
		{"redeliver, no token", "/console/redeliver", noToken, nil},
	} {
		if got := send(tc.path, tc.form, tc.hdr); got != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", tc.name, got)
		}
	}
	if _, err := (appData{gatewaytest.App(t)}).lookup(t.Context(), "memory", key); err != nil {
		t.Fatalf("a refused POST changed the key: %v", err)
	}
	if n := be.Count("X-1"); n != 1 {
		t.Fatalf("backend ran %d times, want 1: a refused redeliver ran it", n)
	}
	// The console's own form: same origin, its token.
	origin := map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin"}
	if got := send("/ops/idem/purge", good, origin); got != http.StatusSeeOther {
		t.Fatalf("same-origin purge: %d, want 303", got)
	}
	if _, err := (appData{gatewaytest.App(t)}).lookup(t.Context(), "memory", key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after the purge: %v", err)
	}
}

// TestConsoleCaddyfile: the directive adapts to the handler, in any route,
// with its one option; unknown ones are refused.
func TestConsoleCaddyfile(t *testing.T) {
	cf := `:8080 {
	route /console/* {
		idempotency_console {
			refresh 5s
		}
	}
}`
	out, _, err := gatewaytest.CaddyfileAdapter().Adapt([]byte(cf), nil)
	if err != nil {
		t.Fatal(err)
	}
	var anyCfg any
	if err := json.Unmarshal(out, &anyCfg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `{"handler":"idempotency_console","refresh":5000000000}`) {
		t.Errorf("adapted: %s", out)
	}
	for _, bad := range []string{"idempotency_console {\n\t\tbogus 1\n\t}", "idempotency_console extra", "idempotency_console {\n\t\trefresh soon\n\t}"} {
		if _, _, err := gatewaytest.CaddyfileAdapter().Adapt([]byte(":8080 {\n\troute {\n\t"+bad+"\n\t}\n}"), nil); err == nil {
			t.Errorf("%q adapted", bad)
		}
	}
}

// getPage GETs a console page and returns its HTML.
func getPage(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := gatewaytest.Client.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// section is the HTML of the overview's <section id="id">.
func section(page, id string) string {
	_, rest, ok := strings.Cut(page, `<section id="`+id+`">`)
	if !ok {
		return ""
	}
	s, _, _ := strings.Cut(rest, "</section>")
	return s
}

// TestConsoleDeadAndInFlight: a failed Stripe event whose retry window has
// passed is listed as dead, not failed; a key whose first copy is at the
// backend is listed in flight, and purging it without force is refused
// (409) while the backend still runs, so its next copy cannot run it twice.
func TestConsoleDeadAndInFlight(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	release := make(chan struct{})
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "slow" {
			<-release
			return 200, "ok", 0
		}
		return 503, "down", 0
	})
	base := gatewaytest.StartCaddy(t, `
	route /stripe {
		idempotency {
			platform stripe
			verify off
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
		idempotency_console
	}`, "{backend}", be.Addr())
	if r := gatewaytest.Post(t, base+"/stripe", "application/json", `{"id":"evt_old","type":"charge.succeeded"}`, http.Header{"X-Order": {"evt_old"}}); r.Status != 503 {
		t.Fatalf("stripe event: %d", r.Status)
	}
	done := make(chan gatewaytest.Reply, 1)
	go func() { done <- postShop(t, base, "slow") }()
	defer func() { close(release); <-done }()
	gatewaytest.Eventually(t, 10*time.Second, "the slow order at the backend", func() bool { return be.Count("slow") == 1 })

	_, page := getPage(t, base+"/console/")
	if s := section(page, "failed"); !strings.Contains(s, "stripe:evt_old") {
		t.Errorf("failed section lacks the fresh failure:\n%s", s)
	}
	if s := section(page, "inflight"); !strings.Contains(s, "shop:slow") || !strings.Contains(s, "in_flight") {
		t.Errorf("in-flight section:\n%s", s)
	}

	t.Cleanup(gatewaytest.App(t).SetClock(func() time.Time { return time.Now().Add(72*time.Hour + time.Minute) })) // past Stripe's 3 days
	_, page = getPage(t, base+"/console/")
	if s := section(page, "dead"); !strings.Contains(s, "stripe:evt_old") || !strings.Contains(s, `badge dead`) {
		t.Errorf("dead section lacks the event past its retry window:\n%s", s)
	}
	if s := section(page, "failed"); strings.Contains(s, "stripe:evt_old") {
		t.Errorf("a dead event is still listed as failed")
	}

	// The in-flight key's purge page asks for force, and a purge without
	// it is refused.
	status, page := getPage(t, base+"/console/purge?store=memory&k=shop%3Aslow")
	if status != 200 || !strings.Contains(page, `name="force"`) || !strings.Contains(page, "in flight") {
		t.Errorf("purge page for an in-flight key: %d\n%s", status, page)
	}
	form := url.Values{"csrf": {consoleToken}, "store": {"memory"}, "k": {"shop:slow"}, "confirm": {"yes"}}
	req, _ := http.NewRequest(http.MethodPost, base+"/console/purge", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := gatewaytest.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("purge of an in-flight key without force: %d, want 409", resp.StatusCode)
	}
	if rec, err := (appData{gatewaytest.App(t)}).lookup(t.Context(), "memory", "shop:slow"); err != nil || rec.State != store.StateInFlight {
		t.Errorf("after the refused purge: %v %v", rec, err)
	}
}

// consoleClient shows the console's redirects instead of following them.
var consoleClient = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// consolePost posts form to the console at u with the extra headers hdr,
// and returns the status.
func consolePost(t *testing.T, u string, form url.Values, hdr map[string]string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := consoleClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestConsoleReadmeMount: the runbook's console site (docs/operations.md), as written (with a
// real password hash), sends /console to /console/, which asks for the
// password and then shows the overview.
func TestConsoleReadmeMount(t *testing.T) {
	testenv.Slow(t, "runs for seconds: bcrypt at the runbook's cost")
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```caddyfile\nops.example.com {\n")
	block, _, ok2 := strings.Cut(block, "\n}\n```")
	if !ok || !ok2 || !strings.Contains(block, "idempotency_console") {
		t.Fatal("docs/operations.md has no ops.example.com console site")
	}
	hash, err := caddyauth.BcryptHash{}.Hash([]byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	block = strings.Replace(block, "$2a$14$...", string(hash), 1)
	base := gatewaytest.StartCaddy(t, block)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, auth bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if auth {
			req.SetBasicAuth("ops", "s3cret")
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := get("/console", false); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /console: %d Location %q, want a redirect to /console/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := get("/console/", false); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /console/ without the password: %d, want 401", resp.StatusCode)
	}
	if resp := get("/console/", true); resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET /console/ with the password: %d %q, want the overview", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
