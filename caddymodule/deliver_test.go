package caddymodule

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	adminapi "github.com/idemgate/idemgate/caddymodule/admin"
	async "github.com/idemgate/idemgate/delivery"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// The deliver async suite: the real module (in this process, or the built
// binary as separate processes), a real backend and real stores. Every
// case asserts how many times the backend ran per key.

// asyncBackend is the backend behind `deliver async`: it counts runs per
// key (the form's out_trade_no), deliveries in flight at once, and when
// each started.
type asyncBackend struct {
	t  testing.TB
	ln net.Listener

	mu          sync.Mutex
	hits        map[string]int
	attempts    map[string][]string // Idemgate-Delivery-Attempt per run
	uris        map[string]string   // the request URI of the last run
	starts      []time.Time
	inFlight    int
	maxInFlight int
	delay       time.Duration
	// answer decides the n-th (1-based) run's answer; default 200 "ok <key>".
	answer func(key string, n int) (int, string)
	// cut, when it says so, closes the connection after reading the
	// request, before any answer: the request reached the backend.
	cut     func(key string, n int) bool
	arrived chan string
}

// newAsyncBackend listens on addr ("127.0.0.1:0" for any port).
func newAsyncBackend(t testing.TB, addr string) *asyncBackend {
	b := &asyncBackend{t: t, hits: map[string]int{}, attempts: map[string][]string{}, uris: map[string]string{},
		arrived: make(chan string, 100000)}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b.ln = ln
	srv := &http.Server{Handler: b}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b
}

func (b *asyncBackend) addr() string { return b.ln.Addr().String() }

func (b *asyncBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	v, _ := url.ParseQuery(string(body))
	key := v.Get("out_trade_no")
	b.mu.Lock()
	b.hits[key]++
	n := b.hits[key]
	b.attempts[key] = append(b.attempts[key], r.Header.Get("Idemgate-Delivery-Attempt"))
	b.uris[key] = r.RequestURI
	b.starts = append(b.starts, arrived)
	b.inFlight++
	b.maxInFlight = max(b.maxInFlight, b.inFlight)
	delay, answer, cut := b.delay, b.answer, b.cut
	b.mu.Unlock()
	b.arrived <- key
	if cut != nil && cut(key, n) {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
		return
	}
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	status, text := 200, "ok "+key
	if answer != nil {
		status, text = answer(key, n)
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	io.WriteString(w, text)
}

func (b *asyncBackend) count(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[key]
}

func (b *asyncBackend) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.hits {
		n += c
	}
	return n
}

func (b *asyncBackend) setDelay(d time.Duration) {
	b.mu.Lock()
	b.delay = d
	b.mu.Unlock()
}

const asyncRoute = gatewaytest.AsyncRoute

// record looks a key up in the only store loaded in this process.
func record(t testing.TB, key string) *store.Record { t.Helper(); return gatewaytest.Record(t, key) }

// waitAnswered waits until key is answered in the store.
func waitAnswered(t testing.TB, within time.Duration, key string) *store.Record {
	t.Helper()
	return gatewaytest.WaitAnswered(t, within, key)
}

