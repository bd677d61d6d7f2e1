package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/metrics" // the admin endpoint's /metrics

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// scrape reads the admin endpoint's /metrics (gatewaytest.Scrape): each
// sample's value by its name and sorted labels, as written:
// name{a="x",b="y"}.
func scrape(t testing.TB, g gateway) (map[string]float64, string) {
	t.Helper()
	return gatewaytest.Scrape(t, g.of())
}

func wantSample(t testing.TB, samples map[string]float64, name string, want float64) {
	t.Helper()
	gatewaytest.WantSample(t, samples, name, want)
}

const metricsSite = `
	handle /notify {
		idempotency {
			key demo:{idempotency.form.out_trade_no}
			fingerprint {idempotency.form.total_amount}
			store memory
		}
		reverse_proxy {backend}
	}
	handle /stripe {
		idempotency {
			platform stripe
			secret whsec_test
			store memory
		}
		reverse_proxy {backend}
	}`

// TestMetricsScrape: after a known sequence, Caddy's /metrics shows the
// exact counts next to Caddy's own metrics, with no key in any label; a
// config reload neither breaks the scrape nor doubles the series.
func TestMetricsScrape(t *testing.T) {
	be := newBackend(t)
	g := startGateway(t, metricsSite, "{backend}", be.addr())
	// The metrics are the process's: earlier tests counted too.
	base, _ := scrape(t, g)

	notify(t, g.base, "m-1") // forwarded
	for range 3 {
		notify(t, g.base, "m-1") // replayed
	}
	if r := notify(t, g.base, "m-1", "total_amount", "0.01"); r.status != 422 {
		t.Fatalf("conflict: %d", r.status)
	}
	hdr := http.Header{"Stripe-Signature": {fmt.Sprintf("t=%d,v1=%064x", time.Now().Unix(), 0)}}
	if r := post(t, g.base+"/stripe", "application/json", `{"id":"evt_1","type":"x"}`, hdr); r.status != 401 {
		t.Fatalf("forged stripe event: %d, want 401", r.status)
	}

	s, text := scrape(t, g)
	wantDelta(t, s, base, `idemgate_requests_total{outcome="forwarded",platform="generic",scope="generic"}`, 1)
	wantDelta(t, s, base, `idemgate_requests_total{outcome="replayed",platform="generic",scope="generic"}`, 3)
	wantDelta(t, s, base, `idemgate_requests_total{outcome="conflict",platform="generic",scope="generic"}`, 1)
	wantDelta(t, s, base, `idemgate_requests_total{outcome="rejected_signature",platform="stripe",scope="stripe"}`, 1)
	wantDelta(t, s, base, `idemgate_request_duration_seconds_count{outcome="replayed",platform="generic",scope="generic"}`, 3)
	wantDelta(t, s, base, `idemgate_backend_duration_seconds_count{platform="generic",scope="generic"}`, 1)
	// Each duplicate records its key's copy count: 2, 3, 4, and the
	// conflict sees 4 (a conflict is not counted as a copy).
	wantDelta(t, s, base, `idemgate_copies_per_key_count{platform="generic",scope="generic"}`, 4)
	wantDelta(t, s, base, `idemgate_copies_per_key_sum{platform="generic",scope="generic"}`, 13)
	wantDelta(t, s, base, `idemgate_copies_per_key_bucket{platform="generic",scope="generic",le="3"}`, 2)
	if n := len(filter(s, "idemgate_requests_total")); n < 4 {
		t.Errorf("%d idemgate_requests_total series, want at least 4:\n%s", n, text)
	}
	if strings.Contains(text, "m-1") || strings.Contains(text, "evt_1") {
		t.Errorf("a key or an id appears in the metrics:\n%s", text)
	}
	if _, ok := s["go_goroutines"]; !ok {
		t.Errorf("Caddy's own metrics are missing from /metrics")
	}
	for _, name := range []string{"idemgate_wait_duration_seconds", "idemgate_lost_claims_total", "idemgate_store_errors_total"} {
		if !strings.Contains(text, "# HELP "+name+" ") && len(filter(s, name)) != 0 {
			t.Errorf("%s has samples but no HELP", name)
		}
	}

	// A reload (same config) makes a new registry: the scrape works, each
	// metric is described once, and counting goes on where it was.
	for range 2 {
		status, cfg := g.adminDo(t, http.MethodGet, "/config/")
		if status != 200 {
			t.Fatalf("GET /config/: %d", status)
		}
		if err := caddy.Load([]byte(cfg), true); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	client.CloseIdleConnections() // kept-alive connections belong to the old server
	waitServing(t, g.base)
	notify(t, g.base, "m-2")
	notify(t, g.base, "m-2")
	s, text = scrape(t, g)
	if n := strings.Count(text, "# TYPE idemgate_requests_total counter"); n != 1 {
		t.Errorf("idemgate_requests_total described %d times after reloads, want 1", n)
	}
	wantDelta(t, s, base, `idemgate_requests_total{outcome="forwarded",platform="generic",scope="generic"}`, 2)
	wantDelta(t, s, base, `idemgate_requests_total{outcome="replayed",platform="generic",scope="generic"}`, 4)
	wantDelta(t, s, base, `idemgate_requests_total{outcome="rejected_signature",platform="stripe",scope="stripe"}`, 1)
}

// wantDelta: name grew by want since base (the process's metrics count
// every test's requests).
func wantDelta(t testing.TB, samples, base map[string]float64, name string, want float64) {
	t.Helper()
	gatewaytest.WantDelta(t, samples, base, name, want)
}

func filter(s map[string]float64, prefix string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s {
		if strings.HasPrefix(k, prefix+"{") || k == prefix {
			out[k] = v
		}
	}
	return out
}

// TestMetricsLostClaimAndWait: a key purged while its first copy is at the
// backend makes that copy's complete a lost claim (logged and counted); a
// copy that waited is counted as waited with its wait time.
func TestMetricsLostClaimAndWait(t *testing.T) {
	be := newBackend(t)
	release := make(chan struct{})
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "lc-1" && n == 1 {
			<-release
		}
		if order == "w-1" {
			return 200, "ok", 100 * time.Millisecond
		}
		return 200, "ok", 0
	})
	g := startGateway(t, metricsSite, "{backend}", be.addr())
	base, _ := scrape(t, g)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); notify(t, g.base, "lc-1") }()
	eventually(t, 5*time.Second, "lc-1 in flight", func() bool {
		status, _ := g.adminDo(t, http.MethodGet, keyURI("generic:demo:lc-1"))
		return status == 200
	})
	if status, body := g.adminDo(t, http.MethodDelete, keyURI("generic:demo:lc-1")+"?force=1"); status != 200 {
		t.Fatalf("purge: %d %s", status, body)
	}
	close(release)
	wg.Wait()

	replies := storm(t, 2, func(int) reply { return notify(t, g.base, "w-1") })
	for _, r := range replies {
		if r.status != 200 {
			t.Fatalf("w-1: %d", r.status)
		}
	}

	s, _ := scrape(t, g)
	wantDelta(t, s, base, `idemgate_lost_claims_total{op="complete",platform="generic",scope="generic"}`, 1)
	wantDelta(t, s, base, `idemgate_requests_total{outcome="waited",platform="generic",scope="generic"}`, 1)
	wantDelta(t, s, base, `idemgate_wait_duration_seconds_count{platform="generic",scope="generic"}`, 1)
	if s[`idemgate_wait_duration_seconds_sum{platform="generic",scope="generic"}`] <= 0 {
		t.Errorf("wait duration sum is not positive")
	}
}
