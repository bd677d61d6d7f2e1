package caddymodule

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/internal/testenv"
)

// dropBackend counts each request per X-Order header (or order query), and
// for orders named in drop does the work and then closes the connection
// without an answer — a kept-alive connection breaking after the request
// was written.
type dropBackend struct {
	ln   net.Listener
	mu   sync.Mutex
	hits map[string]int
	drop map[string]bool
}

func newDropBackend(t *testing.T, drop ...string) *dropBackend {
	b := &dropBackend{hits: map[string]int{}, drop: map[string]bool{}}
	for _, d := range drop {
		b.drop[d] = true
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.ln = ln
	srv := &http.Server{Handler: b}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b
}

func (b *dropBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	order := r.Header.Get("Idempotency-Key")
	if order == "" {
		order = r.URL.Query().Get("order")
	}
	b.mu.Lock()
	b.hits[order]++
	drop := b.drop[order]
	b.mu.Unlock()
	if drop {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	io.WriteString(w, "ok "+order)
}

func (b *dropBackend) count(order string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[order]
}

// TestNoTransportResend: Go's transport re-sends a replayable request (a
// GET, or a bodiless POST with Idempotency-Key) when a kept-alive
// connection breaks after it was written. The gateway refuses that re-send:
// the backend runs once, the outcome is ambiguous and the claim is held.
func TestNoTransportResend(t *testing.T) {
	be := newDropBackend(t, "get-1", "post-1")
	base := startCaddy(t, `
	handle /return {
		idempotency {
			key {http.request.uri.query.order}
			store memory
			lock_ttl 3s
			in_flight reject
		}
		reverse_proxy {backend}
	}
	handle /hook {
		idempotency {
			key {http.request.header.Idempotency-Key}
			store memory
			lock_ttl 3s
			in_flight reject
		}
		reverse_proxy {backend}
	}`, "{backend}", be.ln.Addr().String())

	get := func(order string) int {
		resp, err := client.Get(base + "/return?order=" + order)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	postEmpty := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/hook", nil)
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name  string
		send  func(string) int
		prime string
		key   string
	}{
		{"GET", get, "get-prime", "get-1"},
		{"bodiless POST with Idempotency-Key", postEmpty, "post-prime", "post-1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Prime: leaves an idle kept-alive connection to the backend,
			// so the next request goes out on a reused one.
			if st := c.send(c.prime); st != 200 {
				t.Fatalf("prime: %d", st)
			}
			st := c.send(c.key)
			if st < 500 {
				t.Fatalf("broken connection answered %d, want a 5xx", st)
			}
			if n := be.count(c.key); n != 1 {
				t.Fatalf("backend ran %d times, want 1 (the transport re-sent the request)", n)
			}
			// Ambiguous: the claim is held, a retry now is refused.
			if st := c.send(c.key); st != http.StatusConflict {
				t.Fatalf("retry within lock_ttl: %d, want 409", st)
			}
			if n := be.count(c.key); n != 1 {
				t.Fatalf("backend ran %d times after the retry, want 1", n)
			}
		})
	}
}

// TestOutcomeBeforeAnswer: {idempotency.outcome} is set before the answer
// is written, so a deferred header directive sees it.
func TestOutcomeBeforeAnswer(t *testing.T) {
	be := newBackend(t)
	base := startCaddy(t, `
	handle /notify {
		header >X-Outcome {idempotency.outcome}
		idempotency {
			key demo:{idempotency.form.out_trade_no}
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())
	for _, want := range []string{"forwarded", "replayed"} {
		r := notify(t, base, "oc-1")
		if got := r.header.Get("X-Outcome"); got != want {
			t.Fatalf("X-Outcome %q, want %q", got, want)
		}
	}
	if !strings.HasPrefix(notify(t, base, "oc-2").header.Get("X-Outcome"), "forwarded") {
		t.Fatal("a new key is not forwarded")
	}
}

// TestBackendCeiling: a backend still working at the ceiling has its
// request cut off, once, by the claim's hold (not sooner); one slower
// than several renewals but within the ceiling is left to answer, and its
// answer is remembered.
func TestBackendCeiling(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a backend held to its ceiling")
	for _, c := range []struct {
		name    string
		ceiling time.Duration
		work    time.Duration // how long the backend works unless cut off
		cut     bool
	}{
		{"cut at the ceiling", 400 * time.Millisecond, 6 * time.Second, true},
		{"answers within it, past renewals", 20 * time.Second, 1200 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &Handler{Key: "ceiling:{idempotency.form.out_trade_no}", Store: &StoreConfig{Type: "memory"},
				LockTTL: caddy.Duration(time.Second)} // renewed every 333 ms
			configure(h, withCeiling(c.ceiling))
			h = provisionHandler(t, h)
			useLogger(h, zap.NewNop())
			var runs atomic.Int32
			var cutAfter atomic.Int64
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				runs.Add(1)
				start := time.Now()
				select {
				case <-r.Context().Done():
					cutAfter.Store(int64(time.Since(start)))
					return r.Context().Err()
				case <-time.After(c.work):
				}
				_, err := io.WriteString(w, "success")
				return err
			})
			began := time.Now()
			w, r := benchRequest("out_trade_no=o-1&total_amount=9.90")
			err := h.ServeHTTP(w, r, next)
			took := time.Since(began)
			if n := runs.Load(); n != 1 {
				t.Fatalf("the backend ran %d times, want 1", n)
			}
			if !c.cut {
				if err != nil || w.Code != 200 || cutAfter.Load() != 0 {
					t.Fatalf("got %d %v (cut after %v), want the backend's answer", w.Code, err, time.Duration(cutAfter.Load()))
				}
				w, r := benchRequest("out_trade_no=o-1&total_amount=9.90")
				if err := h.ServeHTTP(w, r, next); err != nil || w.Header().Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
					t.Fatalf("the next copy: %d %v, backend ran %d times; want a replay", w.Code, err, runs.Load())
				}
				return
			}
			cutAt := time.Duration(cutAfter.Load())
			if cutAt == 0 {
				t.Fatalf("the backend's request was never cut off (answered %d after %v)", w.Code, took)
			}
			if cutAt < c.ceiling-50*time.Millisecond || took > c.ceiling+3*time.Second {
				t.Fatalf("cut off after %v, the request took %v; want at the %v ceiling", cutAt, took, c.ceiling)
			}
		})
	}
}
