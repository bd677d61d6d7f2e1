package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// eachStore runs f as a subtest per store (gatewaytest.EachStore).
func eachStore(t *testing.T, f func(t *testing.T, name, store string)) {
	t.Helper()
	gatewaytest.EachStore(t, f)
}

const notifyRoute = gatewaytest.NotifyRoute

func gatewayFor(t *testing.T, store, backendAddr, extra string) string {
	return startCaddy(t, notifyRoute, "{store}", store, "{backend}", backendAddr, "{extra}", extra)
}

// TestConcurrentCopiesForwardOnce is the product: 100 copies of one
// notification at once reach the backend once, and all 100 get its answer.
func TestConcurrentCopiesForwardOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, name, store string) {
		be := newBackend(t)
		be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
			return 200, "success " + order, 150 * time.Millisecond
		})
		base := gatewayFor(t, store, be.addr(), "")
		for round := range 3 {
			order := "o-" + name + "-" + itoa(round)
			replies := storm(t, 100, func(int) reply { return notify(t, base, order) })
			if got := be.count(order); got != 1 {
				t.Fatalf("backend ran %d times for %s, want 1", got, order)
			}
			replayed := 0
			for i, r := range replies {
				if r.status != 200 || r.body != "success "+order {
					t.Fatalf("copy %d got %d %q, want 200 %q", i, r.status, r.body, "success "+order)
				}
				if r.header.Get("X-Backend") != "legacy" || r.header.Get("Content-Type") != "text/plain" {
					t.Errorf("copy %d lost the backend's headers: %v", i, r.header)
				}
				if r.replayed {
					replayed++
					if r.header.Get("Set-Cookie") != "" {
						t.Errorf("copy %d: a replay must not carry the first client's cookie", i)
					}
				}
			}
			if replayed != 99 {
				t.Errorf("%d copies marked replayed, want 99", replayed)
			}
		}
	})
}

// TestFailedAnswerIsNotRemembered: a failure releases the key so the
// platform's retry goes through; the success after it is remembered.
func TestFailedAnswerIsNotRemembered(t *testing.T) {
	eachStore(t, func(t *testing.T, name, store string) {
		be := newBackend(t)
		be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
			if n == 1 {
				return 500, "fail", 0
			}
			return 200, "success", 0
		})
		base := gatewayFor(t, store, be.addr(), "")
		order := "f-" + name
		if r := notify(t, base, order); r.status != 500 || r.body != "fail" || r.replayed {
			t.Fatalf("first copy: got %d %q replayed=%v, want the backend's 500 fail", r.status, r.body, r.replayed)
		}
		if r := notify(t, base, order); r.status != 200 || r.replayed {
			t.Fatalf("retry: got %d replayed=%v, want a forwarded 200", r.status, r.replayed)
		}
		if r := notify(t, base, order); r.status != 200 || !r.replayed || r.body != "success" {
			t.Fatalf("third copy: got %d %q replayed=%v, want the replayed success", r.status, r.body, r.replayed)
		}
		if got := be.count(order); got != 2 {
			t.Errorf("backend ran %d times, want 2 (the failure and the retry)", got)
		}
	})
}

// TestSuccessOverride: with `success 200 body success` a 200 "fail" is a
// failure (Alipay's rule) and is not remembered.
func TestSuccessOverride(t *testing.T) {
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 200, "fail", 0
		}
		return 200, "success\n", 0
	})
	base := gatewayFor(t, "store memory", be.addr(), "success 200 body success")
	for i, want := range []struct {
		body     string
		replayed bool
	}{{"fail", false}, {"success\n", false}, {"success\n", true}} {
		r := notify(t, base, "so-1")
		if r.status != 200 || r.body != want.body || r.replayed != want.replayed {
			t.Fatalf("copy %d: got %d %q replayed=%v, want %q replayed=%v", i, r.status, r.body, r.replayed, want.body, want.replayed)
		}
	}
	if got := be.count("so-1"); got != 2 {
		t.Errorf("backend ran %d times, want 2", got)
	}
}

