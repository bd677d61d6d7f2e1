package delivery_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/metrics" // the admin endpoint's /metrics
	"net"
	"regexp"

	_ "github.com/idemgate/idemgate/caddymodule"
	adminapi "github.com/idemgate/idemgate/caddymodule/admin"
	_ "github.com/idemgate/idemgate/caddymodule/command"
	async "github.com/idemgate/idemgate/delivery"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// The deliver async suite through the real module in this process
// (internal/gatewaytest), a real backend and real stores: every case
// asserts how many times the backend ran per key. The built binary as
// separate processes (two instances, a killed gateway, a restart) and the
// store's durability for it: caddymodule's deliver_process_test.go and
// deliver_durability_test.go.

// TestAsyncSlowBackendAckedAtOnce: a backend slower than the platform's
// time-out (3s). Every copy of one key is acknowledged at once, the
// backend runs once, and copies after the delivery get its remembered
// answer.
func TestAsyncSlowBackendAckedAtOnce(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a backend slower than the platform's 3s time-out")
	gatewaytest.EachStore(t, func(t *testing.T, name, storeID string) {
		be := gatewaytest.NewAsyncBackend(t, "127.0.0.1:0")
		base := gatewaytest.StartCaddy(t, gatewaytest.AsyncRoute, "{store}", storeID, "{backend}", be.Addr(), "{extra}", "")
		const copies = 20
		// Warm up: the first burst opens the client's and the store's
		// connections; the figure is the steady state's.
		for i, r := range gatewaytest.Storm(copies, func(i int) gatewaytest.Reply { return gatewaytest.Notify(t, base, "warm-"+strconv.Itoa(i)) }) {
			if r.Status != 200 {
				t.Fatalf("warm-up %d: %d", i, r.Status)
			}
		}
		gatewaytest.Eventually(t, 10*time.Second, "the warm-up delivered", func() bool { return be.Total() == copies })
		be.SetDelay(3 * time.Second)
		lat := make([]time.Duration, copies)
		replies := gatewaytest.Storm(copies, func(i int) gatewaytest.Reply {
			start := time.Now()
			r := gatewaytest.Notify(t, base, "slow-1")
			lat[i] = time.Since(start)
			return r
		})
		for i, r := range replies {
			if r.Status != 200 || r.Body != "success" || r.Replayed {
				t.Fatalf("copy %d: got %d %q replayed=%v, want the ack 200 success", i, r.Status, r.Body, r.Replayed)
			}
		}
		// Copies one after another, while the delivery is at the backend.
		for range copies {
			start := time.Now()
			if r := gatewaytest.Notify(t, base, "slow-1"); r.Status != 200 || r.Body != "success" {
				t.Fatalf("copy while delivering: got %d %q, want the ack", r.Status, r.Body)
			}
			lat = append(lat, time.Since(start))
		}
		sp50, stop := gatewaytest.Percentiles(lat[copies:])
		t.Logf("%s: one by one: p50 %v, max %v", name, sp50, stop)
		p50, top := gatewaytest.Percentiles(lat)
		limit := 500 * time.Millisecond
		if !testenv.Race {
			limit = 50 * time.Millisecond
		}
		t.Logf("%s: ack latency over %d copies (%d at once, then one by one): p50 %v, max %v", name, len(lat), copies, p50, top)
		if top > limit {
			t.Errorf("%s: slowest ack took %v, want under %v", name, top, limit)
		}
		if be.Count("slow-1") > 1 {
			t.Fatalf("backend ran %d times before the delivery ended", be.Count("slow-1"))
		}
		rec := gatewaytest.WaitAnswered(t, 20*time.Second, "demo:slow-1")
		if rec.AttemptCount != 1 || rec.Attempts[0].Outcome != store.AttemptAnswered {
			t.Errorf("journal: %d attempts %+v, want one answered", rec.AttemptCount, rec.Attempts)
		}
		if rec.Notification == nil || !strings.Contains(string(rec.Notification.Body), "out_trade_no=slow-1") {
			t.Errorf("journal kept no notification: %+v", rec.Notification)
		}
		r := gatewaytest.Notify(t, base, "slow-1")
		if r.Status != 200 || r.Body != "ok slow-1" || !r.Replayed {
			t.Errorf("copy after the delivery: got %d %q replayed=%v, want the backend's answer replayed", r.Status, r.Body, r.Replayed)
		}
		if got := be.Count("slow-1"); got != 1 {
			t.Errorf("backend ran %d times, want 1", got)
		}
		uri, att := be.URI("slow-1"), be.Attempts("slow-1")
		if uri != "/notify" || !slices.Equal(att, []string{"1"}) {
			t.Errorf("backend got URI %q attempts %v, want /notify and attempt 1", uri, att)
		}
	})
}

