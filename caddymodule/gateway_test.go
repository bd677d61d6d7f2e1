package caddymodule

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/standard"
	_ "github.com/caddyserver/caddy/v2/modules/filestorage"
)

// backend is a stand-in legacy backend for the gateway tests: it counts how
// often each order reached it and answers as the test tells it to.
type backend struct {
	t   testing.TB
	srv *http.Server
	ln  net.Listener

	mu    sync.Mutex
	hits  map[string]int
	total atomic.Int64
	// answer decides the answer for the n-th (1-based) hit of an order.
	answer func(order string, n int, r *http.Request) (status int, body string, delay time.Duration)
}

func newBackend(t testing.TB) *backend { return newBackendAt(t, "127.0.0.1:0") }

// newBackendAt starts the backend on addr.
func newBackendAt(t testing.TB, addr string) *backend {
	b := &backend{t: t, hits: map[string]int{}}
	b.answer = func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 200, "ok " + order, 0
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b.ln = ln
	b.srv = &http.Server{Handler: b}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

func (b *backend) addr() string { return b.ln.Addr().String() }

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	order := r.Header.Get("X-Order")
	if order == "" {
		v, _ := url.ParseQuery(string(body))
		order = v.Get("out_trade_no")
	}
	b.mu.Lock()
	b.hits[order]++
	n := b.hits[order]
	answer := b.answer
	b.mu.Unlock()
	b.total.Add(1)
	status, text, delay := answer(order, n, r)
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Backend", "legacy")
	w.Header().Set("Set-Cookie", "session=secret")
	w.WriteHeader(status)
	io.WriteString(w, text)
}

func (b *backend) count(order string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[order]
}

func (b *backend) setAnswer(f func(order string, n int, r *http.Request) (int, string, time.Duration)) {
	b.mu.Lock()
	b.answer = f
	b.mu.Unlock()
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// caddyGlobals are a test config's global options.
type caddyGlobals struct {
	admin string // the admin endpoint; "" turns it off
	log   string // the body of the log block; "" logs errors only
}

// startCaddy runs the real module in this process: the site block is
// adapted from Caddyfile text (after replacements) and loaded on a free
// loopback port. It returns the gateway's base URL.
func startCaddy(t testing.TB, siteBody string, replacements ...string) string {
	t.Helper()
	return startCaddyWith(t, caddyGlobals{}, siteBody, replacements...)
}

// startCaddyWith is startCaddy with other global options.
func startCaddyWith(t testing.TB, g caddyGlobals, siteBody string, replacements ...string) string {
	t.Helper()
	if g.admin == "" {
		g.admin = "off"
	}
	if g.log == "" {
		g.log = "level ERROR"
	}
	port := freePort(t)
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
`, g.admin, t.TempDir(), g.log, port, body)
	loadCaddyfile(t, cf)
	t.Cleanup(func() { caddy.Stop() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitListening(t, base)
	return base
}

// loadCaddyfile adapts cf and loads it into this process's Caddy.
func loadCaddyfile(t testing.TB, cf string) {
	t.Helper()
	cfgJSON, warn, err := caddyfileAdapter().Adapt([]byte(cf), nil)
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
}

func waitListening(t testing.TB, base string) {
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

// waitServing waits until the gateway answers an HTTP request: after a
// reload, a connection queued on the listening socket Caddy swapped out
// is reset before any handler sees it.
func waitServing(t testing.TB, base string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(base + "/")
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

// reply is what a client got.
type reply struct {
	status   int
	body     string
	header   http.Header
	replayed bool
}

var client = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		MaxIdleConnsPerHost: 200,
	},
}

// notify posts a form notification for order.
func notify(t testing.TB, base, order string, extra ...string) reply {
	t.Helper()
	form := url.Values{"out_trade_no": {order}, "total_amount": {"9.90"}}
	for i := 0; i+1 < len(extra); i += 2 {
		form.Set(extra[i], extra[i+1])
	}
	return post(t, base+"/notify", "application/x-www-form-urlencoded", form.Encode(), nil)
}

func post(t testing.TB, u, ctype, body string, hdr http.Header) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", u, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), header: resp.Header,
		replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}

// storm sends n copies at once and returns the replies.
func storm(t testing.TB, n int, send func(i int) reply) []reply {
	t.Helper()
	out := make([]reply, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = send(i)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func itoa(i int) string { return strconv.Itoa(i) }