// TestBadInputClaimsNothing: refused requests are never forwarded and leave
// no claim behind, so the first good copy is forwarded.
func TestBadInputClaimsNothing(t *testing.T) {
	be := newBackend(t)
	// handle_errors shows the reason, as the README's example does.
	base := startCaddy(t, notifyRoute+`
	handle_errors {
		respond "{err.status_code} {err.message}"
	}`, "{store}", "store memory", "{backend}", be.addr(), "{extra}", "max_body 1KiB")

	// No key field: 400 with a reason that names the missing field.
	r := post(t, base+"/notify", "application/x-www-form-urlencoded", "total_amount=1", nil)
	if r.status != 400 || !strings.Contains(r.body, "{idempotency.form.out_trade_no} is empty") {
		t.Fatalf("no key: got %d %q, want 400 naming the empty field", r.status, r.body)
	}
	// Too large: 413.
	big := "out_trade_no=b-1&total_amount=9.90&pad=" + strings.Repeat("x", 2048)
	if r := post(t, base+"/notify", "application/x-www-form-urlencoded", big, nil); r.status != 413 {
		t.Fatalf("large body: got %d, want 413", r.status)
	}
	// Not a form at all.
	if r := post(t, base+"/notify", "application/x-www-form-urlencoded", "%zz", nil); r.status != 400 {
		t.Fatalf("unparsable body: got %d, want 400", r.status)
	}
	if be.totalHits() != 0 {
		t.Fatalf("refused requests reached the backend %d times", be.totalHits())
	}
	// The same key as the refused large body is still free.
	forwardedOnce(t, base, be, "b-1")
}

// TestFingerprintConflict: the same key with another amount is a 422 and
// is not forwarded; the original is still replayed.
func TestFingerprintConflict(t *testing.T) {
	be := newBackend(t)
	base := gatewayFor(t, "store memory", be.addr(), "")
	if r := notify(t, base, "fp-1"); r.status != 200 {
		t.Fatalf("first: %d", r.status)
	}
	if r := notify(t, base, "fp-1", "total_amount", "0.01"); r.status != 422 {
		t.Fatalf("tampered copy: got %d, want 422", r.status)
	}
	if r := notify(t, base, "fp-1"); r.status != 200 || !r.replayed {
		t.Fatalf("genuine copy after the conflict: got %d replayed=%v", r.status, r.replayed)
	}
	if be.count("fp-1") != 1 {
		t.Errorf("backend ran %d times, want 1", be.count("fp-1"))
	}
}

// TestInFlightReject: with `in_flight reject` a copy that arrives while the
// first is at the backend gets 409 + Retry-After at once.
func TestInFlightReject(t *testing.T) {
	be, release := heldBackend(t)
	base := startCaddy(t, `
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store memory
		in_flight reject
	}
	reverse_proxy {backend}`, "{backend}", be.addr())
	first := make(chan reply)
	go func() { first <- notify(t, base, "ir-1") }()
	eventually(t, 5*time.Second, "the first copy at the backend", func() bool { return be.count("ir-1") == 1 })
	r := notify(t, base, "ir-1")
	if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" {
		t.Fatalf("copy in flight: got %d Retry-After=%q, want 409 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	close(release)
	if r := <-first; r.status != 200 {
		t.Fatalf("first copy: %d", r.status)
	}
	if r := notify(t, base, "ir-1"); !r.replayed {
		t.Fatalf("copy after the answer was not replayed: %d", r.status)
	}
	if be.count("ir-1") != 1 {
		t.Errorf("backend ran %d times, want 1", be.count("ir-1"))
	}
}

// heldBackend answers "success" only once release is closed.
func heldBackend(t *testing.T) (*backend, chan struct{}) {
	be := newBackend(t)
	release := make(chan struct{})
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		<-release
		return 200, "success", 0
	})
	return be, release
}

// TestWaitTimesOut: a copy that waits longer than in_flight wait gets 409.
func TestWaitTimesOut(t *testing.T) {
	be, release := heldBackend(t)
	defer close(release)
	base := startCaddy(t, `
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store memory
		in_flight wait 300ms
	}
	reverse_proxy {backend}`, "{backend}", be.addr())
	go notify(t, base, "wt-1")
	eventually(t, 5*time.Second, "the first copy at the backend", func() bool { return be.count("wt-1") == 1 })
	r := notify(t, base, "wt-1")
	if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" {
		t.Fatalf("got %d, want 409 with Retry-After", r.status)
	}
	if be.count("wt-1") != 1 {
		t.Errorf("backend ran %d times, want 1", be.count("wt-1"))
	}
}

