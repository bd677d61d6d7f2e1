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

var handleErrorsBlocks = regexp.MustCompile(`(?ms)^\thandle_errors[^{\n]*\{\n.*?^\t\}\n`)

// TestExampleHandleErrors: the handle_errors blocks of Caddyfile.example
// (and of docs/caddyfile.md) answer the gateway's refusals as
// "<status> <message>", the message as it is, without HTML escaping; and
// a backend that cannot be reached as "502 Bad Gateway", never with
// reverse_proxy's message, which names the upstream's address.
func TestExampleHandleErrors(t *testing.T) {
	example, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	blocks := handleErrorsBlocks.FindAll(example, -1)
	if len(blocks) == 0 || !bytes.Contains(bytes.Join(blocks, nil), []byte(`respond "{err.status_code} {err.message}"`)) {
		t.Fatalf("Caddyfile.example has no handle_errors block answering {err.status_code} {err.message}")
	}
	readme, err := os.ReadFile("../docs/caddyfile.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if !bytes.Contains(readme, b) {
			t.Errorf("docs/caddyfile.md does not show Caddyfile.example's block\n%s", b)
		}
	}
	be := newBackend(t)
	be.setAnswer(func(string, int, *http.Request) (int, string, time.Duration) { return 200, "success", 0 })
	down := "127.0.0.1:" + itoa(freePort(t)) // nothing listens there
	base := startCaddy(t, `
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope demo
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
	handle /down {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope down
			store memory
		}
		reverse_proxy `+down+`
	}
`+string(bytes.Join(blocks, nil)))
	for _, tc := range []struct {
		path string
		form url.Values
		want string
	}{
		{"/notify", url.Values{"total_amount": {"9.90"}}, "400 key: {idempotency.form.out_trade_no} is empty"},
		{"/notify", url.Values{"out_trade_no": {" \t "}}, "400 no idempotency key in this request"},
		{"/notify", url.Values{"out_trade_no": {"<o-1>&"}}, "success"},
		{"/down", url.Values{"out_trade_no": {"o-2"}}, "502 Bad Gateway"},
	} {
		resp, err := client.PostForm(base+tc.path, tc.form)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != tc.want {
			t.Errorf("POST %s %v: got %d %q, want %q", tc.path, tc.form, resp.StatusCode, body, tc.want)
		}
		if bytes.Contains(body, []byte("127.0.0.1")) || bytes.Contains(body, []byte("dial")) {
			t.Errorf("POST %s: the platform was told an address: %q", tc.path, body)
		}
	}
}
