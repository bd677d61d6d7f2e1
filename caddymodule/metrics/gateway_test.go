package metrics_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"fmt"
	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/metrics" // the admin endpoint's /metrics

	_ "github.com/idemgate/idemgate/caddymodule"
	_ "github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// The metrics through the real module (internal/gatewaytest), scraped
// from the admin endpoint's /metrics as Prometheus does. The process's
// metrics count every test's requests: the tests compare with a scrape
// taken before.

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
	be := gatewaytest.NewBackend(t)
	g := gatewaytest.StartGateway(t, metricsSite, "{backend}", be.Addr())
	// The metrics are the process's: earlier tests counted too.
	base, _ := gatewaytest.Scrape(t, g)

	gatewaytest.Notify(t, g.Base, "m-1") // forwarded
	for range 3 {
		gatewaytest.Notify(t, g.Base, "m-1") // replayed
	}
	if r := gatewaytest.Notify(t, g.Base, "m-1", "total_amount", "0.01"); r.Status != 422 {
		t.Fatalf("conflict: %d", r.Status)
	}
	hdr := http.Header{"Stripe-Signature": {fmt.Sprintf("t=%d,v1=%064x", time.Now().Unix(), 0)}}
	if r := gatewaytest.Post(t, g.Base+"/stripe", "application/json", `{"id":"evt_1","type":"x"}`, hdr); r.Status != 401 {
		t.Fatalf("forged stripe event: %d, want 401", r.Status)
	}

	s, text := gatewaytest.Scrape(t, g)
	gatewaytest.WantDelta(t, s, base, `idemgate_requests_total{outcome="forwarded",platform="generic",scope="generic"}`, 1)
	gatewaytest.WantDelta(t, s, base, `idemgate_requests_total{outcome="replayed",platform="generic",scope="generic"}`, 3)
	gatewaytest.WantDelta(t, s, base, `idemgate_requests_total{outcome="conflict",platform="generic",scope="generic"}`, 1)
	gatewaytest.WantDelta(t, s, base, `idemgate_requests_total{outcome="rejected_signature",platform="stripe",scope="stripe"}`, 1)
	gatewaytest.WantDelta(t, s, base, `idemgate_request_duration_seconds_count{outcome="replayed",platform="generic",scope="generic"}`, 3)
	gatewaytest.WantDelta(t, s, base, `idemgate_backend_duration_seconds_count{platform="generic",scope="generic"}`, 1)
	// Each duplicate records its key's copy count: 2, 3, 4, and the
	// conflict sees 4 (a conflict is not counted as a copy).
	gatewaytest.WantDelta(t, s, base, `idemgate_copies_per_key_count{platform="generic",scope="generic"}`, 4)
	gatewaytest.WantDelta(t, s, base, `idemgate_copies_per_key_sum{platform="generic",scope="generic"}`, 13)
	gatewaytest.WantDelta(t, s, base, `idemgate_copies_per_key_bucket{platform="generic",scope="generic",le="3"}`, 2)
	if n := len(gatewaytest.Series(s, "idemgate_requests_total")); n < 4 {
		t.Errorf("%d idemgate_requests_total series, want at least 4:\n%s", n, text)
	}
	if strings.Contains(text, "m-1") || strings.Contains(text, "evt_1") {
		t.Errorf("a key or an id appears in the metrics:\n%s", text)
	}
	if _, ok := s["go_goroutines"]; !ok {
		t.Errorf("Caddy's own metrics are missing from /metrics")
	}
	for _, name := range []string{"idemgate_wait_duration_seconds", "idemgate_lost_claims_total", "idemgate_store_errors_total"} {
		if !strings.Contains(text, "# HELP "+name+" ") && len(gatewaytest.Series(s, name)) != 0 {
			t.Errorf("%s has samples but no HELP", name)
		}
	}

	// A reload (same config) makes a new registry: the scrape works, each
	// metric is described once, and counting goes on where it was.
	for range 2 {
		status, cfg := g.AdminDo(t, http.MethodGet, "/config/")
		if status != 200 {
			t.Fatalf("GET /config/: %d", status)
		}
		if err := caddy.Load([]byte(cfg), true); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	gatewaytest.Client.CloseIdleConnections() // kept-alive connections belong to the old server
	gatewaytest.WaitServing(t, g.Base)
	gatewaytest.Notify(t, g.Base, "m-2")
	gatewaytest.Notify(t, g.Base, "m-2")
	s, text = gatewaytest.Scrape(t, g)
	if n := strings.Count(text, "# TYPE idemgate_requests_total counter"); n != 1 {
		t.Errorf("idemgate_requests_total described %d times after reloads, want 1", n)
	}
	gatewaytest.WantDelta(t, s, base, `idemgate_requests_total{outcome="forwarded",platform="generic",scope="generic"}`, 2)
	gatewaytest.WantDelta(t, s, base, `idemgate_requests_total{outcome="replayed",platform="generic",scope="generic"}`, 4)
	gatewaytest.WantDelta(t, s, base, `idemgate_requests_total{outcome="rejected_signature",platform="stripe",scope="stripe"}`, 1)
}

// TestMetricsLostClaimAndWait: a key purged while its first copy is at the
// backend makes that copy's complete a lost claim (logged and counted); a
// copy that waited is counted as waited with its wait time.
func TestMetricsLostClaimAndWait(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	release := make(chan struct{})
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "lc-1" && n == 1 {
			<-release
		}
		if order == "w-1" {
			return 200, "ok", 100 * time.Millisecond
		}
		return 200, "ok", 0
	})
	g := gatewaytest.StartGateway(t, metricsSite, "{backend}", be.Addr())
	base, _ := gatewaytest.Scrape(t, g)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); gatewaytest.Notify(t, g.Base, "lc-1") }()
	gatewaytest.Eventually(t, 5*time.Second, "lc-1 in flight", func() bool {
		status, _ := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI("generic:demo:lc-1"))
		return status == 200
	})
	if status, body := g.AdminDo(t, http.MethodDelete, gatewaytest.KeyURI("generic:demo:lc-1")+"?force=1"); status != 200 {
		t.Fatalf("purge: %d %s", status, body)
	}
	close(release)
	wg.Wait()

	replies := gatewaytest.Storm(2, func(int) gatewaytest.Reply { return gatewaytest.Notify(t, g.Base, "w-1") })
	for _, r := range replies {
		if r.Status != 200 {
			t.Fatalf("w-1: %d", r.Status)
		}
	}

	s, _ := gatewaytest.Scrape(t, g)
	gatewaytest.WantDelta(t, s, base, `idemgate_lost_claims_total{op="complete",platform="generic",scope="generic"}`, 1)
	gatewaytest.WantDelta(t, s, base, `idemgate_requests_total{outcome="waited",platform="generic",scope="generic"}`, 1)
	gatewaytest.WantDelta(t, s, base, `idemgate_wait_duration_seconds_count{platform="generic",scope="generic"}`, 1)
	if s[`idemgate_wait_duration_seconds_sum{platform="generic",scope="generic"}`] <= 0 {
		t.Errorf("wait duration sum is not positive")
	}
}