// TestAsyncBackendDownThenBack: the backend refuses connections for a
// while, then comes up. Every queued notification is delivered once, after
// unreachable attempts spaced by the back-off.
func TestAsyncBackendDownThenBack(t *testing.T) {
	testenv.Slow(t, "runs for seconds: back-off while the backend is down")
	rs := redistest.StartAOF(t)
	addr := gatewaytest.ReservePort(t)
	base := gatewaytest.StartCaddy(t, gatewaytest.AsyncRoute, "{store}", "store redis "+rs.Addr(), "{backend}", addr,
		"{extra}", "retry 200ms 800ms")
	keys := []string{"down-0", "down-1", "down-2", "down-3", "down-4"}
	for _, k := range keys {
		if r := gatewaytest.Notify(t, base, k); r.Status != 200 || r.Body != "success" {
			t.Fatalf("%s: got %d %q, want the ack", k, r.Status, r.Body)
		}
	}
	// Down until every key has been tried three times.
	gatewaytest.Eventually(t, 20*time.Second, "three attempts per key", func() bool {
		for _, k := range keys {
			if rec := gatewaytest.Record(t, "demo:"+k); rec == nil || rec.AttemptCount < 3 {
				return false
			}
		}
		return true
	})
	be := gatewaytest.NewAsyncBackend(t, addr)
	for _, k := range keys {
		rec := gatewaytest.WaitAnswered(t, 20*time.Second, "demo:"+k)
		if got := be.Count(k); got != 1 {
			t.Errorf("%s: backend ran %d times, want 1", k, got)
		}
		n := len(rec.Attempts)
		if n < 4 || rec.Attempts[n-1].Outcome != store.AttemptAnswered {
			t.Fatalf("%s: attempts %+v, want unreachable ones then answered", k, rec.Attempts)
		}
		for i, a := range rec.Attempts[:n-1] {
			if a.Outcome != store.AttemptUnreachable {
				t.Errorf("%s: attempt %d is %s, want unreachable", k, i+1, a.Outcome)
			}
			// Back-off: at least retry's initial 200ms between attempts
			// (a little less for the clock's granularity), at most the
			// max 800ms plus a loaded machine's slack.
			gap := rec.Attempts[i+1].Start.Sub(a.Start.Add(a.Duration))
			if gap < 190*time.Millisecond || gap > 3*time.Second {
				t.Errorf("%s: %v between attempts %d and %d, want the back-off (200ms..800ms)", k, gap, i+1, i+2)
			}
		}
		att := be.Attempts(k)
		if want := strconv.Itoa(n); !slices.Equal(att, []string{want}) {
			t.Errorf("%s: the backend saw Idemgate-Delivery-Attempt %v, want [%s]", k, att, want)
		}
	}
}

