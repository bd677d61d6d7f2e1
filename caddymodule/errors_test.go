package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

var handleErrorsBlock = regexp.MustCompile(`(?ms)^\thandle_errors \{\n.*?^\t\}\n`)

// TestExampleHandleErrors: the handle_errors block of Caddyfile.example
// (and of the README) answers the gateway's refusals as
// "<status> <message>", the message as it is, without HTML escaping.
func TestExampleHandleErrors(t *testing.T) {
	example, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	block := handleErrorsBlock.Find(example)
	if block == nil || !bytes.Contains(block, []byte(`respond "{err.status_code} {err.message}"`)) {
		t.Fatalf("Caddyfile.example has no handle_errors block answering {err.status_code} {err.message}")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("handle_errors {\n\t\trespond \"{err.status_code} {err.message}\"")) {
		t.Errorf("README.md does not show the handle_errors block")
	}
	be := newBackend(t)
	be.setAnswer(func(string, int, *http.Request) (int, string, time.Duration) { return 200, "success", 0 })
	base := startCaddy(t, `
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope demo
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
`+string(block))
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"total_amount": {"9.90"}}, "400 key: {idempotency.form.out_trade_no} is empty in this request"},
		{url.Values{"out_trade_no": {"<o-1>&"}}, "success"},
	} {
		resp, err := client.PostForm(base+"/notify", tc.form)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != tc.want {
			t.Errorf("POST %v: got %d %q, want %q", tc.form, resp.StatusCode, body, tc.want)
		}
	}
}

// TestAdminAndCLINotHTMLEscaped: the admin API's errors and records, and
// the CLI's output, show "<" and ">" as they are, not as \u003c \u003e.
func TestAdminAndCLINotHTMLEscaped(t *testing.T) {
	be := newBackend(t)
	g := startGateway(t, `
	idempotency {
		key {idempotency.form.out_trade_no}
		scope demo
		store memory
	}
	reverse_proxy `+be.addr())
	status, body := g.adminDo(t, http.MethodGet, "/idempotency/keys/")
	if status != http.StatusBadRequest || !strings.Contains(body, "missing key: /idempotency/keys/<key>") {
		t.Errorf("GET /idempotency/keys/: got %d %s, want 400 naming /idempotency/keys/<key>", status, body)
	}
	status, body = g.adminDo(t, http.MethodGet, "/idempotency/nope")
	if status != http.StatusNotFound || !strings.Contains(body, "try /idempotency/keys/<key>") {
		t.Errorf("GET /idempotency/nope: got %d %s", status, body)
	}
	notify(t, g.base, "<a&b>")
	status, body = g.adminDo(t, http.MethodGet, "/idempotency/keys/"+url.PathEscape("demo:<a&b>"))
	if status != http.StatusOK || !strings.Contains(body, `"key": "demo:<a&b>"`) {
		t.Errorf("GET a key with <, & and >: got %d %s", status, body)
	}
	out, err := runCLI(t, "in-flight", "--all", "--address", g.admin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := printJSON(&buf, recordView{Key: "demo:<a&b>"}); err != nil || !strings.Contains(buf.String(), `"demo:<a&b>"`) {
		t.Errorf("printJSON escaped the key: %s", buf.String())
	}
	for _, s := range []string{body, out, buf.String()} {
		if strings.Contains(s, `\u003c`) || strings.Contains(s, `\u0026`) {
			t.Errorf("HTML-escaped output: %s", s)
		}
	}
}
