package caddymodule

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/internal/redistest"
)

// BenchmarkHandler measures the handler's own cost per request (ServeHTTP
// with a trivial next handler, no network to the client): the first-copy
// path with unique keys and the replay path with one key, per store.
// Compare with BenchmarkHandler/*/baseline, the same request through the
// next handler alone.
func BenchmarkHandler(b *testing.B) {
	rs := redistest.Start(b)
	stores := []struct {
		name string
		conf *StoreConfig
	}{
		{"memory", &StoreConfig{Type: "memory"}},
		{"embedded", &StoreConfig{Type: "embedded", Path: filepath.Join(b.TempDir(), "bench.db")}},
		{"redis", &StoreConfig{Type: "redis", Addresses: []string{rs.Addr()}}},
	}
	next := benchBackend
	form := func(order string) string { return "out_trade_no=" + order + "&total_amount=9.90&subject=renewal" }

	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			h := provisionBench(b, st.conf)
			var seq atomic.Int64
			b.Run("baseline", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					w, r := benchRequest(form("x"))
					if err := next.ServeHTTP(w, r); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("first_copy", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					w, r := benchRequest(form("u-" + strconv.FormatInt(seq.Add(1), 10)))
					if err := h.ServeHTTP(w, r, next); err != nil || w.Code != 200 {
						b.Fatalf("got %d %v", w.Code, err)
					}
				}
			})
			b.Run("replay", func(b *testing.B) {
				w, r := benchRequest(form("hot"))
				if err := h.ServeHTTP(w, r, next); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					w, r := benchRequest(form("hot"))
					if err := h.ServeHTTP(w, r, next); err != nil || w.Header().Get("Idempotent-Replayed") != "true" {
						b.Fatalf("got %d %v, want a replay", w.Code, err)
					}
				}
			})
		})
	}
}

// benchBackend is the backend of the handler benchmarks: it reads the
// body and answers "success".
var benchBackend = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(200)
	_, err := io.WriteString(w, "success")
	return err
})

func provisionBench(b *testing.B, sc *StoreConfig) *Handler {
	b.Helper()
	h := provisionHandler(b, &Handler{Key: "bench:{idempotency.form.out_trade_no}", Store: sc})
	// The decision log line goes to stderr by default; measure the
	// handler, not the terminal.
	useLogger(h, zap.NewNop())
	return h
}

// useLogger makes l the provisioned handler h's logger, its observer's
// (claim trouble, the delivery engine's reports) included.
func useLogger(h *Handler, l *zap.Logger) {
	h.logger = l
	h.decisions = l // written at once: the tests read them right after
	h.obs.logger = l
}

// provisionHandler provisions, validates and starts h with a real
// caddy.Context, as Caddy would, and cleans it up after the test.
func provisionHandler(tb testing.TB, h *Handler) *Handler {
	tb.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	tb.Cleanup(cancel)
	if err := h.Provision(ctx); err != nil {
		tb.Fatal(err)
	}
	if err := h.Validate(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Cleanup() })
	// What the config's App does when the config runs.
	if err := h.start(); err != nil {
		tb.Fatal(err)
	}
	return h
}

func benchRequest(body string) (*httptest.ResponseRecorder, *http.Request) {
	r := httptest.NewRequest(http.MethodPost, "/notify", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	caddyhttp.NewTestReplacer(r)
	return httptest.NewRecorder(), r
}

// BenchmarkWaiterWake measures how soon a copy waiting on an in-flight key
// gets its answer after the first copy completes (the contract: within
// 20ms). Reported as wake-µs (mean) and wake-max-µs.
func BenchmarkWaiterWake(b *testing.B) {
	rs := redistest.Start(b)
	for _, st := range []struct {
		name string
		conf *StoreConfig
	}{
		{"memory", &StoreConfig{Type: "memory"}},
		{"embedded", &StoreConfig{Type: "embedded", Path: filepath.Join(b.TempDir(), "wake.db")}},
		{"redis", &StoreConfig{Type: "redis", Addresses: []string{rs.Addr()}}},
	} {
		b.Run(st.name, func(b *testing.B) {
			h := provisionBench(b, st.conf)
			var total, worst time.Duration
			i := 0
			for b.Loop() {
				i++
				order := "wake-" + st.name + "-" + strconv.Itoa(i)
				release := make(chan struct{})
				blocking := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
					<-release
					_, err := io.WriteString(w, "success")
					return err
				})
				firstDone := make(chan time.Time, 1)
				go func() {
					w, r := benchRequest("out_trade_no=" + order)
					h.ServeHTTP(w, r, blocking)
					firstDone <- time.Now()
				}()
				waitCopies(b, h, "bench:"+order, 1)
				secondDone := make(chan time.Time, 1)
				go func() {
					w, r := benchRequest("out_trade_no=" + order)
					h.ServeHTTP(w, r, blocking)
					if w.Header().Get("Idempotent-Replayed") != "true" {
						b.Errorf("the waiting copy was not replayed: %d", w.Code)
					}
					secondDone <- time.Now()
				}()
				waitCopies(b, h, "bench:"+order, 2)
				time.Sleep(time.Millisecond) // let it reach its wait
				close(release)
				t0, t1 := <-firstDone, <-secondDone
				d := max(t1.Sub(t0), 0)
				total += d
				worst = max(worst, d)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(i), "wake-µs")
			b.ReportMetric(float64(worst.Microseconds()), "wake-max-µs")
		})
	}
}

// waitCopies polls the store until key has been claimed n times.
func waitCopies(b *testing.B, h *Handler, key string, n int64) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		rec, err := h.store.Lookup(context.Background(), key)
		if err == nil && rec.Copies >= n {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
	b.Fatalf("key %s never reached %d copies", key, n)
}

// BenchmarkHandlerJSON: a first copy of a ~1 KiB Stripe event keyed by its
// id ({idempotency.json.id}), journaled as shipped: what the JSON case of
// the nginx + Lua comparison costs the handler, without the network. The
// memory store leaves the handler's own work; Redis adds the store's.
func BenchmarkHandlerJSON(b *testing.B) {
	rs := redistest.Start(b)
	next := benchBackend
	head, tail := stripeSample(b)
	for _, st := range []struct {
		name string
		conf *StoreConfig
	}{
		{"memory", &StoreConfig{Type: "memory"}},
		{"redis", &StoreConfig{Type: "redis", Addresses: []string{rs.Addr()}, Prefix: "json"}},
	} {
		b.Run(st.name, func(b *testing.B) {
			h := provisionHandler(b, &Handler{Key: "{idempotency.json.id}", Store: st.conf})
			useLogger(h, zap.NewNop())
			var seq atomic.Int64
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(head+`"evt_`+strconv.FormatInt(seq.Add(1), 10)+`"`+tail))
				r.Header.Set("Content-Type", "application/json")
				caddyhttp.NewTestReplacer(r)
				w := httptest.NewRecorder()
				if err := h.ServeHTTP(w, r, next); err != nil || w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "" {
					b.Fatalf("got %d %v, want a first copy", w.Code, err)
				}
			}
		})
	}
}

// stripeSample is keying/testdata's Stripe event cut around its id: a
// fresh id between head and tail makes a fresh first copy.
func stripeSample(b *testing.B) (head, tail string) {
	sample, err := os.ReadFile("../keying/testdata/stripe_event.json")
	if err != nil {
		b.Fatal(err)
	}
	const id = `"evt_a1b2c3d4e5f60100000042"`
	head, tail, ok := strings.Cut(string(sample), id)
	if !ok {
		b.Fatalf("stripe_event.json has no id %s", id)
	}
	return head, tail
}
