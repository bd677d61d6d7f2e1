package caddymodule

import (
	"context"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The fault suite, round two: the deployment around the gateway (the
// contract's "Faults, round two"). Each case runs on real processes and
// ends in runs-once, refused, or a clear start-up error.

// tryCaddy loads siteBody as startCaddy does, logging at WARN and above
// as JSON into a file, and returns the base URL, the log file and the
// load's error (the config is not running when it is set).
func tryCaddy(t *testing.T, siteBody string) (base, logFile string, err error) {
	t.Helper()
	logFile = filepath.Join(t.TempDir(), "caddy.log")
	port := freePort(t)
	cf := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	storage file_system %s
	log {
		output file %s
		format json
		level WARN
	}
}
http://127.0.0.1:%d {
%s
}
`, t.TempDir(), logFile, port, siteBody)
	cfgJSON, _, err := gatewaytest.CaddyfileAdapter().Adapt([]byte(cf), nil)
	if err != nil {
		t.Fatalf("adapting: %v\n%s", err, cf)
	}
	if err := caddy.Load(cfgJSON, true); err != nil {
		return "", logFile, err
	}
	t.Cleanup(func() { caddy.Stop() })
	base = fmt.Sprintf("http://127.0.0.1:%d", port)
	waitListening(t, base)
	return base, logFile, nil
}

// logHas waits up to within for a line of the log file containing every
// one of parts.
func logHas(t *testing.T, file string, within time.Duration, parts ...string) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, _ := os.ReadFile(file)
		for _, l := range strings.Split(string(b), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(l, p)
			}
			if all {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFaultRedisMayEvict: a Redis with maxmemory and volatile-lru (managed
// Redis's default) is refused at start with a message that says what
// eviction does and how to fix it; with allow_eviction the gateway starts
// and warns; on noeviction it starts quietly. The refusal opens no route:
// the notification that follows finds nothing listening.
func TestFaultRedisMayEvict(t *testing.T) {
	testenv.Slow(t, "fault: a Redis configured to evict")
	be := newBackend(t)
	site := func(addr, opts string) string {
		return `
	idempotency {
		key demo:{idempotency.form.out_trade_no}
		store redis ` + addr + ` {` + opts + `
		}
	}
	reverse_proxy ` + be.addr()
	}
	evicting := redistest.StartWith(t, redistest.Options{Args: []string{"--maxmemory", "2mb", "--maxmemory-policy", "volatile-lru"}})
	start := time.Now()
	_, _, err := tryCaddy(t, site(evicting.Addr(), ""))
	if err == nil {
		t.Fatal("the gateway started on a Redis that may evict its records")
	}
	for _, want := range []string{"maxmemory-policy volatile-lru", evicting.Addr(), "runs the backend a second time", "noeviction", "allow_eviction"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start-up error does not say %q: %v", want, err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("refusing took %v", d)
	}

	base, logFile, err := tryCaddy(t, site(evicting.Addr(), "\n\t\t\tallow_eviction"))
	if err != nil {
		t.Fatalf("allow_eviction: %v", err)
	}
	if !logHas(t, logFile, 2*time.Second, "Redis may evict", "volatile-lru") {
		t.Error("no warning about eviction at start with allow_eviction")
	}
	for range 2 {
		if r := notify(t, base, "ev-1"); r.status != 200 {
			t.Fatalf("notify: %d %s", r.status, r.body)
		}
	}
	if n := be.count("ev-1"); n != 1 {
		t.Fatalf("backend ran %d times, want 1", n)
	}
	caddy.Stop()

	quiet := redistest.StartWith(t, redistest.Options{Args: []string{"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"}})
	if _, logFile, err = tryCaddy(t, site(quiet.Addr(), "")); err != nil {
		t.Fatalf("noeviction: %v", err)
	}
	if logHas(t, logFile, 200*time.Millisecond, "Redis may evict") {
		t.Error("warned about eviction on noeviction")
	}
}

// TestFaultRedisOutOfMemory: at noeviction, another tenant fills Redis;
// every new notification is refused with 503 + Retry-After and never
// forwarded, and Redis does not grow past what it held. Once memory is
// freed, the platform's retry goes through once.
func TestFaultRedisOutOfMemory(t *testing.T) {
	testenv.Slow(t, "fault: a Redis out of memory")
	rs := redistest.StartWith(t, redistest.Options{Args: []string{"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"}})
	be := newBackend(t)
	base, _, err := tryCaddy(t, `
	idempotency {
		key demo:{idempotency.form.out_trade_no}
		store redis `+rs.Addr()+`
		journal_body off
	}
	reverse_proxy `+be.addr())
	if err != nil {
		t.Fatal(err)
	}
	c := rs.Client()
	ctx := context.Background()
	// The tenant fills the server, then small writes take what is left.
	for _, size := range []int{16 << 10, 64} {
		for i := 0; ; i++ {
			if i > 40000 {
				t.Fatal("the server never ran out of memory")
			}
			if err := c.Set(ctx, fmt.Sprintf("tenant:%d:%d", size, i), strings.Repeat("x", size), 0).Err(); err != nil {
				break
			}
		}
	}
	// Full to the byte is not a steady state: Redis frees buffers of its
	// own (a client's query buffer, a reply), and a claim of a few hundred
	// bytes then fits. The limit goes below what is used, so every write
	// is refused whatever Redis frees meanwhile.
	before := usedMemory(t, c)
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(before-128<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		order := fmt.Sprintf("oom-%d", i)
		r := notify(t, base, order)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Fatalf("%s at maxmemory: %d %q (Retry-After %q), want 503 + Retry-After", order, r.status, r.body, r.header.Get("Retry-After"))
		}
	}
	if be.totalHits() != 0 {
		t.Fatalf("the backend ran %d times at maxmemory", be.totalHits())
	}
	if grown := usedMemory(t, c) - before; grown > 64<<10 {
		t.Fatalf("50 refused notifications grew Redis by %d bytes", grown)
	}
	if err := c.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := notify(t, base, "oom-3"); r.status != 200 {
			t.Fatalf("retry after memory was freed: %d %q", r.status, r.body)
		}
	}
	if n := be.count("oom-3"); n != 1 {
		t.Fatalf("backend ran %d times for oom-3, want 1", n)
	}
}

// usedMemory is the server's used_memory.
func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("INFO names no used_memory")
	return 0
}

// blackHole accepts connections and never answers: a partition, or a
// Redis address behind a firewall that drops replies. It is closed at
// cleanup.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestFaultRedisBlackHole: a Redis address that accepts connections and
// never answers, store_timeout 1s. The start is not held by it (the
// checks give up after store_timeout, warn, and go on in the background);
// a lone copy and 8 concurrent copies (the concurrent ones share
// batches) are each answered 503 within store_timeout + 1 s, and
// none reaches the backend.
func TestFaultRedisBlackHole(t *testing.T) {
	testenv.Slow(t, "fault: a Redis that never answers, store_timeout waited out")
	hole := blackHole(t)
	be := newBackend(t)
	start := time.Now()
	base, logFile, err := tryCaddy(t, `
	idempotency {
		key demo:{idempotency.form.out_trade_no}
		store redis `+hole+`
		store_timeout 1s
	}
	reverse_proxy `+be.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v", time.Since(start))
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("the start took %v with a Redis that never answers", d)
	}
	if !logHas(t, logFile, time.Second, "could not check Redis at start", hole) {
		t.Error("no start-up warning that Redis could not be checked")
	}
	const bound = 2 * time.Second // store_timeout + 1 s
	for round, n := range []int{1, 8, 8} {
		var mu sync.Mutex
		var slowest time.Duration
		rs := storm(t, n, func(i int) reply {
			t0 := time.Now()
			r := notify(t, base, fmt.Sprintf("bh-%d-%d", round, i))
			mu.Lock()
			slowest = max(slowest, time.Since(t0))
			mu.Unlock()
			return r
		})
		for _, r := range rs {
			if r.status != http.StatusServiceUnavailable {
				t.Fatalf("round %d: %d %q, want 503", round, r.status, r.body)
			}
		}
		t.Logf("%d concurrent copies: slowest answered in %v", n, slowest)
		if slowest > bound {
			t.Errorf("%d concurrent copies: the slowest took %v, want ≤ %v", n, slowest, bound)
		}
	}
	if be.totalHits() != 0 {
		t.Fatalf("the backend ran %d times", be.totalHits())
	}
}

// TestFaultRedisACL: a Redis 7 user made the usual way (`ACL SETUSER gw
// on >pw ~* +@all`: no channel rights) is a start-up error naming the
// missing channel rights and the rule that grants them; once granted
// (&idem:*), the gateway starts, a copy runs once and a purge works.
func TestFaultRedisACL(t *testing.T) {
	testenv.Slow(t, "fault: a Redis user without the rights")
	rs := redistest.Start(t)
	ctx := context.Background()
	admin := rs.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "gw", "on", ">pw", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	be := newBackend(t)
	site := `
	idempotency {
		key demo:{idempotency.form.out_trade_no}
		store redis ` + rs.Addr() + ` {
			username gw
			password pw
		}
	}
	reverse_proxy ` + be.addr()
	_, _, err := tryCaddy(t, site)
	if err == nil {
		t.Fatal("the gateway started without the channel rights it needs")
	}
	for _, want := range []string{"gw", "PUBLISH on channel idem:", "SUBSCRIBE to channel idem:{idemgate-check}:wake", "&idem:*"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start-up error does not name %q: %v", want, err)
		}
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "gw", "&idem:*").Err(); err != nil {
		t.Fatal(err)
	}
	base, _, err := tryCaddy(t, site)
	if err != nil {
		t.Fatalf("with channel rights: %v", err)
	}
	for range 2 {
		if r := notify(t, base, "acl-1"); r.status != 200 {
			t.Fatalf("notify: %d %q", r.status, r.body)
		}
	}
	if n := be.count("acl-1"); n != 1 {
		t.Fatalf("backend ran %d times, want 1", n)
	}
}

