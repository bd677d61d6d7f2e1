package gatewaytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/standard"
	_ "github.com/caddyserver/caddy/v2/modules/filestorage"
	"github.com/spf13/cobra"
)

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	handedMu.Lock()
	defer handedMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		// The kernel may hand a port it just took back again: a gateway's
		// admin endpoint and its site once got the same one, and Caddy,
		// binding both with SO_REUSEPORT, shared it between them (a
		// notification answered by the admin API's 404).
		if !handed[port] {
			handed[port] = true
			return port
		}
	}
}

// handed: the ports FreePort returned in this process, never returned twice.
var (
	handedMu sync.Mutex
	handed   = map[int]bool{}
)

// ReservePort returns a loopback address nothing listens on (yet).
func ReservePort(t testing.TB) string { return fmt.Sprintf("127.0.0.1:%d", FreePort(t)) }

// Globals are a test config's global options.
type Globals struct {
	Admin string // the admin endpoint; "" turns it off
	Log   string // the body of the log block; "" logs errors only
}

// StartCaddy runs the real module in this process: the site block is
// adapted from Caddyfile text (after replacements, old/new pairs) and
// loaded on a free loopback port. It returns the gateway's base URL.
func StartCaddy(t testing.TB, siteBody string, replacements ...string) string {
	t.Helper()
	return StartCaddyWith(t, Globals{}, siteBody, replacements...)
}

// StartCaddyWith is StartCaddy with other global options.
func StartCaddyWith(t testing.TB, g Globals, siteBody string, replacements ...string) string {
	t.Helper()
	if g.Admin == "" {
		g.Admin = "off"
	}
	if g.Log == "" {
		g.Log = "level ERROR"
	}
	port := FreePort(t)
	body := strings.NewReplacer(replacements...).Replace(siteBody)
	cf := fmt.Sprintf(`{
	admin %s
	auto_https off
	persist_config off
	storage file_system %s
	log {
		%s
	}
}
http://127.0.0.1:%d {
%s
}
`, g.Admin, t.TempDir(), g.Log, port, body)
	LoadCaddyfile(t, cf)
	t.Cleanup(func() { caddy.Stop() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	WaitListening(t, base)
	return base
}

// CaddyfileAdapter is the http server type's Caddyfile adapter.
func CaddyfileAdapter() caddyfile.Adapter {
	return caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
}

// LoadCaddyfile adapts cf and loads it into this process's Caddy.
func LoadCaddyfile(t testing.TB, cf string) {
	t.Helper()
	cfgJSON, warn, err := CaddyfileAdapter().Adapt([]byte(cf), nil)
	if err != nil {
		t.Fatalf("adapting Caddyfile: %v\n%s", err, cf)
	}
	for _, w := range warn {
		if !strings.Contains(w.Message, "not formatted") {
			t.Logf("adapt warning: %v", w)
		}
	}
	if err := caddy.Load(cfgJSON, true); err != nil {
		t.Fatalf("loading config: %v\n%s", err, cfgJSON)
	}
	// A reload shuts the old server down, closing its kept-alive
	// connections; a POST that Client sends on one it has not yet seen
	// close fails with EOF and is not retried (not idempotent).
	Client.CloseIdleConnections()
}

// WaitListening waits until something accepts connections at base.
func WaitListening(t testing.TB, base string) {
	t.Helper()
	u, _ := url.Parse(base)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", u.Host, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway at %s never listened: %v", base, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitServing waits until the gateway answers an HTTP request: after a
// reload, a connection queued on the listening socket Caddy swapped out
// is reset before any handler sees it.
func WaitServing(t testing.TB, base string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := Client.Get(base + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway at %s never answered after the reload: %v", base, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Gateway is a running in-process gateway with its admin endpoint on.
type Gateway struct {
	Base  string // the site, http://127.0.0.1:port
	Admin string // the admin endpoint, 127.0.0.1:port
}

// StartGateway is StartCaddy with the admin endpoint on a free loopback
// port: the admin API, the CLI and /metrics are reached through it.
func StartGateway(t testing.TB, siteBody string, replacements ...string) Gateway {
	t.Helper()
	admin := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	g := Gateway{Base: StartCaddyWith(t, Globals{Admin: admin}, siteBody, replacements...), Admin: admin}
	WaitListening(t, "http://"+g.Admin)
	return g
}

// AdminDo sends one request to the admin endpoint as curl would.
func (g Gateway) AdminDo(t testing.TB, method, uri string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+g.Admin+uri, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, uri, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// WaitReloaded waits, after a config load, until the site and the admin
// endpoint both answer: a load restarts the admin server, and the old
// site's server stops accepting only once its shutdown has run, which
// caddy.Load does not wait for.
func (g Gateway) WaitReloaded(t testing.TB) {
	t.Helper()
	WaitServing(t, g.Base)
	WaitServing(t, "http://"+g.Admin)
}

// AdminJSON is AdminDo decoding a 200 answer into v.
func (g Gateway) AdminJSON(t testing.TB, method, uri string, v any) {
	t.Helper()
	status, body := g.AdminDo(t, method, uri)
	if status != http.StatusOK {
		t.Fatalf("%s %s: got %d %s, want 200", method, uri, status, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("%s %s: decoding %q: %v", method, uri, body, err)
	}
}

// KeyURI is the admin path of a key.
func KeyURI(key string) string { return "/idempotency/keys/" + url.PathEscape(key) }

// NotifyRoute is the route most tests run: /notify keyed on the form's
// out_trade_no in scope demo, fingerprinted on total_amount. StartCaddy's
// replacements fill {store}, {backend} and {extra} (more subdirectives).
const NotifyRoute = `
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope demo
			fingerprint {idempotency.form.total_amount}
			{store}
			lock_ttl 2s
			in_flight wait 20s
			{extra}
		}
		reverse_proxy {backend}
	}`

// AsyncRoute is NotifyRoute delivered asynchronously (deliver async to
// http://{backend}, acked 200 "success").
const AsyncRoute = `
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope demo
			{store}
			lock_ttl 2s
			store_timeout 1s
			deliver async {
				to http://{backend}
				ack 200 success
				{extra}
			}
		}
	}`

// RunCLI runs `idemgate idempotency <args>` in this process, as the
// binary's command line does, and returns its standard output; errOut
// gets its standard error. The test must link the CLI (a blank import of
// caddymodule/command).
func RunCLI(t testing.TB, errOut io.Writer, args ...string) (string, error) {
	t.Helper()
	c, ok := caddycmd.Commands()["idempotency"]
	if !ok {
		t.Fatal("the idempotency command is not registered: import caddymodule/command")
	}
	root := &cobra.Command{Use: c.Name, Short: c.Short}
	c.CobraFunc(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}
