package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	adminapi "github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/testenv"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
)

// deliver async on the built binary: two instances sharing Redis, a
// killed instance, a reload, a restart of the embedded store.

// asyncProcSite is an async route of scope for the processes.
func asyncProcSite(scope, storeID, backend, extra string) string {
	return fmt.Sprintf(`
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope %s
			%s
			lock_ttl 2s
			deliver async {
				to http://%s
				ack 200 success
				%s
			}
		}
	}`, scope, storeID, backend, extra)
}

// redisRecords reads records straight from the test's Redis.
func redisRecords(t testing.TB, rs *redistest.Server) func(key string) *store.Record {
	s := store.NewRedis(rs.Client(), store.RedisOptions{})
	return func(key string) *store.Record {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec, err := s.Lookup(ctx, key)
		if err != nil {
			return nil
		}
		return rec
	}
}

// sendAll posts one notification per key through the gateways (in turn),
// workers at a time, and fails on anything but the ack; it returns the ack
// latencies.
func sendAll(t *testing.T, bases []string, keys []string, workers int) []time.Duration {
	t.Helper()
	lat := make([]time.Duration, len(keys))
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) || failed.Load() > 10 {
					return
				}
				start := time.Now()
				r, err := faultSend(client, http.MethodPost, bases[i%len(bases)]+"/notify", form(keys[i]), formHeader)
				lat[i] = time.Since(start)
				if err != nil || r.status != 200 || r.body != "success" {
					failed.Add(1)
					t.Errorf("%s: got %d %q %v, want the ack", keys[i], r.status, r.body, err)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	return lat
}

// adminPost POSTs to a process's admin endpoint and wants 200
// (gatewaytest.AdminPost).
func adminPost(t testing.TB, admin, path string) string {
	t.Helper()
	return gatewaytest.AdminPost(t, admin, path)
}

// TestAsyncBurstTwoInstances: 10,000 notifications in a burst through two
// gateway processes sharing one Redis, `concurrency 8` and `rate 200/s`:
// the backend never sees more than 8 deliveries at once nor more than 200
// starts in any second, and runs each key once.
func TestAsyncBurstTwoInstances(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary: 10,000 notifications at a bounded rate")
	t.Parallel()
	const (
		n           = 10000
		concurrency = 8
		rate        = 200
	)
	rs := redistest.StartAOF(t)
	be := newAsyncBackend(t, "127.0.0.1:0")
	be.setDelay(15 * time.Millisecond) // some work, so deliveries overlap
	site := asyncProcSite("burst", "store redis "+rs.Addr(), be.addr(),
		fmt.Sprintf("concurrency %d\n\t\t\t\trate %d/s", concurrency, rate))
	a := startProc(t, t.TempDir(), site)
	b := startProc(t, t.TempDir(), site)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("b-%05d", i)
	}
	start := time.Now()
	lat := sendAll(t, []string{a.base, b.base}, keys, 32)
	sent := time.Since(start)
	p50, top := percentiles(lat)
	t.Logf("%d notifications acked in %v through 2 instances: ack p50 %v, max %v", n, sent, p50, top)

	deadline := time.Now().Add(90 * time.Second)
	for be.total() < n && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	// A moment more: a key delivered twice would show now.
	time.Sleep(500 * time.Millisecond)
	starts, hits, most := be.Starts(), be.Hits(), be.MaxInFlight()
	if len(starts) < n {
		t.Fatalf("the backend got %d of %d deliveries within 90s", len(starts), n)
	}
	twice := 0
	for _, k := range keys {
		if hits[k] != 1 {
			twice++
			if twice < 10 {
				t.Errorf("%s: backend ran %d times, want 1", k, hits[k])
			}
		}
	}
	if most > concurrency {
		t.Errorf("the backend saw %d deliveries at once, want at most %d", most, concurrency)
	}
	slices.SortFunc(starts, func(x, y time.Time) int { return x.Compare(y) })
	worst := 0
	for i, j := 0, 0; i < len(starts); i++ {
		for starts[i].Sub(starts[j]) >= time.Second {
			j++
		}
		worst = max(worst, i-j+1)
	}
	// The queue counts a start when it hands a delivery out and keeps
	// each start for store.RateWindow (1s + 100ms): a spread of up to
	// 100ms between a start and its arrival keeps the backend's every
	// second within the rate. Under -race the backend runs in this test
	// process, several times slower, and stamps arrivals late and in
	// bunches (202–205 "starts" in a second were read on a loaded
	// machine): there the stamps are allowed 5% of jitter, and .ci/run
	// runs this test once more without -race for the exact figure.
	limit := rate
	if raceDetector {
		limit = rate + rate/20
	}
	if worst > limit {
		t.Errorf("the backend saw %d starts within one second, want at most %d", worst, limit)
	}
	drain := starts[len(starts)-1].Sub(starts[0])
	t.Logf("drained %d deliveries in %v (%.0f/s; rate %d/s), at most %d at once, at most %d starts in a second",
		len(starts), drain.Round(time.Millisecond), float64(len(starts)-1)/drain.Seconds(), rate, most, worst)
}