// TestFaultPayPalForgeryWhileStoreDown: with `on_store_error pass` and
// Redis down, the headers of a genuine PayPal delivery captured moments
// ago, carrying a forged body of the same CRC-32, are refused with 503:
// the transmission-id log is part of verifying the notification, and a
// notification that could not be verified is never forwarded. A generic
// route on the same store still passes unprotected, as configured.
func TestFaultPayPalForgeryWhileStoreDown(t *testing.T) {
	testenv.Slow(t, "fault: Redis stopped")
	k, _ := platformtest.Keys(t)
	certFile := platformtest.WriteFile(t, "paypal.pem", platformtest.Certificate(t, k, big.NewInt(1), "messageverificationcerts.paypal.com"))
	rs := redistest.Start(t)
	be := newBackend(t)
	base, _, err := tryCaddy(t, `
	handle /paypal {
		idempotency {
			platform paypal
			webhook_id `+testPayPalHookID+`
			certificate `+certFile+`
			store redis `+rs.Addr()+`
			on_store_error pass
			store_timeout 1s
		}
		reverse_proxy `+be.addr()+`
	}
	handle /notify {
		idempotency {
			key demo:{idempotency.form.out_trade_no}
			store redis `+rs.Addr()+`
			on_store_error pass
			store_timeout 1s
		}
		reverse_proxy `+be.addr()+`
	}`)
	if err != nil {
		t.Fatal(err)
	}
	pp := platformtest.PayPal{Key: k, WebhookID: testPayPalHookID}
	deliver := func(order string, body []byte, h http.Header) reply {
		t.Helper()
		return send(t, base, order, delivery{path: "/paypal", ctype: "application/json", body: string(body), header: h})
	}
	genuine := platformtest.PayPalEvent("WH-DOWN1", "PAYMENT.CAPTURE.COMPLETED", "CAP-DOWN1", "7.47")
	captured := pp.Header(t, genuine, time.Now())
	if r := deliver("down-1", genuine, captured); r.status != 200 {
		t.Fatalf("genuine: %d %q", r.status, r.body)
	}
	rs.Stop()
	template := []byte(`{"id":"WH-DOWN2","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAP-DOWN2","amount":{"currency_code":"USD","value":"9999.00"}},"pad":"` + strings.Repeat("a", 64) + `"}`)
	forged := platformtest.PayPalForgery(t, genuine, template)
	t0 := time.Now()
	r := deliver("down-forged", forged, captured)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("forgery while the store is down: %d %q, want 503 + Retry-After", r.status, r.body)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	if n := be.count("down-forged"); n != 0 {
		t.Fatalf("the forgery reached the backend %d times", n)
	}
	if be.count("down-1") != 1 {
		t.Fatalf("genuine ran %d times", be.count("down-1"))
	}
	// The generic route is not verifying anything: pass forwards it.
	if r := notify(t, base, "down-generic"); r.status != 200 || be.count("down-generic") != 1 {
		t.Fatalf("generic route with pass while down: %d, backend %d", r.status, be.count("down-generic"))
	}
}