// TestAsyncStoreDownNoAck: with the store down the platform gets 503 +
// Retry-After, never the ack, and nothing reaches the backend; when it is
// back, notifications are acked and delivered.
func TestAsyncStoreDownNoAck(t *testing.T) {
	testenv.Slow(t, "fault: Redis stopped and restarted")
	rs := redistest.StartAOF(t)
	be := gatewaytest.NewAsyncBackend(t, "127.0.0.1:0")
	base := gatewaytest.StartCaddy(t, gatewaytest.AsyncRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.Addr(), "{extra}", "")
	rs.Stop()
	for range 3 {
		r := gatewaytest.Notify(t, base, "sd-1")
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.Body == "success" {
			t.Fatalf("store down: got %d %q Retry-After=%q, want 503 with Retry-After and no ack", r.Status, r.Body, r.Header.Get("Retry-After"))
		}
	}
	if got := be.Total(); got != 0 {
		t.Fatalf("backend ran %d times with the store down, want 0", got)
	}
	rs.Restart()
	gatewaytest.Eventually(t, 10*time.Second, "the store to be back", func() bool {
		r := gatewaytest.Notify(t, base, "sd-1")
		return r.Status == 200 && r.Body == "success"
	})
	gatewaytest.WaitAnswered(t, 15*time.Second, "demo:sd-1")
	if got := be.Count("sd-1"); got != 1 {
		t.Errorf("backend ran %d times for sd-1, want 1", got)
	}
}

// TestAsyncPauseResume: paused, nothing is delivered while acks go on and
// the queue grows (admin API and CLI); resumed, the queue drains, each key
// once.
func TestAsyncPauseResume(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a paused queue drained")
	be := gatewaytest.NewAsyncBackend(t, "127.0.0.1:0")
	g := gatewaytest.StartGateway(t, gatewaytest.AsyncRoute, "{store}", "store memory", "{backend}", be.Addr(), "{extra}", "concurrency 2")
	if out, err := gatewaytest.RunCLI(t, io.Discard, "pause", "demo", "--address", g.Admin); err != nil || !strings.Contains(out, `"paused": true`) {
		t.Fatalf("pause: %v %s", err, out)
	}
	const n = 10
	for i := range n {
		if r := gatewaytest.Notify(t, g.Base, "p-"+strconv.Itoa(i)); r.Status != 200 || r.Body != "success" {
			t.Fatalf("ack while paused: got %d %q", r.Status, r.Body)
		}
	}
	var view adminapi.DeliveriesView
	gatewaytest.Eventually(t, 5*time.Second, "the queue to show every notification", func() bool {
		g.AdminJSON(t, http.MethodGet, "/idempotency/deliveries", &view)
		return len(view.Deliveries) == 1 && view.Deliveries[0].Depth == n
	})
	if d := view.Deliveries[0]; d.Scope != "demo" || !d.Paused || d.Oldest.IsZero() || d.Leased != 0 {
		t.Errorf("paused queue: %+v", d)
	}
	gatewaytest.Eventually(t, 10*time.Second, "the queue gauges to show the paused queue", func() bool {
		s, _ := gatewaytest.Scrape(t, g)
		return s[`idemgate_delivery_queue_depth{platform="generic",scope="demo"}`] == n &&
			s[`idemgate_delivery_queue_oldest_age_seconds{platform="generic",scope="demo"}`] > 0
	})
	// Paused for five take periods: nothing may start.
	time.Sleep(5 * async.MaxTakeWait)
	if got := be.Total(); got != 0 {
		t.Fatalf("backend ran %d times while paused, want 0", got)
	}
	out, err := gatewaytest.RunCLI(t, io.Discard, "deliveries", "--json", "--address", g.Admin)
	if err != nil || !strings.Contains(out, `"depth": 10`) {
		t.Errorf("deliveries: %v %s", err, out)
	}
	if status, body := g.AdminDo(t, http.MethodPost, "/idempotency/deliveries/nosuch/pause"); status != http.StatusNotFound {
		t.Errorf("pausing an unknown scope: got %d %s, want 404", status, body)
	}
	// An operator purges one queued notification (in flight: force): its
	// delivery goes with it and is never sent.
	var purged adminapi.DeletedView
	g.AdminJSON(t, http.MethodDelete, gatewaytest.KeyURI("demo:p-0")+"?force=1", &purged)
	if !purged.Deleted || purged.QueuedDelivery != "removed" {
		t.Fatalf("purge of a queued key: %+v", purged)
	}
	if _, err := gatewaytest.RunCLI(t, io.Discard, "resume", "demo", "--address", g.Admin); err != nil {
		t.Fatalf("resume: %v", err)
	}
	for i := 1; i < n; i++ {
		gatewaytest.WaitAnswered(t, 15*time.Second, "demo:p-"+strconv.Itoa(i))
	}
	for i := 1; i < n; i++ {
		if got := be.Count("p-" + strconv.Itoa(i)); got != 1 {
			t.Errorf("p-%d: backend ran %d times, want 1", i, got)
		}
	}
	time.Sleep(3 * async.MaxTakeWait)
	if got := be.Count("p-0"); got != 0 {
		t.Errorf("the purged notification reached the backend %d times, want 0", got)
	}
	most := be.MaxInFlight()
	if most > 2 {
		t.Errorf("backend saw %d deliveries at once, want at most concurrency 2", most)
	}
	g.AdminJSON(t, http.MethodGet, "/idempotency/deliveries", &view)
	if d := view.Deliveries[0]; d.Depth != 0 || d.Paused {
		t.Errorf("drained queue: %+v", d)
	}
}