// TestAsyncKilledGatewayTakenOver: a gateway is killed (SIGKILL) with
// deliveries at the backend; the other instance takes its deliveries over
// after lock_ttl. A delivery whose attempt the dead gateway had started is
// held as ambiguous (the backend may have run it), never sent again; every
// other key is delivered once.
func TestAsyncKilledGatewayTakenOver(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	const lockTTL = 2 * time.Second
	rs := redistest.StartAOF(t)
	lookup := redisRecords(t, rs)
	be := newAsyncBackend(t, "127.0.0.1:0")
	be.setDelay(time.Minute) // the killed gateway's deliveries stay at the backend
	site := asyncProcSite("kill", "store redis "+rs.Addr(), be.addr(), "concurrency 4")
	a := startProc(t, t.TempDir(), site)
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("k-%02d", i))
	}
	sendAll(t, []string{a.base}, keys, 4)
	var first []string
	for len(first) < 4 {
		select {
		case k := <-be.Arrived():
			first = append(first, k)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d deliveries reached the backend", len(first))
		}
	}
	b := startProc(t, t.TempDir(), site)
	be.setDelay(50 * time.Millisecond)
	a.kill()
	killed := time.Now()

	settled := func(k string) (answered, held bool) {
		rec := lookup("kill:" + k)
		if rec == nil {
			return false, false
		}
		if rec.State == store.StateAnswered {
			return true, false
		}
		// Held: the claim for lock_ttl, then the key reads failed.
		n := len(rec.Attempts)
		return false, (rec.State == store.StateInFlight || rec.State == store.StateFailed) &&
			n > 0 && rec.Attempts[n-1].Outcome == store.AttemptAmbiguous
	}
	eventually(t, 30*time.Second, "every key delivered or held", func() bool {
		for _, k := range keys {
			if a, h := settled(k); !a && !h {
				return false
			}
		}
		return true
	})
	answered, held := 0, 0
	for _, k := range keys {
		if got := be.count(k); got != 1 {
			t.Errorf("%s: backend ran %d times, want 1", k, got)
		}
		ok, hold := settled(k)
		switch {
		case ok:
			answered++
		case hold:
			held++
			if !slices.Contains(first, k) {
				t.Errorf("%s: held as ambiguous, but the killed gateway never sent it", k)
			}
			rec := lookup("kill:" + k)
			at := rec.Attempts[len(rec.Attempts)-1].Start
			// The lease was extended every lock_ttl/3 until the kill.
			if at.Before(killed.Add(2*lockTTL/3 - 100*time.Millisecond)) {
				t.Errorf("%s: taken over %v after the kill, before its lease could run out", k, at.Sub(killed))
			}
		}
	}
	if held != len(first) {
		t.Errorf("%d keys held as ambiguous, want the %d the killed gateway had at the backend", held, len(first))
	}
	t.Logf("killed with %d deliveries at the backend: %d keys delivered once by the other instance, %d held as ambiguous",
		len(first), answered, held)
	if !strings.Contains(procLog(b), "never settled it") {
		t.Errorf("the taking-over gateway did not log the ambiguous hold")
	}
	// The hold ends after lock_ttl: the key reads failed, with its
	// journal, so an operator can redeliver it; nothing sends it again.
	for _, k := range first {
		eventually(t, 10*time.Second, k+" to read failed after the hold", func() bool {
			rec := lookup("kill:" + k)
			return rec != nil && rec.State == store.StateFailed && rec.Notification != nil
		})
		if got := be.count(k); got != 1 {
			t.Errorf("%s: backend ran %d times after the hold, want 1", k, got)
		}
	}
}

