package caddymodule

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

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
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(200)
		_, err := io.WriteString(w, "success")
		return err
	})
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

func provisionBench(b *testing.B, sc *StoreConfig) *Handler {
	b.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	b.Cleanup(cancel)
	h := &Handler{Key: "bench:{idempotency.form.out_trade_no}", Store: sc}
	if err := h.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	if err := h.Validate(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Cleanup() })
	// The decision log line goes to stderr by default; measure the
	// handler, not the terminal.
	h.logger = zap.NewNop()
	return h
}

func benchRequest(body string) (*httptest.ResponseRecorder, *http.Request) {
	r := httptest.NewRequest(http.MethodPost, "/notify", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	caddyhttp.NewTestReplacer(r)
	return httptest.NewRecorder(), r
}