// TestAsyncGiveUp: a backend that keeps failing is given up after
// give_up: the key is dead (the journal says so, the idempotency.failed
// and idempotency.dead alerts went out, the dead-letter metric counts it)
// and it is not delivered again.
func TestAsyncGiveUp(t *testing.T) {
	testenv.Slow(t, "runs for seconds: retries until give_up")
	events := make(chan gatewaytest.Alert, 100)
	ops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e gatewaytest.Alert
		_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&e)
		events <- e
	}))
	t.Cleanup(ops.Close)
	be := gatewaytest.NewAsyncBackend(t, "127.0.0.1:0")
	be.SetAnswer(func(key string, n int) (int, string) { return 500, "broken" })
	route := strings.Replace(gatewaytest.AsyncRoute, "lock_ttl 2s", "lock_ttl 2s\n\t\t\talert "+ops.URL+" failed dead", 1)
	g := gatewaytest.StartGateway(t, route, "{store}", "store memory", "{backend}", be.Addr(),
		"{extra}", "retry 100ms 200ms\n\t\t\t\tgive_up 1s")
	base, _ := gatewaytest.Scrape(t, g) // the process's metrics: earlier tests counted too
	if r := gatewaytest.Notify(t, g.Base, "gu-1"); r.Status != 200 {
		t.Fatalf("ack: %d", r.Status)
	}
	var rec *store.Record
	gatewaytest.Eventually(t, 15*time.Second, "the key to be given up", func() bool {
		rec = gatewaytest.Record(t, "demo:gu-1")
		return rec != nil && rec.State == store.StateFailed
	})
	var list adminapi.PageView
	g.AdminJSON(t, http.MethodGet, "/idempotency/keys?state=dead", &list)
	if len(list.Keys) != 1 || list.Keys[0].Key != "demo:gu-1" {
		t.Errorf("dead keys: %+v, want demo:gu-1 (dead after give_up)", list.Keys)
	}
	runs := be.Count("gu-1")
	if runs < 2 || int64(runs) != rec.AttemptCount {
		t.Errorf("backend ran %d times, journal has %d attempts; want the same, at least 2", runs, rec.AttemptCount)
	}
	for _, a := range rec.Attempts {
		if a.Outcome != store.AttemptFailed || a.Status != 500 || string(a.Body) != "broken" {
			t.Errorf("attempt %+v, want failed 500 broken", a)
		}
	}
	failed := 0
	for dead := false; !dead; {
		select {
		case e := <-events:
			switch e.Event {
			case "idempotency.failed":
				failed++
			case "idempotency.dead":
				dead = true
				if e.Key != "demo:gu-1" || e.Attempts != int64(runs) || e.Status != 500 {
					t.Errorf("dead alert %+v", e)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no idempotency.dead alert (%d failed ones)", failed)
		}
	}
	if failed != runs {
		t.Errorf("%d idempotency.failed alerts for %d failed attempts", failed, runs)
	}
	s, _ := gatewaytest.Scrape(t, g)
	gatewaytest.WantDelta(t, s, base, `idemgate_delivery_dead_total{platform="generic",scope="demo"}`, 1)
	gatewaytest.WantDelta(t, s, base, `idemgate_delivery_attempts_total{outcome="failed",platform="generic",scope="demo"}`, float64(runs))
	gatewaytest.WantDelta(t, s, base, `idemgate_delivery_duration_seconds_count{outcome="failed",platform="generic",scope="demo"}`, float64(runs))
	gatewaytest.WantDelta(t, s, base, `idemgate_requests_total{outcome="queued",platform="generic",scope="demo"}`, 1)
	gatewaytest.Eventually(t, 5*time.Second, "the queue gauge to read empty", func() bool {
		s, _ := gatewaytest.Scrape(t, g)
		v, ok := s[`idemgate_delivery_queue_depth{platform="generic",scope="demo"}`]
		return ok && v == 0
	})
	time.Sleep(500 * time.Millisecond)
	if got := be.Count("gu-1"); got != runs {
		t.Errorf("backend ran %d more times after give_up", got-runs)
	}
	// A copy of a failed key is a new notification: acked and delivered.
	if r := gatewaytest.Notify(t, g.Base, "gu-1"); r.Status != 200 || r.Body != "success" {
		t.Errorf("copy after give_up: %d %q", r.Status, r.Body)
	}
}

// TestAsyncAmbiguousNeverResent: the backend reads a delivery and breaks
// the connection without answering. The delivery carries an
// Idempotency-Key header on a kept-alive connection, which Go's transport
// would silently send again: it is not. The attempt is ambiguous, journaled
// and retried only after lock_ttl, as the contract says.
func TestAsyncAmbiguousNeverResent(t *testing.T) {
	testenv.Slow(t, "runs for seconds: waits out lock_ttl")
	be := gatewaytest.NewAsyncBackend(t, "127.0.0.1:0")
	be.SetCut(func(key string, n int) bool { return key == "amb-1" && n == 1 })
	base := gatewaytest.StartCaddy(t, gatewaytest.AsyncRoute, "{store}", "store memory", "{backend}", be.Addr(), "{extra}", "concurrency 1")
	// A first delivery leaves a kept-alive connection for the next.
	if r := gatewaytest.Notify(t, base, "amb-0"); r.Status != 200 {
		t.Fatalf("ack: %d", r.Status)
	}
	gatewaytest.WaitAnswered(t, 10*time.Second, "demo:amb-0")
	hdr := http.Header{"Idempotency-Key": {"amb-1"}}
	if r := gatewaytest.Post(t, base+"/notify", "application/x-www-form-urlencoded", "out_trade_no=amb-1&total_amount=9.90", hdr); r.Status != 200 || r.Body != "success" {
		t.Fatalf("ack: %d %q", r.Status, r.Body)
	}
	var rec *store.Record
	gatewaytest.Eventually(t, 10*time.Second, "the ambiguous attempt journaled", func() bool {
		rec = gatewaytest.Record(t, "demo:amb-1")
		return rec != nil && rec.AttemptCount >= 1
	})
	if got := be.Count("amb-1"); got != 1 {
		t.Fatalf("backend ran %d times for the first attempt, want 1 (the transport re-sent it)", got)
	}
	first := rec.Attempts[0]
	if first.Outcome != store.AttemptAmbiguous {
		t.Fatalf("first attempt %+v, want ambiguous", first)
	}
	rec = gatewaytest.WaitAnswered(t, 15*time.Second, "demo:amb-1")
	if n := len(rec.Attempts); n != 2 || rec.Attempts[1].Outcome != store.AttemptAnswered {
		t.Fatalf("attempts %+v, want ambiguous then answered", rec.Attempts)
	}
	if gap := rec.Attempts[1].Start.Sub(first.Start); gap < 2*time.Second-50*time.Millisecond {
		t.Errorf("retried %v after the ambiguous attempt, want lock_ttl (2s)", gap)
	}
	if got := be.Count("amb-1"); got != 2 {
		t.Errorf("backend ran %d times, want 2 (the broken attempt and the retry after lock_ttl)", got)
	}
}

// TestAsyncClaimRanOutWhilePaused: a scope paused for longer than the
// claim's hold (give_up + retry max + 2×lock_ttl) still delivers its
// queued notification once resumed, once: the delivery claims its key
// again.
func TestAsyncClaimRanOutWhilePaused(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a pause longer than the claim's hold")
	be := gatewaytest.NewAsyncBackend(t, "127.0.0.1:0")
	g := gatewaytest.StartGateway(t, gatewaytest.AsyncRoute, "{store}", "store memory", "{backend}", be.Addr(),
		"{extra}", "retry 100ms 200ms\n\t\t\t\tgive_up 1s")
	gatewaytest.AdminPost(t, g.Admin, "/idempotency/deliveries/demo/pause")
	if r := gatewaytest.Notify(t, g.Base, "ro-1"); r.Status != 200 || r.Body != "success" {
		t.Fatalf("ack: %d %q", r.Status, r.Body)
	}
	// The hold is 1s + 200ms + 2×2s: the claim (without a journal yet)
	// is then gone.
	gatewaytest.Eventually(t, 15*time.Second, "the claim to run out", func() bool { return gatewaytest.Record(t, "demo:ro-1") == nil })
	gatewaytest.AdminPost(t, g.Admin, "/idempotency/deliveries/demo/resume")
	rec := gatewaytest.WaitAnswered(t, 10*time.Second, "demo:ro-1")
	if got := be.Count("ro-1"); got != 1 || rec.AttemptCount != 1 {
		t.Errorf("backend ran %d times, journal has %d attempts; want 1 and 1", got, rec.AttemptCount)
	}
}

// TestAsyncEnqueueFailsNoAck: the claim is won but the queue refuses the
// notification (its Redis key holds the wrong type, a real error from the
// real server): 503 + Retry-After, never the ack, the key freed at once
// for the platform's retry, nothing delivered; once the queue works, the
// retry is acked and delivered once.
func TestAsyncEnqueueFailsNoAck(t *testing.T) {
	rs := redistest.StartAOF(t)
	be := gatewaytest.NewAsyncBackend(t, "127.0.0.1:0")
	base := gatewaytest.StartCaddy(t, gatewaytest.AsyncRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.Addr(), "{extra}", "")
	items := "idem:q:{demo}:items"
	if err := rs.Client().Set(context.Background(), items, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := gatewaytest.Notify(t, base, "eq-1")
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.Body == "success" {
		t.Fatalf("enqueue refused: got %d %q, want 503 with Retry-After and no ack", r.Status, r.Body)
	}
	if rec := gatewaytest.Record(t, "demo:eq-1"); rec != nil {
		t.Errorf("the key was not freed after the failed enqueue: %+v", rec)
	}
	if err := rs.Client().Del(context.Background(), items).Err(); err != nil {
		t.Fatal(err)
	}
	if r := gatewaytest.Notify(t, base, "eq-1"); r.Status != 200 || r.Body != "success" {
		t.Fatalf("retry once the queue works: %d %q", r.Status, r.Body)
	}
	gatewaytest.WaitAnswered(t, 10*time.Second, "demo:eq-1")
	if got := be.Count("eq-1"); got != 1 {
		t.Errorf("backend ran %d times, want 1", got)
	}
}

// TestAsyncFastBackendStorm: copies of each key at once with a fast
// backend, on every store and on a Redis Cluster (the queue of a scope in
// one slot, the keys' records spread over the masters): each copy gets the
// ack or, when it came after the delivery ended, the remembered answer;
// none gets an error; the backend runs once per key. (Copies race the
// delivery's end here: a copy that found the key in flight may find it
// answered and no longer queued.)
func TestAsyncFastBackendStorm(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster")
	stores := gatewaytest.StoreLines(t)
	stores["cluster"] = "store redis " + strings.Join(redistest.StartClusterWith(t, 3, redistest.Options{AOF: true, AppendFsync: "everysec"}).Addrs, " ")
	for name, storeID := range stores {
		t.Run(name, func(t *testing.T) {
			be := gatewaytest.NewAsyncBackend(t, "127.0.0.1:0")
			base := gatewaytest.StartCaddy(t, gatewaytest.AsyncRoute, "{store}", storeID, "{backend}", be.Addr(), "{extra}", "")
			for i := range 10 {
				k := "fs-" + strconv.Itoa(i)
				for j, r := range gatewaytest.Storm(5, func(int) gatewaytest.Reply { return gatewaytest.Notify(t, base, k) }) {
					if r.Status != 200 || (r.Body != "success" && !(r.Replayed && r.Body == "ok "+k)) {
						t.Fatalf("%s copy %d: %d %q replayed=%v", k, j, r.Status, r.Body, r.Replayed)
					}
				}
			}
			for i := range 10 {
				k := "fs-" + strconv.Itoa(i)
				gatewaytest.WaitAnswered(t, 10*time.Second, "demo:"+k)
				if got := be.Count(k); got != 1 {
					t.Errorf("%s: backend ran %d times, want 1", k, got)
				}
			}
		})
	}
}

// TestAsyncStatesBackendRefusing: deliver async to a backend that refuses
// connections. The acked notification reads retrying with its next
// attempt (never in_flight), every attempt keeps "connection refused" as
// its error, and once give_up has passed the key reads dead, async: the
// platform has its ack. A redelivery of a queued key is refused.
func TestAsyncStatesBackendRefusing(t *testing.T) {
	testenv.Slow(t, "runs for seconds: retries until give_up")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope demo
			store memory
			lock_ttl 1s
			deliver async {
				to http://`+closed+`
				ack 200 success
				retry 200ms 400ms
				give_up 2s
			}
		}
	}`)
	if r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded", "out_trade_no=r-1", nil); r.Status != 200 || r.Body != "success" {
		t.Fatalf("ack: %+v", r)
	}
	var rec adminapi.RecordView
	gatewaytest.Eventually(t, 5*time.Second, "the key retrying", func() bool {
		g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("demo:r-1"), &rec)
		return rec.State == "retrying" && rec.NextAttempt != nil
	})
	if len(rec.Attempts) == 0 || rec.Attempts[0].Error != "connection refused" || rec.Attempts[0].Outcome != "unreachable" || !rec.Async {
		t.Fatalf("retrying record: %+v", rec)
	}
	if status, body := g.AdminDo(t, http.MethodPost, gatewaytest.KeyURI("demo:r-1")+"/redeliver"); status != http.StatusConflict || !strings.Contains(body, "delivers it itself") {
		t.Fatalf("redelivery of a queued key: %d %s, want 409", status, body)
	}
	// The CLI's queue table, for people.
	if out, err := gatewaytest.RunCLI(t, io.Discard, "deliveries", "--address", g.Admin); err != nil ||
		!regexp.MustCompile(`(?m)^SCOPE +PLATFORM +DEPTH +LEASED +OLDEST +PAUSED +TO\ndemo +generic +1 +[01] +\S+ +no +http://`).MatchString(out) {
		t.Errorf("deliveries as a table: %v\n%s", err, out)
	}
	var page adminapi.PageView
	g.AdminJSON(t, http.MethodGet, "/idempotency/keys?state=in_flight", &page)
	if len(page.Keys) != 1 || page.Keys[0].State == "in_flight" {
		t.Fatalf("in-flight listing: %+v, want the key by its async state", page.Keys)
	}
	gatewaytest.Eventually(t, 10*time.Second, "the key dead after give_up", func() bool {
		g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("demo:r-1"), &rec)
		return rec.State == "dead"
	})
	for i, a := range rec.Attempts {
		if a.Error != "connection refused" {
			t.Errorf("attempt %d: error %q, want connection refused", i, a.Error)
		}
	}
	if !rec.Async || len(rec.Attempts) < 2 {
		t.Fatalf("dead record: %+v", rec)
	}
}