// percentiles returns the median and the maximum.
func percentiles(ds []time.Duration) (p50, top time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// TestAsyncSlowBackendAckedAtOnce: a backend slower than the platform's
// time-out (3s). Every copy of one key is acknowledged at once, the
// backend runs once, and copies after the delivery get its remembered
// answer.
func TestAsyncSlowBackendAckedAtOnce(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a backend slower than the platform's 3s time-out")
	eachStore(t, func(t *testing.T, name, storeID string) {
		be := newAsyncBackend(t, "127.0.0.1:0")
		base := startCaddy(t, asyncRoute, "{store}", storeID, "{backend}", be.addr(), "{extra}", "")
		const copies = 20
		// Warm up: the first burst opens the client's and the store's
		// connections; the figure is the steady state's.
		for i, r := range storm(t, copies, func(i int) reply { return notify(t, base, "warm-"+itoa(i)) }) {
			if r.status != 200 {
				t.Fatalf("warm-up %d: %d", i, r.status)
			}
		}
		eventually(t, 10*time.Second, "the warm-up delivered", func() bool { return be.total() == copies })
		be.setDelay(3 * time.Second)
		lat := make([]time.Duration, copies)
		replies := storm(t, copies, func(i int) reply {
			start := time.Now()
			r := notify(t, base, "slow-1")
			lat[i] = time.Since(start)
			return r
		})
		for i, r := range replies {
			if r.status != 200 || r.body != "success" || r.replayed {
				t.Fatalf("copy %d: got %d %q replayed=%v, want the ack 200 success", i, r.status, r.body, r.replayed)
			}
		}
		// Copies one after another, while the delivery is at the backend.
		for range copies {
			start := time.Now()
			if r := notify(t, base, "slow-1"); r.status != 200 || r.body != "success" {
				t.Fatalf("copy while delivering: got %d %q, want the ack", r.status, r.body)
			}
			lat = append(lat, time.Since(start))
		}
		sp50, stop := percentiles(lat[copies:])
		t.Logf("%s: one by one: p50 %v, max %v", name, sp50, stop)
		p50, top := percentiles(lat)
		limit := 500 * time.Millisecond
		if !raceDetector {
			limit = 50 * time.Millisecond
		}
		t.Logf("%s: ack latency over %d copies (%d at once, then one by one): p50 %v, max %v", name, len(lat), copies, p50, top)
		if top > limit {
			t.Errorf("%s: slowest ack took %v, want under %v", name, top, limit)
		}
		if be.count("slow-1") > 1 {
			t.Fatalf("backend ran %d times before the delivery ended", be.count("slow-1"))
		}
		rec := waitAnswered(t, 20*time.Second, "demo:slow-1")
		if rec.AttemptCount != 1 || rec.Attempts[0].Outcome != store.AttemptAnswered {
			t.Errorf("journal: %d attempts %+v, want one answered", rec.AttemptCount, rec.Attempts)
		}
		if rec.Notification == nil || !strings.Contains(string(rec.Notification.Body), "out_trade_no=slow-1") {
			t.Errorf("journal kept no notification: %+v", rec.Notification)
		}
		r := notify(t, base, "slow-1")
		if r.status != 200 || r.body != "ok slow-1" || !r.replayed {
			t.Errorf("copy after the delivery: got %d %q replayed=%v, want the backend's answer replayed", r.status, r.body, r.replayed)
		}
		if got := be.count("slow-1"); got != 1 {
			t.Errorf("backend ran %d times, want 1", got)
		}
		be.mu.Lock()
		uri, att := be.uris["slow-1"], be.attempts["slow-1"]
		be.mu.Unlock()
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
	addr := reservePort(t)
	base := startCaddy(t, asyncRoute, "{store}", "store redis "+rs.Addr(), "{backend}", addr,
		"{extra}", "retry 200ms 800ms")
	keys := []string{"down-0", "down-1", "down-2", "down-3", "down-4"}
	for _, k := range keys {
		if r := notify(t, base, k); r.status != 200 || r.body != "success" {
			t.Fatalf("%s: got %d %q, want the ack", k, r.status, r.body)
		}
	}
	// Down until every key has been tried three times.
	eventually(t, 20*time.Second, "three attempts per key", func() bool {
		for _, k := range keys {
			if rec := record(t, "demo:"+k); rec == nil || rec.AttemptCount < 3 {
				return false
			}
		}
		return true
	})
	be := newAsyncBackend(t, addr)
	for _, k := range keys {
		rec := waitAnswered(t, 20*time.Second, "demo:"+k)
		if got := be.count(k); got != 1 {
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
		be.mu.Lock()
		att := be.attempts[k]
		be.mu.Unlock()
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
	be := newAsyncBackend(t, "127.0.0.1:0")
	base := startCaddy(t, asyncRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.addr(), "{extra}", "")
	rs.Stop()
	for range 3 {
		r := notify(t, base, "sd-1")
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || r.body == "success" {
			t.Fatalf("store down: got %d %q Retry-After=%q, want 503 with Retry-After and no ack", r.status, r.body, r.header.Get("Retry-After"))
		}
	}
	if got := be.total(); got != 0 {
		t.Fatalf("backend ran %d times with the store down, want 0", got)
	}
	rs.Restart()
	eventually(t, 10*time.Second, "the store to be back", func() bool {
		r := notify(t, base, "sd-1")
		return r.status == 200 && r.body == "success"
	})
	waitAnswered(t, 15*time.Second, "demo:sd-1")
	if got := be.count("sd-1"); got != 1 {
		t.Errorf("backend ran %d times for sd-1, want 1", got)
	}
}

// TestAsyncPauseResume: paused, nothing is delivered while acks go on and
// the queue grows (admin API and CLI); resumed, the queue drains, each key
// once.
func TestAsyncPauseResume(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a paused queue drained")
	be := newAsyncBackend(t, "127.0.0.1:0")
	g := startGateway(t, asyncRoute, "{store}", "store memory", "{backend}", be.addr(), "{extra}", "concurrency 2")
	if out, err := runCLI(t, "pause", "demo", "--address", g.admin); err != nil || !strings.Contains(out, `"paused": true`) {
		t.Fatalf("pause: %v %s", err, out)
	}
	const n = 10
	for i := range n {
		if r := notify(t, g.base, "p-"+itoa(i)); r.status != 200 || r.body != "success" {
			t.Fatalf("ack while paused: got %d %q", r.status, r.body)
		}
	}
	var view adminapi.DeliveriesView
	eventually(t, 5*time.Second, "the queue to show every notification", func() bool {
		g.adminJSON(t, http.MethodGet, "/idempotency/deliveries", &view)
		return len(view.Deliveries) == 1 && view.Deliveries[0].Depth == n
	})
	if d := view.Deliveries[0]; d.Scope != "demo" || !d.Paused || d.Oldest.IsZero() || d.Leased != 0 {
		t.Errorf("paused queue: %+v", d)
	}
	eventually(t, 10*time.Second, "the queue gauges to show the paused queue", func() bool {
		s, _ := scrape(t, g)
		return s[`idemgate_delivery_queue_depth{platform="generic",scope="demo"}`] == n &&
			s[`idemgate_delivery_queue_oldest_age_seconds{platform="generic",scope="demo"}`] > 0
	})
	// Paused for five take periods: nothing may start.
	time.Sleep(5 * async.MaxTakeWait)
	if got := be.total(); got != 0 {
		t.Fatalf("backend ran %d times while paused, want 0", got)
	}
	out, err := runCLI(t, "deliveries", "--json", "--address", g.admin)
	if err != nil || !strings.Contains(out, `"depth": 10`) {
		t.Errorf("deliveries: %v %s", err, out)
	}
	if status, body := g.adminDo(t, http.MethodPost, "/idempotency/deliveries/nosuch/pause"); status != http.StatusNotFound {
		t.Errorf("pausing an unknown scope: got %d %s, want 404", status, body)
	}
	// An operator purges one queued notification (in flight: force): its
	// delivery goes with it and is never sent.
	var purged adminapi.DeletedView
	g.adminJSON(t, http.MethodDelete, keyURI("demo:p-0")+"?force=1", &purged)
	if !purged.Deleted || purged.QueuedDelivery != "removed" {
		t.Fatalf("purge of a queued key: %+v", purged)
	}
	if _, err := runCLI(t, "resume", "demo", "--address", g.admin); err != nil {
		t.Fatalf("resume: %v", err)
	}
	for i := 1; i < n; i++ {
		waitAnswered(t, 15*time.Second, "demo:p-"+itoa(i))
	}
	for i := 1; i < n; i++ {
		if got := be.count("p-" + itoa(i)); got != 1 {
			t.Errorf("p-%d: backend ran %d times, want 1", i, got)
		}
	}
	time.Sleep(3 * async.MaxTakeWait)
	if got := be.count("p-0"); got != 0 {
		t.Errorf("the purged notification reached the backend %d times, want 0", got)
	}
	be.mu.Lock()
	most := be.maxInFlight
	be.mu.Unlock()
	if most > 2 {
		t.Errorf("backend saw %d deliveries at once, want at most concurrency 2", most)
	}
	g.adminJSON(t, http.MethodGet, "/idempotency/deliveries", &view)
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
	events := make(chan alertEvent, 100)
	ops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e alertEvent
		_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&e)
		events <- e
	}))
	t.Cleanup(ops.Close)
	be := newAsyncBackend(t, "127.0.0.1:0")
	be.mu.Lock()
	be.answer = func(key string, n int) (int, string) { return 500, "broken" }
	be.mu.Unlock()
	route := strings.Replace(asyncRoute, "lock_ttl 2s", "lock_ttl 2s\n\t\t\talert "+ops.URL+" failed dead", 1)
	g := startGateway(t, route, "{store}", "store memory", "{backend}", be.addr(),
		"{extra}", "retry 100ms 200ms\n\t\t\t\tgive_up 1s")
	base, _ := scrape(t, g) // the process's metrics: earlier tests counted too
	if r := notify(t, g.base, "gu-1"); r.status != 200 {
		t.Fatalf("ack: %d", r.status)
	}
	var rec *store.Record
	eventually(t, 15*time.Second, "the key to be given up", func() bool {
		rec = record(t, "demo:gu-1")
		return rec != nil && rec.State == store.StateFailed
	})
	var list adminapi.PageView
	g.adminJSON(t, http.MethodGet, "/idempotency/keys?state=dead", &list)
	if len(list.Keys) != 1 || list.Keys[0].Key != "demo:gu-1" {
		t.Errorf("dead keys: %+v, want demo:gu-1 (dead after give_up)", list.Keys)
	}
	runs := be.count("gu-1")
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
	s, _ := scrape(t, g)
	wantDelta(t, s, base, `idemgate_delivery_dead_total{platform="generic",scope="demo"}`, 1)
	wantDelta(t, s, base, `idemgate_delivery_attempts_total{outcome="failed",platform="generic",scope="demo"}`, float64(runs))
	wantDelta(t, s, base, `idemgate_delivery_duration_seconds_count{outcome="failed",platform="generic",scope="demo"}`, float64(runs))
	wantDelta(t, s, base, `idemgate_requests_total{outcome="queued",platform="generic",scope="demo"}`, 1)
	eventually(t, 5*time.Second, "the queue gauge to read empty", func() bool {
		s, _ := scrape(t, g)
		v, ok := s[`idemgate_delivery_queue_depth{platform="generic",scope="demo"}`]
		return ok && v == 0
	})
	time.Sleep(500 * time.Millisecond)
	if got := be.count("gu-1"); got != runs {
		t.Errorf("backend ran %d more times after give_up", got-runs)
	}
	// A copy of a failed key is a new notification: acked and delivered.
	if r := notify(t, g.base, "gu-1"); r.status != 200 || r.body != "success" {
		t.Errorf("copy after give_up: %d %q", r.status, r.body)
	}
}

// TestAsyncAmbiguousNeverResent: the backend reads a delivery and breaks
// the connection without answering. The delivery carries an
// Idempotency-Key header on a kept-alive connection, which Go's transport
// would silently send again: it is not. The attempt is ambiguous, journaled
// and retried only after lock_ttl, as the contract says.
func TestAsyncAmbiguousNeverResent(t *testing.T) {
	testenv.Slow(t, "runs for seconds: waits out lock_ttl")
	be := newAsyncBackend(t, "127.0.0.1:0")
	be.mu.Lock()
	be.cut = func(key string, n int) bool { return key == "amb-1" && n == 1 }
	be.mu.Unlock()
	base := startCaddy(t, asyncRoute, "{store}", "store memory", "{backend}", be.addr(), "{extra}", "concurrency 1")
	// A first delivery leaves a kept-alive connection for the next.
	if r := notify(t, base, "amb-0"); r.status != 200 {
		t.Fatalf("ack: %d", r.status)
	}
	waitAnswered(t, 10*time.Second, "demo:amb-0")
	hdr := http.Header{"Idempotency-Key": {"amb-1"}}
	if r := post(t, base+"/notify", "application/x-www-form-urlencoded", form("amb-1"), hdr); r.status != 200 || r.body != "success" {
		t.Fatalf("ack: %d %q", r.status, r.body)
	}
	var rec *store.Record
	eventually(t, 10*time.Second, "the ambiguous attempt journaled", func() bool {
		rec = record(t, "demo:amb-1")
		return rec != nil && rec.AttemptCount >= 1
	})
	if got := be.count("amb-1"); got != 1 {
		t.Fatalf("backend ran %d times for the first attempt, want 1 (the transport re-sent it)", got)
	}
	first := rec.Attempts[0]
	if first.Outcome != store.AttemptAmbiguous {
		t.Fatalf("first attempt %+v, want ambiguous", first)
	}
	rec = waitAnswered(t, 15*time.Second, "demo:amb-1")
	if n := len(rec.Attempts); n != 2 || rec.Attempts[1].Outcome != store.AttemptAnswered {
		t.Fatalf("attempts %+v, want ambiguous then answered", rec.Attempts)
	}
	if gap := rec.Attempts[1].Start.Sub(first.Start); gap < 2*time.Second-50*time.Millisecond {
		t.Errorf("retried %v after the ambiguous attempt, want lock_ttl (2s)", gap)
	}
	if got := be.count("amb-1"); got != 2 {
		t.Errorf("backend ran %d times, want 2 (the broken attempt and the retry after lock_ttl)", got)
	}
}

// TestAsyncClaimRanOutWhilePaused: a scope paused for longer than the
// claim's hold (give_up + retry max + 2×lock_ttl) still delivers its
// queued notification once resumed, once: the delivery claims its key
// again.
func TestAsyncClaimRanOutWhilePaused(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a pause longer than the claim's hold")
	be := newAsyncBackend(t, "127.0.0.1:0")
	g := startGateway(t, asyncRoute, "{store}", "store memory", "{backend}", be.addr(),
		"{extra}", "retry 100ms 200ms\n\t\t\t\tgive_up 1s")
	adminPost(t, g.admin, "/idempotency/deliveries/demo/pause")
	if r := notify(t, g.base, "ro-1"); r.status != 200 || r.body != "success" {
		t.Fatalf("ack: %d %q", r.status, r.body)
	}
	// The hold is 1s + 200ms + 2×2s: the claim (without a journal yet)
	// is then gone.
	eventually(t, 15*time.Second, "the claim to run out", func() bool { return record(t, "demo:ro-1") == nil })
	adminPost(t, g.admin, "/idempotency/deliveries/demo/resume")
	rec := waitAnswered(t, 10*time.Second, "demo:ro-1")
	if got := be.count("ro-1"); got != 1 || rec.AttemptCount != 1 {
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
	be := newAsyncBackend(t, "127.0.0.1:0")
	base := startCaddy(t, asyncRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.addr(), "{extra}", "")
	items := "idem:q:{demo}:items"
	if err := rs.Client().Set(context.Background(), items, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := notify(t, base, "eq-1")
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || r.body == "success" {
		t.Fatalf("enqueue refused: got %d %q, want 503 with Retry-After and no ack", r.status, r.body)
	}
	if rec := record(t, "demo:eq-1"); rec != nil {
		t.Errorf("the key was not freed after the failed enqueue: %+v", rec)
	}
	if err := rs.Client().Del(context.Background(), items).Err(); err != nil {
		t.Fatal(err)
	}
	if r := notify(t, base, "eq-1"); r.status != 200 || r.body != "success" {
		t.Fatalf("retry once the queue works: %d %q", r.status, r.body)
	}
	waitAnswered(t, 10*time.Second, "demo:eq-1")
	if got := be.count("eq-1"); got != 1 {
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
			be := newAsyncBackend(t, "127.0.0.1:0")
			base := startCaddy(t, asyncRoute, "{store}", storeID, "{backend}", be.addr(), "{extra}", "")
			for i := range 10 {
				k := "fs-" + itoa(i)
				for j, r := range storm(t, 5, func(int) reply { return notify(t, base, k) }) {
					if r.status != 200 || (r.body != "success" && !(r.replayed && r.body == "ok "+k)) {
						t.Fatalf("%s copy %d: %d %q replayed=%v", k, j, r.status, r.body, r.replayed)
					}
				}
			}
			for i := range 10 {
				k := "fs-" + itoa(i)
				waitAnswered(t, 10*time.Second, "demo:"+k)
				if got := be.count(k); got != 1 {
					t.Errorf("%s: backend ran %d times, want 1", k, got)
				}
			}
		})
	}
}

// TestAsyncDurabilityReplicas: with `durability replicas 1` (and the
// store's wait_replicas 1), a notification is acked once a replica has it;
// with the replica gone the WAIT is not confirmed: 503, never the ack,
// and nothing is delivered.
func TestAsyncDurabilityReplicas(t *testing.T) {
	testenv.Slow(t, "fault: a replica gone")
	master := redistest.StartAOF(t)
	replica := redistest.StartWith(t, redistest.Options{ReplicaOf: master})
	be := newAsyncBackend(t, "127.0.0.1:0")
	storeID := "store redis " + master.Addr() + " {\n\t\t\t\twait_replicas 1 300ms\n\t\t\t}"
	base := startCaddy(t, asyncRoute, "{store}", storeID, "{backend}", be.addr(), "{extra}", "durability replicas 1")
	if r := notify(t, base, "dr-1"); r.status != 200 || r.body != "success" {
		t.Fatalf("with the replica up: %d %q, want the ack", r.status, r.body)
	}
	waitAnswered(t, 10*time.Second, "demo:dr-1")
	replica.Stop()
	r := notify(t, base, "dr-2")
	if r.status != http.StatusServiceUnavailable || r.body == "success" {
		t.Fatalf("with the replica gone: %d %q, want 503 and no ack", r.status, r.body)
	}
	time.Sleep(3 * async.MaxTakeWait)
	if be.count("dr-1") != 1 || be.count("dr-2") != 0 {
		t.Errorf("backend ran %d times for dr-1 (want 1) and %d for dr-2 (want 0)", be.count("dr-1"), be.count("dr-2"))
	}
}
