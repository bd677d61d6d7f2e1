package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"testing"
	"time"
)

var handleErrorsBlock = regexp.MustCompile(`(?ms)^\thandle_errors \{\n.*?^\t\}\n`)

// TestExampleHandleErrors: the handle_errors block of Caddyfile.example
// (and of docs/caddyfile.md) answers the gateway's refusals as
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
	readme, err := os.ReadFile("../docs/caddyfile.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("handle_errors {\n\t\trespond \"{err.status_code} {err.message}\"")) {
		t.Errorf("docs/caddyfile.md does not show the handle_errors block")
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
		{url.Values{"total_amount": {"9.90"}}, "400 key: {idempotency.form.out_trade_no} is empty"},
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
