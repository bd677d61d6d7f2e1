package caddymodule

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestRedirectOrigin: the start of an on_duplicate redirect template that
// fixes where it goes, or why there is none.
func TestRedirectOrigin(t *testing.T) {
	for _, tc := range []struct{ tmpl, want string }{
		{"https://shop.example.com/orders/{idempotency.form.out_trade_no}", "https://shop.example.com/"},
		{"https://shop.example/paid?order={idempotency.form.out_trade_no}", "https://shop.example/"},
		{"http://localhost:9090/stats?order={idempotency.alipay.out_trade_no}", "http://localhost:9090/"},
		{"https://shop.example.com", "https://shop.example.com"},
		{"/paid?o={idempotency.form.a}", "/p"},
		{"/o/{idempotency.key}", "/o"},
		{"/", "/"},
		{"orders/{idempotency.form.a}", "orders/"},
		{"{idempotency.form.next}", ""},
		{"{http.request.uri.query.next}/x", ""},
		{"/{idempotency.form.next}", ""},
		{"//evil.example/{idempotency.form.a}", ""},
		{"//{idempotency.form.next}", ""},
		{`/\evil.example/{idempotency.form.a}`, ""},
		{"https://shop.example.com{idempotency.form.next}", ""},
		{"https://{idempotency.form.host}/orders", ""},
		{"https://shop.{idempotency.form.tld}/orders", ""},
		{"http{idempotency.form.rest}", ""},
		{"https:{idempotency.form.rest}", ""},
		{"https:///{idempotency.form.rest}", ""},
		{"a:b/{idempotency.form.rest}", ""},
	} {
		got, err := redirectOrigin(tc.tmpl)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("redirectOrigin(%q) = %q, %v; want %q", tc.tmpl, got, err, tc.want)
		}
	}
}

// TestValidateRefusesOpenRedirect: `idemgate validate` refuses an
// on_duplicate redirect whose scheme or host request content could choose
// (next=//evil.example would send the customer elsewhere from the
// merchant's domain), and passes the documented form.
func TestValidateRefusesOpenRedirect(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	site := func(redirect string) string {
		return "\tidempotency {\n\t\tkey k:{idempotency.form.out_trade_no}\n\t\tstore memory\n\t\ton_duplicate redirect `" + redirect +
			"`\n\t}\n\treverse_proxy 127.0.0.1:9"
	}
	for _, bad := range []string{
		"{idempotency.form.next}",
		"/{idempotency.form.next}",
		"//{idempotency.form.next}",
		`/\evil.example/{idempotency.form.next}`,
		"https://shop.example.com{idempotency.form.next}",
	} {
		out, err, _ := runValidate(t, t.TempDir(), site(bad), 30*time.Second)
		if err == nil || !strings.Contains(out, "request content must not choose where the customer is sent") {
			t.Errorf("validate with on_duplicate redirect %s: %v, want a refusal naming why:\n%s", bad, err, out)
		}
	}
	out, err, _ := runValidate(t, t.TempDir(), site("https://shop.example.com/orders/{idempotency.form.out_trade_no}"), 30*time.Second)
	if err != nil || !strings.Contains(out, "Valid configuration") {
		t.Errorf("validate with the documented redirect: %v\n%s", err, out)
	}
}

// TestOnDuplicateRedirectKeepsHost: on a running gateway, the documented
// template keeps its host for every hostile value a duplicate carries.
func TestOnDuplicateRedirectKeepsHost(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	base := gatewaytest.StartCaddy(t, `
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store memory
		on_duplicate redirect https://shop.example.com/orders/{idempotency.form.next}
	}
	reverse_proxy {backend}`, "{backend}", be.Addr())
	noFollow := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(next string) *http.Response {
		t.Helper()
		form := url.Values{"out_trade_no": {"T-1"}, "next": {next}}
		resp, err := noFollow.Post(base+"/", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post("first"); resp.StatusCode != 200 {
		t.Fatalf("first copy: %d", resp.StatusCode)
	}
	for _, next := range []string{"//evil.example/x", `/\evil.example`, "@evil.example/", "https://evil.example/", "..//..//evil.example", "%2F%2Fevil.example"} {
		resp := post(next)
		loc := resp.Header.Get("Location")
		u, err := url.Parse(loc)
		if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc, "https://shop.example.com/") || err != nil || u.Host != "shop.example.com" {
			t.Errorf("duplicate with next=%s: %d Location %q, want 302 on https://shop.example.com/", next, resp.StatusCode, loc)
		}
	}
	if n := be.Count("T-1"); n != 1 {
		t.Errorf("backend ran %d times, want 1", n)
	}
}
