package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/internal/redistest"
)

// BenchmarkHandlerCPU: the handler's first copy on Redis from 32 callers
// at once, as `wrk -c32` drives a gateway (the store's batches share round
// trips, as under load): cpu-µs/op is the whole test process's CPU per
// first copy (the handler, go-redis, the garbage), without Caddy's server
// and proxy around it. header: the load script's route (a key from a
// request header, a form body); json: a ~1 KiB Stripe event keyed on its
// id, journaled as shipped; *_journal_off: the same with journal_body off
// (what the journal costs).
func BenchmarkHandlerCPU(b *testing.B) {
	rs := redistest.Start(b)
	head, tail := stripeSample(b)
	const form = "out_trade_no=load&trade_status=TRADE_SUCCESS&total_amount=9.90"
	formReq := func(n int64) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-Order", "o-"+strconv.FormatInt(n, 10))
		return r
	}
	jsonReq := func(n int64) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(head+`"evt_`+strconv.FormatInt(n, 10)+`"`+tail))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	for _, c := range []struct {
		name, key, prefix string
		req               func(n int64) *http.Request
		journalBody       int64
	}{
		{"header", "load:{http.request.header.X-Order}", "hdr", formReq, 0},
		{"header_journal_off", "load:{http.request.header.X-Order}", "hdrnj", formReq, -1},
		{"json", "{idempotency.json.id}", "json", jsonReq, 0},
		{"json_journal_off", "{idempotency.json.id}", "jsonnj", jsonReq, -1},
	} {
		var seq atomic.Int64 // across the runs of b.Run: every key new
		b.Run(c.name, func(b *testing.B) {
			h := provisionHandler(b, &Handler{Key: c.key, JournalBody: c.journalBody,
				Store: &StoreConfig{Type: "redis", Addresses: []string{rs.Addr()}, Prefix: c.prefix}})
			useLogger(h, zap.NewNop())
			b.SetParallelism(16)
			b.ReportAllocs()
			c0 := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := c.req(seq.Add(1))
					caddyhttp.NewTestReplacer(r)
					w := httptest.NewRecorder()
					if err := h.ServeHTTP(w, r, benchBackend); err != nil || w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "" {
						b.Errorf("got %d %v, want a first copy", w.Code, err)
						return
					}
				}
			})
			b.ReportMetric(float64((processCPU(b)-c0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}