// TestFaultRedisPolicyChangedLater: a Redis whose policy is changed to
// evict while the gateway runs is found by the periodic check, logged at
// error level naming the policy, and treated as at start: claims fail
// closed (503 + Retry-After, on_store_error pass or not) and nothing
// reaches the backend, until the policy is noeviction again.
func TestFaultRedisPolicyChangedLater(t *testing.T) {
	testenv.Slow(t, "fault: Redis's policy changed to evict at run time")
	rs := redistest.Start(t)
	be := newBackend(t)
	base, logFile, err := tryCaddy(t, `
	idempotency {
		key demo:{idempotency.form.out_trade_no}
		store redis `+rs.Addr()+`
		on_store_error pass
	}
	reverse_proxy `+be.addr())
	if err != nil {
		t.Fatal(err)
	}
	recheckRedisEvery(t, 200*time.Millisecond)
	if r := notify(t, base, "before"); r.status != 200 || be.count("before") != 1 {
		t.Fatalf("before the change: %d, backend %d", r.status, be.count("before"))
	}
	if err := rs.Client().ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if !logHas(t, logFile, 5*time.Second, `"level":"error"`, "Redis no longer fits the gateway", "claims are refused", "allkeys-lru") {
		t.Fatal("no error logged after the policy changed to allkeys-lru")
	}
	for i := range 3 {
		r := notify(t, base, "during")
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Fatalf("copy %d on an evicting Redis: %d %q, want 503 + Retry-After", i, r.status, r.body)
		}
	}
	if n := be.count("during"); n != 0 {
		t.Fatalf("the backend ran %d times while Redis could evict", n)
	}
	if err := rs.Client().ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "claims to resume", func() bool { return notify(t, base, "during").status == 200 })
	if r := notify(t, base, "during"); !r.replayed || be.count("during") != 1 {
		t.Fatalf("after the fix: replayed=%v, backend ran %d times; want once", r.replayed, be.count("during"))
	}
}
