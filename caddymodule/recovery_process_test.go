package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/internal/testenv"
)

// Recovery on the built binary: a redelivery enters the route that took
// the notification — through handle_path, past a rewrite, behind a
// remote_ip guard, after a restart — and the CLI's exit status follows the
// key's state afterwards.

// pathBackend is a backend that counts each order's hits and the paths
// they came to.
type pathBackend struct {
	srv    *http.Server
	addr   string
	mu     sync.Mutex
	hits   map[string]int
	paths  map[string][]string
	answer func(order string, n int) (int, string)
}

func newPathBackend(t *testing.T, answer func(order string, n int) (int, string)) *pathBackend {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &pathBackend{addr: ln.Addr().String(), hits: map[string]int{}, paths: map[string][]string{}, answer: answer}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		v, _ := url.ParseQuery(string(body))
		order := v.Get("out_trade_no")
		b.mu.Lock()
		b.hits[order]++
		n := b.hits[order]
		b.paths[order] = append(b.paths[order], r.URL.Path)
		answer := b.answer
		b.mu.Unlock()
		status, text := answer(order, n)
		w.WriteHeader(status)
		io.WriteString(w, text)
	})}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

func (b *pathBackend) count(order string) (int, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[order], append([]string(nil), b.paths[order]...)
}

func (b *pathBackend) setAnswer(f func(order string, n int) (int, string)) {
	b.mu.Lock()
	b.answer = f
	b.mu.Unlock()
}

