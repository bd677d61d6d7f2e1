package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// These tests run the built idemgate binary as separate processes: several
// gateway instances sharing one store, a restart, and a gateway killed with
// SIGKILL in the middle of a request.

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// gatewayBinary builds ./cmd/idemgate once per test run.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "idemgate-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "idemgate")
		cmd := exec.Command("go", "build", "-o", binPath, "../cmd/idemgate")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// gatewayProc is one idemgate process.
type gatewayProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	base string
	cf   string
	home string
	log  string // the path of the process's log output
}

// startProc runs idemgate with a site on a free port whose body is
// siteBody; home holds its data directory (reuse it to restart).
func startProc(t *testing.T, home, siteBody string) *gatewayProc {
	t.Helper()
	return startProcWith(t, home, "", siteBody)
}

// startProcWith is startProc with more global options.
func startProcWith(t *testing.T, home, globals, siteBody string) *gatewayProc {
	t.Helper()
	gatewayBinary(t)
	port := freePort(t)
	cf := filepath.Join(t.TempDir(), "Caddyfile")
	text := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
%s
}
http://127.0.0.1:%d {
%s
}
`, globals, port, siteBody)
	if err := os.WriteFile(cf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port), cf: cf, home: home}
	p.start()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *gatewayProc) start() {
	p.t.Helper()
	p.cmd = exec.Command(binPath, "run", "--config", p.cf, "--adapter", "caddyfile")
	p.cmd.Env = append(os.Environ(), "HOME="+p.home, "XDG_DATA_HOME="+filepath.Join(p.home, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(p.home, "config"))
	p.log = filepath.Join(p.t.TempDir(), "idemgate.log")
	logf, err := os.Create(p.log)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	waitListening(p.t, p.base)
}

// kill ends the process at once, as a crash would.
func (p *gatewayProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil && p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// stop ends the process gracefully.
func (p *gatewayProc) stop() {
	p.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// TestInstancesShareRedis: copies spread over three gateway processes that
// share one Redis reach the backend once in all.
func TestInstancesShareRedis(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	rs := redistest.Start(t)
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 200, "success", 100 * time.Millisecond
	})
	site := fmt.Sprintf(`
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store redis %s
	}
	reverse_proxy %s`, rs.Addr(), be.addr())
	var gws []*gatewayProc
	for range 3 {
		gws = append(gws, startProc(t, t.TempDir(), site))
	}
	for round := range 3 {
		order := "multi-" + itoa(round)
		replies := storm(t, 90, func(i int) reply { return notify(t, gws[i%3].base, order) })
		for i, r := range replies {
			if r.status != 200 || r.body != "success" {
				t.Fatalf("copy %d via gateway %d: got %d %q", i, i%3, r.status, r.body)
			}
		}
		if got := be.count(order); got != 1 {
			t.Fatalf("backend ran %d times for %s across 3 gateways, want 1", got, order)
		}
	}
}

// TestEmbeddedSurvivesRestart: the embedded store (the default, under
// Caddy's data directory) remembers answers across a gateway restart.
func TestEmbeddedSurvivesRestart(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	be := newBackend(t)
	home := t.TempDir()
	site := fmt.Sprintf(`
	idempotency {
		key k:{idempotency.form.out_trade_no}
	}
	reverse_proxy %s`, be.addr())
	gw := startProc(t, home, site)
	if r := notify(t, gw.base, "restart-1"); r.status != 200 || r.replayed {
		t.Fatalf("first copy: %d replayed=%v", r.status, r.replayed)
	}
	gw.stop()
	if _, err := os.Stat(filepath.Join(home, "data", "caddy", "idempotency", "idemgate.db")); err != nil {
		t.Fatalf("the default embedded store is not under Caddy's data directory: %v", err)
	}
	gw.start()
	if r := notify(t, gw.base, "restart-1"); r.status != 200 || !r.replayed {
		t.Fatalf("copy after restart: got %d replayed=%v, want the replayed answer", r.status, r.replayed)
	}
	if be.count("restart-1") != 1 {
		t.Errorf("backend ran %d times, want 1", be.count("restart-1"))
	}
}

// TestKilledMidRequest: a gateway killed while its copy is at the backend
// leaves a claim that blocks copies until lock_ttl runs out; then the
// platform's retry is forwarded exactly once.
func TestKilledMidRequest(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	rs := redistest.Start(t)
	be := newBackend(t)
	atBackend := make(chan struct{}, 1)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			atBackend <- struct{}{}
			return 200, "success", 5 * time.Second
		}
		return 200, "success", 0
	})
	site := fmt.Sprintf(`
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store redis %s
		lock_ttl 3s
		in_flight reject
	}
	reverse_proxy %s`, rs.Addr(), be.addr())
	a := startProc(t, t.TempDir(), site)
	b := startProc(t, t.TempDir(), site)
	go func() {
		// Its gateway dies: this client sees an error, as the platform would.
		resp, err := client.PostForm(a.base+"/notify", map[string][]string{"out_trade_no": {"kill-1"}, "total_amount": {"9.90"}})
		if err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-atBackend:
	case <-time.After(10 * time.Second):
		t.Fatal("the first copy never reached the backend")
	}
	// Killed once the copy has been at the backend longer than keepAfter
	// (its notification is then journaled on the claim).
	time.Sleep(keepAfter + 500*time.Millisecond)
	a.kill()
	killed := time.Now()
	if r := notify(t, b.base, "kill-1"); r.status != http.StatusConflict {
		t.Fatalf("copy right after the kill: got %d, want 409 (the dead gateway's claim holds)", r.status)
	}
	// The copy was at the backend longer than keepAfter: its notification
	// was journaled on the claim, so when the claim runs out the record
	// stays, failed with no attempt, for the operator to see and redeliver.
	st := store.NewRedis(redis.NewClient(&redis.Options{Addr: rs.Addr()}), store.RedisOptions{})
	defer st.Close()
	const full = "generic:k:kill-1"
	var rec *store.Record
	eventually(t, 10*time.Second, "the dead gateway's claim to run out, its record kept", func() bool {
		var err error
		rec, err = st.Lookup(context.Background(), full)
		return err == nil && rec.State == store.StateFailed
	})
	if rec.Notification == nil || !strings.Contains(string(rec.Notification.Body), "out_trade_no=kill-1") || rec.AttemptCount != 0 {
		t.Fatalf("record of the claim that ran out: notification %+v, %d attempts", rec.Notification, rec.AttemptCount)
	}
	page, err := st.List(context.Background(), store.ListQuery{State: store.StateFailed, Limit: 10})
	if err != nil || len(page.Records) != 1 || page.Records[0].Key != full {
		t.Fatalf("failed listing: %+v %v, want the claim that ran out", page.Records, err)
	}
	// After lock_ttl the claim is gone: retries go through, once.
	var r reply
	eventually(t, 10*time.Second, "the dead gateway's claim to expire", func() bool {
		r = notify(t, b.base, "kill-1")
		return r.status != http.StatusConflict
	})
	// The claim was renewed every lock_ttl/3 until the kill, so it lives
	// at least 2/3 of lock_ttl after it, however late the kill came.
	if since := time.Since(killed); since < 2*time.Second {
		t.Errorf("the claim expired %v after the kill, before 2/3 of lock_ttl (3s)", since)
	}
	if r.status != 200 || r.replayed {
		t.Fatalf("retry after lock_ttl: got %d replayed=%v, want a forwarded 200", r.status, r.replayed)
	}
	for range 5 {
		if r := notify(t, b.base, "kill-1"); !r.replayed {
			t.Fatalf("later copy not replayed: %d", r.status)
		}
	}
	if got := be.count("kill-1"); got != 2 {
		t.Errorf("backend ran %d times, want 2 (the killed gateway's copy and one retry)", got)
	}
}

// TestBinaryCommands: the build lists the module and answers `version`.
func TestBinaryCommands(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	bin := gatewayBinary(t)
	out, err := exec.Command(bin, "list-modules").CombinedOutput()
	if err != nil {
		t.Fatalf("list-modules: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		listed[strings.TrimSpace(l)] = true
	}
	for _, mod := range []string{"idempotency", "http.handlers.idempotency", "http.handlers.idempotency_console", "admin.api.idempotency", "http.handlers.reverse_proxy",
		// each platform a guest module of the handler
		"http.handlers.idempotency.platforms.alipay", "http.handlers.idempotency.platforms.wechatpay", "http.handlers.idempotency.platforms.wechatpay_v2",
		"http.handlers.idempotency.platforms.stripe", "http.handlers.idempotency.platforms.paypal",
		"http.handlers.idempotency.platforms.standard_webhooks", "http.handlers.idempotency.platforms.generic"} {
		if !listed[mod] {
			t.Errorf("list-modules does not show %s", mod)
		}
	}
	out, err = exec.Command(bin, "version").CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) == 0 {
		t.Fatalf("version: %v %q", err, out)
	}
}

// TestStartupLine: one log line per handler at start names its platform,
// scope, store, ttl, lock_ttl and delivery mode.
func TestStartupLine(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	home := t.TempDir()
	db := filepath.Join(home, "keys.db")
	p := startProc(t, home, `
	idempotency {
		key demo:{idempotency.form.out_trade_no}
		store embedded `+db+`
		ttl 48h
		lock_ttl 20s
	}
	respond "ok"`)
	var line map[string]any
	eventually(t, 10*time.Second, "the start-up line", func() bool {
		b, _ := os.ReadFile(p.log)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "idempotency handler ready") && json.Unmarshal([]byte(l), &line) == nil {
				return true
			}
		}
		return false
	})
	want := map[string]any{"platform": "generic", "scope": "generic", "store": "embedded:" + db,
		"ttl": float64(48 * 3600), "lock_ttl": float64(20), "deliver": "sync"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("start-up line %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
}