// TestAsyncReloadMidDrain: the config is reloaded twice while the queue
// drains; nothing is lost and nothing is delivered twice.
func TestAsyncReloadMidDrain(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	rs := redistest.StartAOF(t)
	be := newAsyncBackend(t, "127.0.0.1:0")
	be.setDelay(50 * time.Millisecond)
	site := func(rate int) string {
		return asyncProcSite("reload", "store redis "+rs.Addr(), be.addr(), fmt.Sprintf("rate %d/s", rate))
	}
	gw, admin, caddyfile := startProcAdmin(t, site(20))
	const n = 60
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("r-%02d", i))
	}
	sendAll(t, []string{gw.base}, keys, 8)
	for i, rate := range []int{25, 30} {
		eventually(t, 20*time.Second, "the drain to be under way", func() bool { return be.total() >= 10+15*i })
		if err := adminLoad(admin, caddyfile(site(rate))); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	lookup := redisRecords(t, rs)
	eventually(t, 30*time.Second, "every key delivered", func() bool {
		for _, k := range keys {
			if rec := lookup("reload:" + k); rec == nil || rec.State != store.StateAnswered {
				return false
			}
		}
		return true
	})
	for _, k := range keys {
		if got := be.count(k); got != 1 {
			t.Errorf("%s: backend ran %d times, want 1", k, got)
		}
	}
	if t.Failed() {
		t.Logf("gateway log:\n%s", procLog(gw))
	}
}

// TestAsyncEmbeddedRestart: the embedded store keeps queued deliveries
// (and the pause) across a gateway killed and started again; resumed, it
// delivers each once.
func TestAsyncEmbeddedRestart(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	be := newAsyncBackend(t, "127.0.0.1:0")
	gw, admin, _ := startProcAdmin(t, asyncProcSite("restart", "", be.addr(), ""))
	awaitQueue(t, admin)
	adminPost(t, admin, "/idempotency/deliveries/restart/pause")
	var keys []string
	for i := range 5 {
		keys = append(keys, fmt.Sprintf("e-%d", i))
	}
	sendAll(t, []string{gw.base}, keys, 5)
	gw.kill()
	if be.total() != 0 {
		t.Fatalf("backend ran %d times while paused", be.total())
	}
	gw.start()
	waitListening(t, "http://"+admin)
	view := awaitQueue(t, admin)
	if len(view.Deliveries) != 1 || view.Deliveries[0].Depth != 5 || !view.Deliveries[0].Paused {
		t.Fatalf("after the restart the queue is %+v, want 5 deliveries, paused", view.Deliveries)
	}
	adminPost(t, admin, "/idempotency/deliveries/restart/resume")
	for _, k := range keys {
		eventually(t, 15*time.Second, k+" delivered", func() bool {
			resp, err := freshClient.Get("http://" + admin + "/idempotency/keys/" + url.PathEscape("restart:"+k))
			if err != nil {
				return false
			}
			var rec adminapi.RecordView
			json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&rec)
			resp.Body.Close()
			return rec.State == "answered"
		})
		if got := be.count(k); got != 1 {
			t.Errorf("%s: backend ran %d times, want 1", k, got)
		}
	}
}