// startProcSites runs idemgate on a Caddyfile with the admin endpoint at
// admin; sites is the Caddyfile after the global options.
func startProcSites(t *testing.T, home, adminAddr, sites string) *gatewayProc {
	t.Helper()
	gatewayBinary(t)
	cf := filepath.Join(t.TempDir(), "Caddyfile")
	text := fmt.Sprintf("{\n\tadmin %s\n\tauto_https off\n\tpersist_config off\n}\n%s\n", adminAddr, sites)
	if err := os.WriteFile(cf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{t: t, base: "http://" + adminAddr, cf: cf, home: home}
	p.start() // waits for the admin endpoint
	t.Cleanup(func() { p.kill() })
	return p
}

// cli runs the binary's `idempotency` command and returns its output and
// exit status.
func cli(t *testing.T, adminAddr string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binPath, append(append([]string{"idempotency"}, args...), "--address", adminAddr)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("idemgate %v: %v", args, err)
	return "", -1
}

// postFrom posts a form from the local address from (a platform's own
// address, on loopback).
func postFrom(t *testing.T, from, u, form string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
	resp, err := c.Post(u, "application/x-www-form-urlencoded", strings.NewReader(form))
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func adminGet(t *testing.T, adminAddr, uri string, v any) int {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + uri)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}

// TestRedeliverEntersItsRoute: four routes on one site. A failed
// notification redelivered from the CLI reaches its own backend once, at
// the path the route sends it to — through handle_path, past an async
// route's rewrite to a sibling's path, behind a remote_ip guard that a
// copy from localhost would not pass, and after a restart (the route has
// served nothing yet: the probe finds it) — while the sibling at /notify
// sees nothing. The CLI exits 0 only when the key is answered (async:
// queued, delivering) afterwards.
func TestRedeliverEntersItsRoute(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	fail := func(order string, n int) (int, string) {
		if strings.HasPrefix(order, "fail-") || n == 1 {
			return 500, "not yet " + order
		}
		return 200, "ok " + order
	}
	pay, async, guarded, sibling := newPathBackend(t, fail), newPathBackend(t, fail), newPathBackend(t, fail), newPathBackend(t, fail)
	port, adminAddr := freePort(t), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	sites := fmt.Sprintf(`http://127.0.0.1:%d {
	handle_path /pay/* {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope shop
		}
		reverse_proxy %s
	}
	handle /async/* {
		rewrite * /notify
		idempotency {
			key {idempotency.form.out_trade_no}
			scope asyncshop
			lock_ttl 1s
			deliver async {
				to http://%s
				ack 200 success
				retry 50ms 100ms
				give_up 700ms
			}
		}
	}
	@platform {
		path /guarded
		remote_ip 127.0.0.2/32
	}
	handle @platform {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope guarded
		}
		reverse_proxy %s
	}
	handle /guarded {
		respond "only the platform's addresses" 403
	}
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope sibling
		}
		reverse_proxy %s
	}
}`, port, pay.addr, async.addr, guarded.addr, sibling.addr)
	home := t.TempDir()
	p := startProcSites(t, home, adminAddr, sites)
	waitListening(t, base)

	// handle_path: the backend sees /notify, the sibling nothing.
	if st, _ := postFrom(t, "127.0.0.1", base+"/pay/notify", "out_trade_no=p-1"); st != 500 {
		t.Fatalf("first copy: %d, want the backend's 500", st)
	}
	out, code := cli(t, adminAddr, "redeliver", "shop:p-1")
	if n, paths := pay.count("p-1"); code != 0 || n != 2 || strings.Join(paths, ",") != "/notify,/notify" ||
		!strings.Contains(out, "answered") || !strings.Contains(out, "shop#1") {
		t.Fatalf("redeliver shop:p-1: exit %d, backend %d %v\n%s", code, n, paths, out)
	}
	// A key that fails again: the CLI says so and exits non-zero.
	postFrom(t, "127.0.0.1", base+"/pay/notify", "out_trade_no=fail-1")
	out, code = cli(t, adminAddr, "redeliver", "shop:fail-1")
	if n, _ := pay.count("fail-1"); code == 0 || n != 2 || !strings.Contains(out, "failed after the redelivery") {
		t.Fatalf("redeliver shop:fail-1: exit %d, backend %d\n%s", code, n, out)
	}

	// The async route rewrites to /notify, the sibling's path: its
	// redelivery is queued in its own scope and delivered to its own
	// backend.
	if st, body := postFrom(t, "127.0.0.1", base+"/async/x", "out_trade_no=fail-as"); st != 200 || body != "success" {
		t.Fatalf("async copy: %d %q, want the ack", st, body)
	}
	eventually(t, 10*time.Second, "the async key to read dead (give_up)", func() bool {
		var rec admin.RecordView
		adminGet(t, adminAddr, "/idempotency/keys/asyncshop:fail-as", &rec)
		return rec.State == "dead"
	})
	tries, _ := async.count("fail-as")
	async.setAnswer(func(order string, n int) (int, string) { return 200, "ok " + order })
	out, code = cli(t, adminAddr, "redeliver", "asyncshop:fail-as")
	if code != 0 || !strings.Contains(out, "asyncshop#1") {
		t.Fatalf("redeliver asyncshop:fail-as: exit %d\n%s", code, out)
	}
	eventually(t, 10*time.Second, "the redelivered async key delivered", func() bool {
		n, _ := async.count("fail-as")
		return n == tries+1
	})
	if _, paths := async.count("fail-as"); paths[len(paths)-1] != "/notify" {
		t.Fatalf("async backend paths %v, want /notify", paths)
	}

	// Behind remote_ip: the platform's copy came from 127.0.0.2.
	if st, _ := postFrom(t, "127.0.0.2", base+"/guarded", "out_trade_no=g-1"); st != 500 {
		t.Fatalf("guarded copy: %d", st)
	}
	if st, _ := postFrom(t, "127.0.0.1", base+"/guarded", "out_trade_no=g-x"); st != 403 {
		t.Fatalf("guarded route from localhost: %d, want 403 (the guard)", st)
	}
	postFrom(t, "127.0.0.2", base+"/guarded", "out_trade_no=g-2") // fails once; redelivered after the restart
	out, code = cli(t, adminAddr, "redeliver", "guarded:g-1")
	if n, _ := guarded.count("g-1"); code != 0 || n != 2 {
		t.Fatalf("redeliver guarded:g-1: exit %d, backend %d\n%s", code, n, out)
	}

	// After a restart the routes have served nothing: the probe finds the
	// guarded route by the journaled request, its address included.
	p.stop()
	p.start()
	waitListening(t, base)
	out, code = cli(t, adminAddr, "redeliver", "guarded:g-2")
	if n, _ := guarded.count("g-2"); code != 0 || n != 2 {
		t.Fatalf("redeliver guarded:g-2 after a restart: exit %d, backend %d\n%s", code, n, out)
	}
	postFrom(t, "127.0.0.1", base+"/pay/notify", "out_trade_no=p-3")
	p.stop()
	p.start()
	waitListening(t, base)
	out, code = cli(t, adminAddr, "redeliver", "shop:p-3")
	if n, paths := pay.count("p-3"); code != 0 || n != 2 || paths[1] != "/notify" {
		t.Fatalf("redeliver shop:p-3 after a restart: exit %d, backend %d %v\n%s", code, n, paths, out)
	}

	// An answered key is refused (its backend already ran it, and no
	// --force is proposed); an unknown one is an error.
	if out, code = cli(t, adminAddr, "redeliver", "shop:p-1"); code == 0 || !strings.Contains(out, "already ran it") || strings.Contains(out, "--force") {
		t.Fatalf("redeliver of an answered key: exit %d\n%s", code, out)
	}
	if _, code = cli(t, adminAddr, "redeliver", "shop:nope"); code == 0 {
		t.Fatal("redeliver of an unknown key exited 0")
	}
	for _, order := range []string{"p-1", "fail-1", "fail-as", "g-1", "g-2", "p-3"} {
		if n, _ := sibling.count(order); n != 0 {
			t.Errorf("the sibling route's backend saw %s %d times", order, n)
		}
	}
	if n, _ := pay.count("p-1"); n != 2 {
		t.Errorf("shop:p-1 ran %d times in all, want 2", n)
	}
}

// TestRedeliverStripeResigned: examples/stripe.Caddyfile as shipped
// (handle, rewrite * /notify, reverse_proxy), run by the built binary, in
// front of a backend that verifies Stripe-Signature with stripe-go's
// webhook package and a 1-second tolerance. An answered event redelivered
// with --force two seconds later reaches the backend (no Caddy empty 200)
// and is accepted: it carries a fresh signature over the same body, which
// the journal marks; the platform's own header, which stripe-go now
// refuses, stays the journaled one.
func TestRedeliverStripeResigned(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	const secret = "whsec_resign_test_secret"
	// Stripe's t= is whole seconds, so a signature made at x.95s is
	// already ~1s old at x+1.0: the backend's tolerance must exceed a
	// second by more than a loaded machine's delay, or a fresh signature
	// reads as stale (seen once under CI's load with 1s).
	const tolerance = 2 * time.Second
	var mu sync.Mutex
	var verified, refused int
	var bodies []string
	be := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := webhook.ValidatePayloadWithTolerance(body, r.Header.Get("Stripe-Signature"), secret, tolerance)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || r.URL.Path != "/notify" {
			refused++
			http.Error(w, fmt.Sprintf("refused at %s: %v", r.URL.Path, err), http.StatusBadRequest)
			return
		}
		verified++
		bodies = append(bodies, string(body))
		io.WriteString(w, "ok")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go be.Serve(ln)
	t.Cleanup(func() { be.Close() })

	cfText, err := os.ReadFile("../examples/stripe.Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "stripe_webhook_secret")
	os.WriteFile(secretFile, []byte(secret), 0o600)
	port, adminAddr := freePort(t), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cf := strings.NewReplacer(
		"http://localhost:8084", fmt.Sprintf("http://127.0.0.1:%d", port),
		"{file.idemgate-testkeys/stripe_webhook_secret}", "{file."+secretFile+"}",
		"127.0.0.1:9090", ln.Addr().String(),
		"storage file_system .idemgate-demo/local", "storage file_system "+filepath.Join(dir, "data")+"\n\tadmin "+adminAddr,
	).Replace(string(cfText))
	if !strings.Contains(cf, "rewrite * /notify") || !strings.Contains(cf, "admin "+adminAddr) {
		t.Fatalf("the example changed: %s", cf)
	}
	cfPath := filepath.Join(dir, "Caddyfile")
	os.WriteFile(cfPath, []byte(cf), 0o600)
	gatewayBinary(t)
	p := &gatewayProc{t: t, base: "http://" + adminAddr, cf: cfPath, home: dir}
	p.start()
	t.Cleanup(func() { p.kill() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitListening(t, base)

	body := platformtest.StripeEventAt("evt_redeliver_1", "payment_intent.succeeded", "pi_1", 990, time.Now())
	hdr := signer.StripeHeader(body, secret, time.Now())
	req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/stripe", strings.NewReader(string(body)))
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("first copy: %d", resp.StatusCode)
	}
	time.Sleep(2*tolerance + 100*time.Millisecond)
	if err := webhook.ValidatePayloadWithTolerance(body, hdr.Get("Stripe-Signature"), secret, tolerance); err == nil {
		t.Fatal("stripe-go still accepts the platform's header: the test proves nothing")
	}

	out, code := cli(t, adminAddr, "redeliver", "stripe:evt_redeliver_1", "--force", "--again")
	mu.Lock()
	v, r, got := verified, refused, append([]string(nil), bodies...)
	mu.Unlock()
	if code != 0 || v != 2 || r != 0 || got[1] != string(body) || !strings.Contains(out, "signed afresh") {
		t.Fatalf("forced redelivery: exit %d, backend verified %d, refused %d\n%s", code, v, r, out)
	}
	var rec admin.RecordView
	adminGet(t, adminAddr, "/idempotency/keys/stripe:evt_redeliver_1", &rec)
	last := rec.Attempts[len(rec.Attempts)-1]
	if rec.State != "answered" || len(rec.Attempts) != 2 || !last.Resigned || rec.Attempts[0].Resigned ||
		rec.Notification.Header.Get("Stripe-Signature") != hdr.Get("Stripe-Signature") || rec.Signature == nil || !rec.Signature.Resigned {
		t.Fatalf("record after the redelivery: %+v", rec)
	}
	// The secret that signed it afresh is shown nowhere.
	for _, args := range [][]string{{"inspect", "stripe:evt_redeliver_1", "--body"}, {"inspect", "stripe:evt_redeliver_1", "--body", "--json"}} {
		if out, code := cli(t, adminAddr, args...); code != 0 || strings.Contains(out, secret) || strings.Contains(out, "whsec_") {
			t.Errorf("%v: exit %d, shows the signing secret:\n%s", args, code, out)
		}
	}
}
