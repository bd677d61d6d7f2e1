package metrics_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// reloadSite has a sync route and an async route whose backend always
// fails, each in a scope of its own (the process's metrics count every
// test's requests; these scopes only this test's).
const reloadSite = `
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope metrics-reload
			store memory
		}
		reverse_proxy {backend}
	}
	handle /async {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope metrics-reload-async
			store memory
			lock_ttl 2s
			deliver async {
				to {failing}
				ack 200 success
				retry 100ms 200ms
				give_up 1s
			}
		}
	}`

// TestMetricsSurvivePostLoad: counters keep counting across `POST /load`
// (what `caddy reload` sends), and no series disappears, the async
// attempt and dead-letter series included.
func TestMetricsSurvivePostLoad(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	g := gatewaytest.StartGateway(t, reloadSite, "{backend}", be.Addr(), "{failing}", failing.URL)

	gatewaytest.Notify(t, g.Base, "r-1") // forwarded
	gatewaytest.Notify(t, g.Base, "r-1") // replayed
	if r := gatewaytest.Post(t, g.Base+"/async", "application/x-www-form-urlencoded", "out_trade_no=ra-1", nil); r.Status != 200 {
		t.Fatalf("async ack: %d %q", r.Status, r.Body)
	}
	dead := `idemgate_delivery_dead_total{platform="generic",scope="metrics-reload-async"}`
	var before map[string]float64
	gatewaytest.Eventually(t, 15*time.Second, "the async notification to be given up", func() bool {
		before, _ = gatewaytest.Scrape(t, g)
		return before[dead] == 1
	})
	gatewaytest.WantSample(t, before, `idemgate_requests_total{outcome="forwarded",platform="generic",scope="metrics-reload"}`, 1)
	attempts := `idemgate_delivery_attempts_total{outcome="failed",platform="generic",scope="metrics-reload-async"}`
	if before[attempts] < 2 {
		t.Fatalf("%s = %v, want at least 2 before the reload", attempts, before[attempts])
	}

	// POST /load with the running config, forced as `caddy reload --force`
	// does (an unchanged config is otherwise not loaded again).
	status, cfg := g.AdminDo(t, http.MethodGet, "/config/")
	if status != http.StatusOK {
		t.Fatalf("GET /config/: %d", status)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+g.Admin+"/load", bytes.NewBufferString(cfg))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Cache-Control", "must-revalidate")
	resp, err := gatewaytest.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /load: %d %s", resp.StatusCode, body)
	}
	gatewaytest.Client.CloseIdleConnections() // kept-alive connections belong to the old server
	gatewaytest.WaitServing(t, g.Base)

	after, text := gatewaytest.Scrape(t, g)
	for name, v := range before {
		if !strings.HasPrefix(name, "idemgate_") || strings.Contains(name, "_queue_") {
			continue // Caddy's own, and gauges (they read what is, not what was)
		}
		got, ok := after[name]
		switch {
		case !ok:
			t.Errorf("%s disappeared with the reload", name)
		case got < v:
			t.Errorf("%s fell from %v to %v with the reload", name, v, got)
		}
	}
	gatewaytest.WantSample(t, after, dead, 1)
	// The attempts counter is held above to no less than before (a reset
	// shows there), not to equal it: once, on a loaded machine, it read 9
	// against 8, an attempt counted after the give-up was scraped (a
	// delivery whose lease renewal came late is taken over, and its taker
	// may try once more before it finds the key given up).
	if n := strings.Count(text, "# TYPE idemgate_requests_total counter"); n != 1 {
		t.Errorf("idemgate_requests_total described %d times after the reload, want 1", n)
	}

	gatewaytest.Notify(t, g.Base, "r-2")
	after, _ = gatewaytest.Scrape(t, g)
	gatewaytest.WantSample(t, after, `idemgate_requests_total{outcome="forwarded",platform="generic",scope="metrics-reload"}`, 2)
	gatewaytest.WantSample(t, after, `idemgate_requests_total{outcome="replayed",platform="generic",scope="metrics-reload"}`, 1)
	if n := be.Count("r-1") + be.Count("r-2"); n != 2 {
		t.Errorf("backend ran %d times for r-1 and r-2, want 2", n)
	}
}