// TestWaiterTakesOverAfterFailure: copies waiting on a first copy that fails
// are not answered with the failure's absence: one of them is forwarded as
// the retry and the others get its answer.
func TestWaiterTakesOverAfterFailure(t *testing.T) {
	eachStore(t, func(t *testing.T, name, store string) {
		be := newBackend(t)
		be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
			if n == 1 {
				return 503, "busy", 200 * time.Millisecond
			}
			return 200, "success", 50 * time.Millisecond
		})
		base := gatewayFor(t, store, be.addr(), "")
		replies := storm(t, 20, func(int) reply { return notify(t, base, "wf-"+name) })
		fails, oks := 0, 0
		for _, r := range replies {
			switch r.status {
			case 503:
				fails++
			case 200:
				oks++
			default:
				t.Errorf("unexpected answer %d %q", r.status, r.body)
			}
		}
		if fails != 1 || oks != 19 {
			t.Errorf("got %d failures and %d successes, want 1 and 19", fails, oks)
		}
		if got := be.count("wf-" + name); got != 2 {
			t.Errorf("backend ran %d times, want 2", got)
		}
	})
}

// TestSlowBackendKeepsClaim: a backend slower than 3× lock_ttl keeps its
// claim (renewed), so copies during the wait are never forwarded.
func TestSlowBackendKeepsClaim(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a backend slower than 3× lock_ttl, on every store")
	eachStore(t, func(t *testing.T, name, store string) {
		be := newBackend(t)
		be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
			return 200, "success", 7 * time.Second // lock_ttl is 2s
		})
		base := startCaddy(t, `
	idempotency {
		key k:{idempotency.form.out_trade_no}
		{store}
		lock_ttl 2s
		in_flight reject
	}
	reverse_proxy {backend}`, "{backend}", be.addr(), "{store}", store)
		order := "slow-" + name
		first := make(chan reply)
		go func() { first <- notify(t, base, order) }()
		eventually(t, 5*time.Second, "the first copy at the backend", func() bool { return be.count(order) == 1 })
		// Probe every 500ms for the whole backend time, well past 3 lock TTLs.
		for i := 0; i < 16; i++ {
			time.Sleep(500 * time.Millisecond)
			r := notify(t, base, order)
			if r.status == 200 {
				break // the first copy has answered
			}
			if r.status != http.StatusConflict {
				t.Fatalf("probe %d: got %d, want 409 while the first copy is in flight", i, r.status)
			}
		}
		if r := <-first; r.status != 200 {
			t.Fatalf("first copy: %d", r.status)
		}
		if got := be.count(order); got != 1 {
			t.Fatalf("backend ran %d times, want 1: the claim was lost", got)
		}
		if r := notify(t, base, order); !r.replayed {
			t.Errorf("copy after the answer was not replayed")
		}
	})
}

// TestBackendUnreachable: 502, nothing remembered, the key is free again.
func TestBackendUnreachable(t *testing.T) {
	port := freePort(t)
	base := gatewayFor(t, "store memory", "127.0.0.1:"+itoa(port), "")
	if r := notify(t, base, "down-1"); r.status != http.StatusBadGateway {
		t.Fatalf("got %d, want 502", r.status)
	}
	// Now the backend comes up on that port: the retry goes through.
	be := newBackendAt(t, "127.0.0.1:"+itoa(port))
	forwardedOnce(t, base, be, "down-1")
}

// forwardedOnce sends one copy of order and checks that it was forwarded
// and that the backend has now run exactly once for the order.
func forwardedOnce(t *testing.T, base string, be *backend, order string) {
	t.Helper()
	if r := notify(t, base, order); r.status != 200 || r.replayed {
		t.Fatalf("%s: got %d replayed=%v, want a forwarded 200", order, r.status, r.replayed)
	}
	if got := be.count(order); got != 1 {
		t.Errorf("backend ran %d times for %s, want 1", got, order)
	}
}

// TestAmbiguousTimeoutHoldsClaim: when the backend times out after the
// request was sent, the gateway answers 504 and holds the claim until
// lock_ttl runs out; then the retry is forwarded.
func TestAmbiguousTimeoutHoldsClaim(t *testing.T) {
	testenv.Slow(t, "runs for seconds: waits out lock_ttl")
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 200, "success", 2 * time.Second
		}
		return 200, "success", 0
	})
	base := startCaddy(t, `
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store memory
		lock_ttl 1500ms
		in_flight reject
	}
	reverse_proxy {backend} {
		transport http {
			response_header_timeout 300ms
		}
	}`, "{backend}", be.addr())
	if r := notify(t, base, "amb-1"); r.status != http.StatusGatewayTimeout {
		t.Fatalf("got %d, want 504", r.status)
	}
	if r := notify(t, base, "amb-1"); r.status != http.StatusConflict {
		t.Fatalf("retry right after the time-out: got %d, want 409 (claim held)", r.status)
	}
	eventually(t, 5*time.Second, "the held claim to expire and the retry to go through", func() bool {
		return notify(t, base, "amb-1").status == 200
	})
	if got := be.count("amb-1"); got != 2 {
		t.Errorf("backend ran %d times, want 2 (the timed-out one and one retry)", got)
	}
}

