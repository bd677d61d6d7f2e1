package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// adminPost posts a JSON body to the admin endpoint.
func adminPost(t *testing.T, g gatewaytest.Gateway, uri, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+g.Admin+uri, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func bulk(t *testing.T, g gatewaytest.Gateway, body string) BulkView {
	t.Helper()
	status, out := adminPost(t, g, "/idempotency/redeliver", body)
	if status != 200 {
		t.Fatalf("POST /idempotency/redeliver %s: %d %s", body, status, out)
	}
	var v BulkView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestBulkRedeliver: eight failed keys in two scopes. A dry run sends
// nothing and names the keys; a run without a filter is refused with the
// count a dry run would give; the run on one scope redelivers each of its
// keys once, at most 4 at a time, and leaves the other scope alone; a
// second run finds nothing. An answered key still needs force.
func TestBulkRedeliver(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	var now, peak atomic.Int64
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 500, "down", 0
		}
		c := now.Add(1)
		defer now.Add(-1)
		for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
		}
		time.Sleep(100 * time.Millisecond)
		return 200, "ok " + order, 0
	})
	route := func(scope, path string) string {
		return fmt.Sprintf(`
	handle %s {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope %s
			store memory
		}
		reverse_proxy %s
	}`, path, scope, be.Addr())
	}
	g := gatewaytest.StartGateway(t, route("demo", "/notify")+route("other", "/other"))
	for i := range 6 {
		gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded", fmt.Sprintf("out_trade_no=d-%d", i), nil)
	}
	for i := range 2 {
		gatewaytest.Post(t, g.Base+"/other", "application/x-www-form-urlencoded", fmt.Sprintf("out_trade_no=o-%d", i), nil)
	}

	dry := bulk(t, g, `{"state":"failed","scope":"demo","dry_run":true}`)
	if dry.Matched != 6 || len(dry.Results) != 6 || !dry.DryRun || dry.Results[0].State != "failed" || dry.Results[0].Status != 0 {
		t.Fatalf("dry run: %+v", dry)
	}
	if all := bulk(t, g, `{"state":"failed","dry_run":true}`); all.Matched != 8 {
		t.Fatalf("dry run without a filter: matched %d, want 8", all.Matched)
	}
	status, body := adminPost(t, g, "/idempotency/redeliver", `{"state":"failed"}`)
	if status != 400 || !strings.Contains(body, "matches 8 failed keys") {
		t.Fatalf("a run without a filter: %d %s, want 400 naming the 8 keys", status, body)
	}
	for _, bad := range []string{`{"state":"answered","scope":"demo"}`, `{"scope":"demo"}`, `{"state":"failed","scope":"demo","extra":1}`, `nope`} {
		if status, body := adminPost(t, g, "/idempotency/redeliver", bad); status != 400 {
			t.Errorf("%s: %d %s, want 400", bad, status, body)
		}
	}
	if be.Total.Load() != 8 {
		t.Fatalf("the dry runs and refusals reached the backend: %d requests, want the 8 first copies", be.Total.Load())
	}

	run := bulk(t, g, `{"state":"failed","scope":"demo"}`)
	if run.Matched != 6 || len(run.Results) != 6 || run.Stopped != "" {
		t.Fatalf("run: %+v", run)
	}
	for _, r := range run.Results {
		if r.Status != 200 || r.State != "answered" {
			t.Errorf("result %+v, want 200 answered", r)
		}
	}
	for i := range 6 {
		if n := be.Count(fmt.Sprintf("d-%d", i)); n != 2 {
			t.Errorf("d-%d ran %d times, want 2", i, n)
		}
	}
	for i := range 2 {
		if n := be.Count(fmt.Sprintf("o-%d", i)); n != 1 {
			t.Errorf("o-%d (another scope) ran %d times, want 1", i, n)
		}
	}
	if p := peak.Load(); p > 4 || p < 2 {
		t.Errorf("at most %d redeliveries at once, want 2..4 (paced at 4)", p)
	}
	if again := bulk(t, g, `{"state":"failed","scope":"demo"}`); again.Matched != 0 {
		t.Fatalf("second run: %+v, want nothing left", again)
	}
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if sinceRun := bulk(t, g, `{"state":"failed","since":"`+since+`","limit":1}`); sinceRun.Matched != 1 || len(sinceRun.Results) != 1 {
		t.Fatalf("since + limit 1: %+v", sinceRun)
	}
}

// TestBulkRedeliverStopsOnStoreError: Redis stops answering part way
// through a run of 12 keys. The run stops at the first store error, says
// how far it got, and no key reaches the backend more than once more; the
// keys it never reached are still failed, for the next run.
func TestBulkRedeliverStopsOnStoreError(t *testing.T) {
	testenv.Slow(t, "fault: Redis paused mid-run")
	rs := redistest.StartWith(t, redistest.Options{})
	be := gatewaytest.NewBackend(t)
	var paused sync.Once
	var redelivered atomic.Int64
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 500, "down", 0
		}
		if redelivered.Add(1) == 3 {
			paused.Do(rs.Pause)
		}
		return 200, "ok", 50 * time.Millisecond
	})
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store redis "+rs.Addr()+"\n\t\t\tstore_timeout 300ms", "{backend}", be.Addr(), "{extra}", "")
	for i := range 12 {
		gatewaytest.Notify(t, g.Base, fmt.Sprintf("s-%d", i))
	}
	run := bulk(t, g, `{"state":"failed","scope":"demo"}`)
	rs.Resume()
	if run.Matched != 12 || run.Stopped == "" || len(run.Results) >= 12 {
		t.Fatalf("run: matched %d, %d results, stopped %q; want it stopped short of 12", run.Matched, len(run.Results), run.Stopped)
	}
	total := 0
	for i := range 12 {
		n := be.Count(fmt.Sprintf("s-%d", i))
		if n > 2 {
			t.Errorf("s-%d ran %d times", i, n)
		}
		total += n - 1
	}
	if total > len(run.Results) || total < 3 {
		t.Errorf("%d redeliveries reached the backend for %d results", total, len(run.Results))
	}
	t.Logf("stopped after %d of 12 keys (%d reached the backend): %s", len(run.Results), total, run.Stopped)
}
