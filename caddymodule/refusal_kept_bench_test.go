package caddymodule

import (
	"errors"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/internal/redistest"
)

// BenchmarkRefusedKept measures what a refusal costs now that it is kept
// (refusal_kept.go): a 400 for an empty key, per store, beside the first
// copy of a valid notification (a claim and a completion), the
// comparison the write's comment makes; and refusals sent by many at once.
func BenchmarkRefusedKept(b *testing.B) {
	rs := redistest.Start(b)
	for _, st := range []struct {
		name string
		conf *StoreConfig
	}{
		{"memory", &StoreConfig{Type: "memory"}},
		{"embedded", &StoreConfig{Type: "embedded", Path: filepath.Join(b.TempDir(), "bench.db")}},
		{"redis", &StoreConfig{Type: "redis", Addresses: []string{rs.Addr()}}},
	} {
		b.Run(st.name, func(b *testing.B) {
			h := provisionBench(b, st.conf)
			b.Run("refused_400", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					w, r := benchRequest("total_amount=9.90&subject=renewal")
					// Without a server in the context, the refusal is the
					// error Caddy would write.
					var he caddyhttp.HandlerError
					if err := h.ServeHTTP(w, r, benchBackend); !errors.As(err, &he) || he.StatusCode != 400 {
						b.Fatalf("got %v, want a 400", err)
					}
				}
			})
			// A flood: 32 senders per core at once; the embedded store's
			// group commit shares each fsync among the writes waiting.
			b.Run("refused_400_flood", func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						w, r := benchRequest("total_amount=9.90&subject=renewal")
						var he caddyhttp.HandlerError
						if err := h.ServeHTTP(w, r, benchBackend); !errors.As(err, &he) || he.StatusCode != 400 {
							b.Errorf("got %v, want a 400", err)
							return
						}
					}
				})
			})
			var seq atomic.Int64
			b.Run("first_copy", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					w, r := benchRequest("out_trade_no=u-" + strconv.FormatInt(seq.Add(1), 10) + "&total_amount=9.90&subject=renewal")
					if err := h.ServeHTTP(w, r, benchBackend); err != nil || w.Code != 200 {
						b.Fatalf("got %d %v", w.Code, err)
					}
				}
			})
		})
	}
}