// TestStoreDown: with Redis stopped the gateway fails closed (503 +
// Retry-After, nothing forwarded); when Redis is back work resumes. With
// `on_store_error pass` it forwards unprotected.
func TestStoreDown(t *testing.T) {
	testenv.Slow(t, "fault: Redis stopped and restarted")
	rs := redistest.Start(t)
	be := newBackend(t)
	base := startCaddy(t, `
	handle /closed {
		rewrite * /notify
		idempotency {
			key k:{idempotency.form.out_trade_no}
			store redis {redis}
			store_timeout 500ms
		}
		reverse_proxy {backend}
	}
	handle /pass {
		rewrite * /notify
		idempotency {
			key k:{idempotency.form.out_trade_no}
			store redis {redis}
			store_timeout 500ms
			on_store_error pass
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr(), "{redis}", rs.Addr())
	form := "out_trade_no=sd-1&total_amount=1"
	ct := "application/x-www-form-urlencoded"
	if r := post(t, base+"/closed", ct, form, nil); r.status != 200 {
		t.Fatalf("with Redis up: %d", r.status)
	}
	rs.Stop()
	for i := 0; i < 3; i++ {
		r := post(t, base+"/closed", ct, "out_trade_no=sd-2&total_amount=1", nil)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Fatalf("with Redis down: got %d Retry-After=%q, want 503 with Retry-After", r.status, r.header.Get("Retry-After"))
		}
	}
	if be.count("sd-2") != 0 {
		t.Fatalf("fail_closed forwarded %d copies", be.count("sd-2"))
	}
	if r := post(t, base+"/pass", ct, "out_trade_no=sd-3&total_amount=1", nil); r.status != 200 || be.count("sd-3") != 1 {
		t.Fatalf("pass: got %d, backend ran %d times; want a forwarded 200", r.status, be.count("sd-3"))
	}
	rs.Restart()
	eventually(t, 10*time.Second, "Redis to be usable again", func() bool {
		return post(t, base+"/closed", ct, "out_trade_no=sd-2&total_amount=1", nil).status == 200
	})
	if r := post(t, base+"/closed", ct, "out_trade_no=sd-2&total_amount=1", nil); !r.replayed {
		t.Errorf("after recovery the answer was not remembered: %d", r.status)
	}
	if be.count("sd-2") != 1 {
		t.Errorf("backend ran %d times for sd-2, want 1", be.count("sd-2"))
	}
}

// TestRedisTopologies: the gateway works on Redis Cluster (several
// addresses), through Sentinel (master_name) and with a password from
// {env.*}; copies forward once on each.
func TestRedisTopologies(t *testing.T) {
	testenv.Slow(t, "starts Sentinel and Cluster redis-servers")
	cluster := redistest.StartCluster(t, 3)
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "idemmaster")
	secured := redistest.Start(t)
	const password = "s3cret-for-test"
	if err := secured.Client().ConfigSet(t.Context(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("IDEMGATE_TEST_REDIS_PASSWORD", password)

	for name, store := range map[string]string{
		"cluster":  "store redis " + strings.Join(cluster.Addrs, " "),
		"sentinel": "store redis " + sentinel.Addr() + " {\n\t\t\t\tmaster_name idemmaster\n\t\t\t}",
		"password": "store redis redis://" + secured.Addr() + " {\n\t\t\t\tpassword {env.IDEMGATE_TEST_REDIS_PASSWORD}\n\t\t\t}",
	} {
		t.Run(name, func(t *testing.T) {
			be := newBackend(t)
			be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
				return 200, "success", 50 * time.Millisecond
			})
			base := gatewayFor(t, store, be.addr(), "")
			for i := range 5 {
				order := "topo-" + name + "-" + itoa(i)
				for j, r := range storm(t, 30, func(int) reply { return notify(t, base, order) }) {
					if r.status != 200 || r.body != "success" {
						t.Fatalf("copy %d: got %d %q", j, r.status, r.body)
					}
				}
				if got := be.count(order); got != 1 {
					t.Fatalf("backend ran %d times for %s, want 1", got, order)
				}
			}
		})
	}
	// The records really live where they were configured.
	n, err := cluster.Client().DBSize(t.Context()).Result()
	if err != nil || n == 0 {
		// DBSize on a ClusterClient sums the masters.
		t.Errorf("cluster holds %d keys (%v), want the test's records", n, err)
	}
	if n, _ := master.Client().DBSize(t.Context()).Result(); n == 0 {
		t.Errorf("the Sentinel-monitored master holds no keys")
	}
}

func TestUniversalOptions(t *testing.T) {
	tests := []struct {
		name    string
		sc      StoreConfig
		want    string
		wantErr string
	}{
		{"single", StoreConfig{Addresses: []string{"10.0.0.1:6379"}}, `{"addrs":["10.0.0.1:6379"]}`, ""},
		{"url with credentials and db", StoreConfig{Addresses: []string{"redis://gw:pw@10.0.0.1:6380/3"}},
			`{"addrs":["10.0.0.1:6380"],"user":"gw","pass":"pw","db":3}`, ""},
		{"explicit password wins", StoreConfig{Addresses: []string{"redis://gw:pw@h:1"}, Password: "other"},
			`{"addrs":["h:1"],"user":"gw","pass":"other"}`, ""},
		{"rediss turns on TLS", StoreConfig{Addresses: []string{"rediss://h:1"}}, `{"addrs":["h:1"],"tls":true}`, ""},
		{"cluster", StoreConfig{Addresses: []string{"a:1", "b:1", "c:1"}}, `{"addrs":["a:1","b:1","c:1"]}`, ""},
		{"sentinel", StoreConfig{Addresses: []string{"s1:26379", "s2:26379"}, MasterName: "m", DB: 2},
			`{"addrs":["s1:26379","s2:26379"],"master":"m","db":2}`, ""},
		{"cluster has no db", StoreConfig{Addresses: []string{"a:1", "b:1"}, DB: 1}, "", "has no database"},
		{"no address", StoreConfig{}, "", "at least one address"},
		{"bad url", StoreConfig{Addresses: []string{"redis://h:1/notanumber"}}, "", "redis address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := tt.sc.universalOptions()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]any{"addrs": o.Addrs}
			if o.Username != "" {
				got["user"] = o.Username
			}
			if o.Password != "" {
				got["pass"] = o.Password
			}
			if o.DB != 0 {
				got["db"] = o.DB
			}
			if o.MasterName != "" {
				got["master"] = o.MasterName
			}
			if o.TLSConfig != nil {
				got["tls"] = true
			}
			if !jsonEqual(t, mustJSON(got), tt.want) {
				t.Errorf("got %s, want %s", mustJSON(got), tt.want)
			}
		})
	}
}

// TestStoreIDHidesPassword: the store id (logs, admin API) never holds a
// password from a URL.
func TestStoreIDHidesPassword(t *testing.T) {
	id := StoreConfig{Type: "redis", Addresses: []string{"redis://gw:topsecret@h:1/2"}, Password: "x"}.id()
	if strings.Contains(id, "topsecret") || !strings.Contains(id, "h:1") {
		t.Errorf("id %q leaks the password or lost the address", id)
	}
}

// TestPlatformHangsUp: the platform gives up on a slow backend (client
// time-out); the backend still finishes, its answer is remembered, and the
// platform's retry gets the replay instead of a second run.
func TestPlatformHangsUp(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a backend slower than the platform's time-out")
	eachStore(t, func(t *testing.T, name, store string) {
		be := newBackend(t)
		reached := make(chan struct{}, 1)
		be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
			reached <- struct{}{}
			return 200, "success", time.Second
		})
		base := gatewayFor(t, store, be.addr(), "")
		order := "hangup-" + name
		// The platform hangs up as soon as its copy is at the backend.
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-reached; cancel() }()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/notify",
			strings.NewReader(url.Values{"out_trade_no": {order}, "total_amount": {"9.90"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("the impatient client got an answer (%d) before the backend finished", resp.StatusCode)
		}
		r := notify(t, base, order) // waits for the first copy, then replays
		if r.status != 200 || r.body != "success" || !r.replayed {
			t.Fatalf("retry: got %d %q replayed=%v, want the replayed success", r.status, r.body, r.replayed)
		}
		if got := be.count(order); got != 1 {
			t.Errorf("backend ran %d times, want 1", got)
		}
	})
}

// TestReloadKeepsStore: a config reload shares the store with the old
// config instead of reopening it — for the memory store, a reopen would
// forget every answer.
func TestReloadKeepsStore(t *testing.T) {
	be := newBackend(t)
	site := `
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store memory
		{extra}
	}
	reverse_proxy {backend}`
	base := startCaddy(t, site, "{backend}", be.addr(), "{extra}", "")
	if r := notify(t, base, "reload-1"); r.status != 200 || r.replayed {
		t.Fatalf("first copy: %d replayed=%v", r.status, r.replayed)
	}
	// A changed config (another ttl) on the same port: a real reload.
	u := strings.TrimPrefix(base, "http://127.0.0.1:")
	cf := fmt.Sprintf("{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n}\nhttp://127.0.0.1:%s {\n%s\n}\n", u,
		strings.NewReplacer("{backend}", be.addr(), "{extra}", "ttl 48h").Replace(site))
	cfgJSON, _, err := caddyfileAdapter().Adapt([]byte(cf), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(cfgJSON, false); err != nil {
		t.Fatalf("reload: %v", err)
	}
	client.CloseIdleConnections() // the old server's keep-alive connections are closed
	// Caddy swaps its listening socket on a reload: a connection queued on
	// the old one at that moment is reset before any handler sees it, and
	// the platform would simply retry. Retry those (and only those).
	form := url.Values{"out_trade_no": {"reload-1"}, "total_amount": {"9.90"}}.Encode()
	var resp *http.Response
	for try := 0; ; try++ {
		resp, err = client.Post(base+"/notify", "application/x-www-form-urlencoded", strings.NewReader(form))
		if err == nil || try == 5 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("copy after the reload: %v", err)
	}
	resp.Body.Close()
	if r := (reply{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}); r.status != 200 || !r.replayed {
		t.Fatalf("copy after the reload: got %d replayed=%v, want the answer remembered before it", r.status, r.replayed)
	}
	if be.count("reload-1") != 1 {
		t.Errorf("backend ran %d times, want 1", be.count("reload-1"))
	}
}

// TestAnswerLargerThanMaxAnswer: a successful answer whose body is larger
// than max_answer still marks the key answered (duplicates get its status
// and headers, no body); under a rule that reads the body, such an answer
// cannot be judged a success and is not remembered.
func TestAnswerLargerThanMaxAnswer(t *testing.T) {
	big := strings.Repeat("x", 100)
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 200, big, 0
	})
	base := startCaddy(t, `
	handle /status {
		rewrite * /notify
		idempotency {
			key k:{idempotency.form.out_trade_no}
			store memory
			max_answer 16B
		}
		reverse_proxy {backend}
	}
	handle /body {
		rewrite * /notify
		idempotency {
			key b:{idempotency.form.out_trade_no}
			store memory
			max_answer 16B
			success 200 body `+big+`
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())
	ct := "application/x-www-form-urlencoded"

	if r := post(t, base+"/status", ct, "out_trade_no=big-1", nil); r.status != 200 || r.body != big || r.replayed {
		t.Fatalf("first copy: got %d (%d bytes) replayed=%v, want the backend's whole answer", r.status, len(r.body), r.replayed)
	}
	r := post(t, base+"/status", ct, "out_trade_no=big-1", nil)
	if r.status != 200 || !r.replayed || r.body != "" || r.header.Get("X-Backend") != "legacy" {
		t.Fatalf("duplicate: got %d %q replayed=%v X-Backend=%q, want the status and headers without the body",
			r.status, r.body, r.replayed, r.header.Get("X-Backend"))
	}
	if be.count("big-1") != 1 {
		t.Errorf("backend ran %d times for the status rule, want 1", be.count("big-1"))
	}

	for range 2 {
		if r := post(t, base+"/body", ct, "out_trade_no=big-2", nil); r.status != 200 || r.body != big || r.replayed {
			t.Fatalf("body rule: got %d replayed=%v, want a forwarded answer every time", r.status, r.replayed)
		}
	}
	if be.count("big-2") != 2 {
		t.Errorf("backend ran %d times under the body rule, want 2 (an answer too large to read is not remembered)", be.count("big-2"))
	}
}