// awaitQueue waits for the gateway at admin to list its one async
// scope's queue, and returns the listing: the admin endpoint answers
// before the config's apps have started (their engines registered), on a
// first start as on a restart.
func awaitQueue(t *testing.T, admin string) adminapi.DeliveriesView {
	t.Helper()
	var view adminapi.DeliveriesView
	eventually(t, 5*time.Second, "the gateway's queue", func() bool {
		resp, err := freshClient.Get("http://" + admin + "/idempotency/deliveries")
		if err != nil {
			return false
		}
		view = adminapi.DeliveriesView{}
		json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&view)
		resp.Body.Close()
		return len(view.Deliveries) == 1
	})
	return view
}

// TestAsyncStartupLine: the start-up line names async delivery and where
// it goes (without the URL's password).
func TestAsyncStartupLine(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	p := startProc(t, t.TempDir(), asyncProcSite("line", "store memory", "gw:secret@127.0.0.1:9", "concurrency 3"))
	var line map[string]any
	eventually(t, 10*time.Second, "the start-up line", func() bool {
		for _, l := range strings.Split(procLog(p), "\n") {
			if strings.Contains(l, "idempotency handler ready") && json.Unmarshal([]byte(l), &line) == nil {
				return true
			}
		}
		return false
	})
	want := map[string]any{"scope": "line", "deliver": "async", "deliver_to": "http://gw:xxxxx@127.0.0.1:9", "concurrency": float64(3)}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("start-up line %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
}

// TestAsyncRouteRemovedWarns: a reload that drops the async route leaves
// its queued deliveries in the store, and says so; loaded again, the route
// delivers each once.
func TestAsyncRouteRemovedWarns(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	rs := redistest.StartAOF(t)
	be := newAsyncBackend(t, "127.0.0.1:0")
	site := asyncProcSite("gone", "store redis "+rs.Addr(), be.addr(), "")
	gw, admin, caddyfile := startProcAdmin(t, site)
	awaitQueue(t, admin)
	adminPost(t, admin, "/idempotency/deliveries/gone/pause")
	keys := []string{"g-1", "g-2", "g-3"}
	sendAll(t, []string{gw.base}, keys, 3)
	load := func(site string) {
		t.Helper()
		if err := adminLoad(admin, caddyfile(site)); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	// A reload that keeps the route says nothing.
	load(site)
	load(`respond "no gateway here"`)
	eventually(t, 10*time.Second, "the warning about the queued deliveries", func() bool {
		return strings.Contains(procLog(gw), "no async route of this scope runs here any more")
	})
	for _, line := range strings.Split(procLog(gw), "\n") {
		if strings.Contains(line, "no async route of this scope") &&
			(!strings.Contains(line, `"scope":"gone"`) || !strings.Contains(line, `"queued":3`)) {
			t.Errorf("warning without the scope or the count: %s", line)
		}
	}
	if n := strings.Count(procLog(gw), "no async route of this scope"); n != 1 {
		t.Errorf("%d warnings, want 1 (the reload that kept the route must not warn)", n)
	}
	if be.total() != 0 {
		t.Fatalf("backend ran %d times while paused", be.total())
	}
	load(site)
	adminPost(t, admin, "/idempotency/deliveries/gone/resume")
	eventually(t, 20*time.Second, "every key delivered", func() bool { return be.total() >= len(keys) })
	time.Sleep(300 * time.Millisecond) // a second delivery would show by now
	for _, k := range keys {
		if got := be.count(k); got != 1 {
			t.Errorf("%s: backend ran %d times, want 1", k, got)
		}
	}
	if t.Failed() {
		t.Logf("gateway log:\n%s", procLog(gw))
	}
}
