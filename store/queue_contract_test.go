package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The delivery queue's contract, run on every store (see suites).
func init() {
	var cases []storeCase[Queuer]
	for _, c := range queueCases {
		cases = append(cases, storeCase[Queuer]{c.name, func(t *testing.T, s Queuer) { c.run(t, s.Queue()) }})
	}
	suites = append(suites, newSuite("queue", "delivery queue", cases))
}

const qLease = 2 * time.Second

func delivery(key string) Delivery {
	return Delivery{Key: key, Token: "tok-" + key, Enqueued: time.Now().Truncate(time.Millisecond),
		Notification: &Notification{Method: http.MethodPost, URI: "/notify?k=" + key,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"` + key + `"}`), BodySize: int64(len(key) + 9)}}
}

func mustTake(t *testing.T, q Queue, scope string, lim QueueLimits) *Delivery {
	t.Helper()
	d, wait, err := q.Take(ctxT(t), scope, lim)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	if d == nil {
		t.Fatalf("Take: nothing (wait %v), want a delivery", wait)
	}
	if d.Lease == "" {
		t.Fatal("Take: a delivery without a lease")
	}
	return d
}

func noTake(t *testing.T, q Queue, scope string, lim QueueLimits) time.Duration {
	t.Helper()
	d, wait, err := q.Take(ctxT(t), scope, lim)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	if d != nil {
		t.Fatalf("Take: %q, want nothing", d.Key)
	}
	if wait <= 0 {
		t.Fatalf("Take: nothing and a wait of %v", wait)
	}
	return wait
}

var queueCases = []storeCase[Queue]{
	{"enqueue_take_done", func(t *testing.T, q Queue) {
		ctx := ctxT(t)
		lim := QueueLimits{Lease: qLease}
		want := delivery("s:k1")
		want.Credentials = http.Header{"Authorization": {"Basic bWVyY2hhbnQ6cw=="}}
		if ok, err := q.Queued(ctx, "s", want.Key); err != nil || ok {
			t.Fatalf("Queued before Enqueue: %v %v", ok, err)
		}
		noTake(t, q, "s", lim)
		if err := q.Enqueue(ctx, "s", want); err != nil {
			t.Fatal(err)
		}
		if ok, err := q.Queued(ctx, "s", want.Key); err != nil || !ok {
			t.Fatalf("Queued after Enqueue: %v %v", ok, err)
		}
		if ok, _ := q.Queued(ctx, "other", want.Key); ok {
			t.Fatal("queued in another scope")
		}
		noTake(t, q, "other", lim)
		got := mustTake(t, q, "s", lim)
		if got.Key != want.Key || got.Token != want.Token || got.Attempts != 0 || !got.Enqueued.Equal(want.Enqueued) ||
			got.Notification == nil || string(got.Notification.Body) != string(want.Notification.Body) ||
			got.Notification.URI != want.Notification.URI || got.Notification.Header.Get("Content-Type") != "application/json" ||
			got.Credentials.Get("Authorization") != "Basic bWVyY2hhbnQ6cw==" {
			t.Fatalf("took %+v (notification %+v), want %+v", got, got.Notification, want)
		}
		noTake(t, q, "s", lim) // leased: not handed out twice
		if ok, _ := q.Queued(ctx, "s", want.Key); !ok {
			t.Fatal("a leased delivery is no longer queued")
		}
		st, err := q.Stats(ctx, "s")
		if err != nil || st.Depth != 1 || st.Leased != 1 || !st.Oldest.Equal(want.Enqueued) {
			t.Fatalf("Stats while leased: %+v %v", st, err)
		}
		if err := q.Done(ctx, "s", want.Key, "not-the-lease"); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Done with another lease: %v", err)
		}
		if err := q.Done(ctx, "s", want.Key, got.Lease); err != nil {
			t.Fatal(err)
		}
		if ok, _ := q.Queued(ctx, "s", want.Key); ok {
			t.Fatal("queued after Done")
		}
		if err := q.Done(ctx, "s", want.Key, got.Lease); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("second Done: %v", err)
		}
		st, _ = q.Stats(ctx, "s")
		if st.Depth != 0 || st.Leased != 0 || !st.Oldest.IsZero() {
			t.Fatalf("Stats after Done: %+v", st)
		}
		noTake(t, q, "s", lim)
	}},
	{"enqueue_again_keeps_place_takes_token", func(t *testing.T, q Queue) {
		ctx := ctxT(t)
		lim := QueueLimits{Lease: qLease}
		first, second := delivery("s:a"), delivery("s:b")
		for _, d := range []Delivery{first, second} {
			if err := q.Enqueue(ctx, "s", d); err != nil {
				t.Fatal(err)
			}
		}
		again := first
		again.Token = "new-token"
		again.Enqueued = first.Enqueued.Add(time.Hour)
		if err := q.Enqueue(ctx, "s", again); err != nil {
			t.Fatal(err)
		}
		if st, _ := q.Stats(ctx, "s"); st.Depth != 2 {
			t.Fatalf("depth %d after enqueueing a key twice, want 2", st.Depth)
		}
		got := mustTake(t, q, "s", lim)
		if got.Key != first.Key || got.Token != "new-token" || !got.Enqueued.Equal(first.Enqueued) {
			t.Fatalf("took %q token %q enqueued %v; want the first key, first place, new token", got.Key, got.Token, got.Enqueued)
		}
	}},
	{"retry_later", func(t *testing.T, q Queue) {
		ctx := ctxT(t)
		lim := QueueLimits{Lease: qLease}
		if err := q.Enqueue(ctx, "s", delivery("s:r")); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, "s", lim)
		due := time.Now().Add(1500 * time.Millisecond)
		if err := q.Retry(ctx, "s", d.Key, "other", due, 1); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Retry with another lease: %v", err)
		}
		if err := q.Retry(ctx, "s", d.Key, d.Lease, due, 1); err != nil {
			t.Fatal(err)
		}
		if wait := noTake(t, q, "s", lim); wait > 1500*time.Millisecond {
			t.Fatalf("wait %v, longer than the time to the due delivery", wait)
		}
		if st, _ := q.Stats(ctx, "s"); st.Depth != 1 || st.Leased != 0 {
			t.Fatalf("Stats while waiting to retry: %+v", st)
		}
		time.Sleep(time.Until(due) + 20*time.Millisecond)
		again := mustTake(t, q, "s", lim)
		if again.Attempts != 1 || again.Lease == d.Lease {
			t.Fatalf("retried delivery: attempts %d, lease reused %v", again.Attempts, again.Lease == d.Lease)
		}
	}},
	{"lease_runs_out_taken_over", func(t *testing.T, q Queue) {
		ctx := ctxT(t)
		lim := QueueLimits{Lease: time.Second}
		if err := q.Enqueue(ctx, "s", delivery("s:l")); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, "s", lim)
		noTake(t, q, "s", lim)
		time.Sleep(1100 * time.Millisecond)
		again := mustTake(t, q, "s", QueueLimits{Lease: qLease})
		if again.Key != d.Key || again.Lease == d.Lease {
			t.Fatalf("taken over: %q lease %q (was %q)", again.Key, again.Lease, d.Lease)
		}
		for name, err := range map[string]error{
			"Extend": q.Extend(ctx, "s", d.Key, d.Lease, qLease),
			"Retry":  q.Retry(ctx, "s", d.Key, d.Lease, time.Now(), 1),
			"Done":   q.Done(ctx, "s", d.Key, d.Lease),
		} {
			if !errors.Is(err, ErrNotOwner) {
				t.Errorf("%s with the lease that ran out: %v, want ErrNotOwner", name, err)
			}
		}
		if err := q.Done(ctx, "s", again.Key, again.Lease); err != nil {
			t.Fatal(err)
		}
	}},
	{"started_attempt_taken_over", func(t *testing.T, q Queue) {
		// A taker marks its attempt started and dies: whoever takes the
		// delivery over is told, so it does not send it blindly again.
		ctx := ctxT(t)
		lim := QueueLimits{Lease: time.Second}
		if err := q.Enqueue(ctx, "s", delivery("s:st")); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, "s", lim)
		if d.Started {
			t.Fatal("a fresh delivery reads started")
		}
		if err := q.Start(ctx, "s", d.Key, "other"); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Start with another lease: %v", err)
		}
		if err := q.Start(ctx, "s", d.Key, d.Lease); err != nil {
			t.Fatal(err)
		}
		// Re-enqueued by a new claim of the key meanwhile: still started.
		again := delivery("s:st")
		again.Token = "tok-2"
		if err := q.Enqueue(ctx, "s", again); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // the taker is gone
		over := mustTake(t, q, "s", QueueLimits{Lease: qLease})
		if !over.Started || over.Token != "tok-2" {
			t.Fatalf("taken over: started %v token %q, want started with the new token", over.Started, over.Token)
		}
		// An attempt that ended (Retry) is not started any more.
		if err := q.Retry(ctx, "s", over.Key, over.Lease, time.Now(), 1); err != nil {
			t.Fatal(err)
		}
		next := mustTake(t, q, "s", QueueLimits{Lease: qLease})
		if next.Started || next.Attempts != 1 {
			t.Fatalf("after Retry: started %v attempts %d", next.Started, next.Attempts)
		}
	}},
	{"extend_keeps_lease", func(t *testing.T, q Queue) {
		ctx := ctxT(t)
		lim := QueueLimits{Lease: time.Second}
		if err := q.Enqueue(ctx, "s", delivery("s:e")); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, "s", lim)
		for range 3 {
			time.Sleep(500 * time.Millisecond)
			if err := q.Extend(ctx, "s", d.Key, d.Lease, time.Second); err != nil {
				t.Fatal(err)
			}
		}
		noTake(t, q, "s", lim) // 1.5s after Take, the lease holds
		if err := q.Done(ctx, "s", d.Key, d.Lease); err != nil {
			t.Fatal(err)
		}
	}},
	{"concurrency_and_rate", func(t *testing.T, q Queue) {
		ctx := ctxT(t)
		for i := range 6 {
			if err := q.Enqueue(ctx, "s", delivery(fmt.Sprintf("s:c%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		lim := QueueLimits{Concurrency: 2, Lease: qLease}
		a, b := mustTake(t, q, "s", lim), mustTake(t, q, "s", lim)
		noTake(t, q, "s", lim)
		if err := q.Done(ctx, "s", a.Key, a.Lease); err != nil {
			t.Fatal(err)
		}
		c := mustTake(t, q, "s", lim)
		noTake(t, q, "s", lim)
		for _, d := range []*Delivery{b, c} {
			if err := q.Done(ctx, "s", d.Key, d.Lease); err != nil {
				t.Fatal(err)
			}
		}
		// Rate: 2 starts per window; three were made before without a
		// rate, which do not count.
		lim = QueueLimits{Rate: 2, Lease: qLease}
		mustTake(t, q, "s", lim)
		mustTake(t, q, "s", lim)
		if wait := noTake(t, q, "s", lim); wait > RateWindow+10*time.Millisecond {
			t.Fatalf("rate wait %v, longer than the window", wait)
		}
		time.Sleep(RateWindow + 20*time.Millisecond)
		mustTake(t, q, "s", lim)
	}},
	{"remove", func(t *testing.T, q Queue) {
		// The operator's purge of a queued notification.
		ctx := ctxT(t)
		lim := QueueLimits{Lease: qLease}
		if err := q.Remove(ctx, "s", "s:none"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Remove of nothing: %v", err)
		}
		for _, k := range []string{"s:r1", "s:r2", "s:r3"} {
			if err := q.Enqueue(ctx, "s", delivery(k)); err != nil {
				t.Fatal(err)
			}
		}
		taken := mustTake(t, q, "s", lim) // s:r1, being delivered
		if err := q.Remove(ctx, "s", taken.Key); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Remove of a leased delivery: %v, want ErrNotOwner", err)
		}
		if err := q.Remove(ctx, "s", "s:r2"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := q.Queued(ctx, "s", "s:r2"); ok {
			t.Fatal("removed, still queued")
		}
		if st, _ := q.Stats(ctx, "s"); st.Depth != 2 {
			t.Fatalf("depth %d after Remove, want 2", st.Depth)
		}
		if d := mustTake(t, q, "s", lim); d.Key != "s:r3" {
			t.Fatalf("took %q, want s:r3 (s:r2 was removed)", d.Key)
		}
		noTake(t, q, "s", lim)
	}},
	{"pause_resume", func(t *testing.T, q Queue) {
		ctx := ctxT(t)
		lim := QueueLimits{Lease: qLease}
		if err := q.Pause(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if err := q.Enqueue(ctx, "s", delivery("s:p")); err != nil {
			t.Fatalf("Enqueue while paused: %v", err)
		}
		noTake(t, q, "s", lim)
		if st, _ := q.Stats(ctx, "s"); !st.Paused || st.Depth != 1 {
			t.Fatalf("Stats while paused: %+v", st)
		}
		if st, _ := q.Stats(ctx, "other"); st.Paused {
			t.Fatal("pausing one scope paused another")
		}
		if err := q.Resume(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		mustTake(t, q, "s", lim)
	}},
	{"many_takers_concurrency", func(t *testing.T, q Queue) {
		// Many goroutines take and finish 200 deliveries under
		// Concurrency 3: each is handed out once, never more than 3 at
		// once.
		ctx := ctxT(t)
		const n = 200
		for i := range n {
			if err := q.Enqueue(ctx, "s", delivery(fmt.Sprintf("s:m%03d", i))); err != nil {
				t.Fatal(err)
			}
		}
		lim := QueueLimits{Concurrency: 3, Lease: 10 * time.Second}
		var mu sync.Mutex
		seen := map[string]int{}
		var active, peak atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(30 * time.Second)
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					d, wait, err := q.Take(context.Background(), "s", lim)
					if err != nil {
						t.Error(err)
						return
					}
					if d == nil {
						if st, _ := q.Stats(context.Background(), "s"); st.Depth == 0 {
							return
						}
						time.Sleep(min(wait, 5*time.Millisecond))
						continue
					}
					a := active.Add(1)
					for p := peak.Load(); a > p && !peak.CompareAndSwap(p, a); p = peak.Load() {
					}
					mu.Lock()
					seen[d.Key]++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					active.Add(-1)
					if err := q.Done(context.Background(), "s", d.Key, d.Lease); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("%d deliveries taken, want %d", len(seen), n)
		}
		for k, c := range seen {
			if c != 1 {
				t.Fatalf("%s taken %d times", k, c)
			}
		}
		if p := peak.Load(); p > 3 {
			t.Fatalf("%d deliveries at once, limit 3", p)
		}
	}},
}

// reopenable opens an embedded store at a path of t's, and again after
// it was closed: a restart.
func reopenable(t *testing.T) func() (*Embedded, Queue) {
	path := filepath.Join(t.TempDir(), "q.db")
	return func() (*Embedded, Queue) {
		s, err := NewEmbedded(path, EmbeddedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Queue()
	}
}

// The embedded queue survives a restart: deliveries, their attempts and a
// paused scope; leases do not (their process is gone).
func TestEmbeddedQueueSurvivesRestart(t *testing.T) {
	open := reopenable(t)
	ctx := ctxT(t)
	lim := QueueLimits{Lease: time.Hour}
	s, q := open()
	for _, k := range []string{"s:1", "s:2", "s:3"} {
		if err := q.Enqueue(ctx, "s", delivery(k)); err != nil {
			t.Fatal(err)
		}
	}
	d1 := mustTake(t, q, "s", lim)
	if err := q.Done(ctx, "s", d1.Key, d1.Lease); err != nil {
		t.Fatal(err)
	}
	d2 := mustTake(t, q, "s", lim)
	if err := q.Retry(ctx, "s", d2.Key, d2.Lease, time.Now(), 4); err != nil {
		t.Fatal(err)
	}
	d3 := mustTake(t, q, "s", lim) // leased, its attempt started, when the process goes
	if err := q.Start(ctx, "s", d3.Key, d3.Lease); err != nil {
		t.Fatal(err)
	}
	if err := q.Pause(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, q = open()
	defer s.Close()
	if st, err := q.Stats(ctx, "s"); err != nil || st.Depth != 2 || st.Leased != 0 {
		t.Fatalf("Stats after the restart: %+v %v, want 2 queued, none leased", st, err)
	}
	if st, _ := q.Stats(ctx, "other"); !st.Paused {
		t.Fatal("the paused scope was resumed by the restart")
	}
	got := map[string]int{}
	for range 2 {
		d := mustTake(t, q, "s", lim)
		got[d.Key] = d.Attempts
		if d.Started != (d.Key == d3.Key) {
			t.Errorf("%s after the restart: started %v", d.Key, d.Started)
		}
		if d.Notification == nil || len(d.Notification.Body) == 0 {
			t.Fatalf("%s came back without its notification", d.Key)
		}
	}
	if a, ok := got[d2.Key]; !ok || a != 4 {
		t.Errorf("retried delivery after the restart: %v", got)
	}
	if _, ok := got[d3.Key]; !ok {
		t.Errorf("the delivery leased at the restart is lost: %v", got)
	}
	if _, ok := got[d1.Key]; ok {
		t.Errorf("the done delivery came back: %v", got)
	}
}

// An Enqueue that lands on a leased delivery (an operator's redelivery in
// the window between the taker's settling the key and its Done) survives
// the lease's end: Done queues the new delivery, due now, out of the
// leased set; Retry makes it due now with the new token.
var queueReenqueueCases = []storeCase[Queue]{
	{"enqueue_while_leased_then_done", func(t *testing.T, q Queue) {
		ctx := ctxT(t)
		lim := QueueLimits{Concurrency: 1, Lease: qLease}
		first := delivery("s:w")
		first.Enqueued = first.Enqueued.Add(-time.Hour)
		if err := q.Enqueue(ctx, "s", first); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, "s", lim)
		if err := q.Start(ctx, "s", d.Key, d.Lease); err != nil {
			t.Fatal(err)
		}
		again := delivery("s:w")
		again.Token = "tok-2"
		again.Notification.Body = []byte(`{"id":"again"}`)
		again.Credentials = http.Header{"Authorization": {"Bearer again"}}
		if err := q.Enqueue(ctx, "s", again); err != nil {
			t.Fatal(err)
		}
		if err := q.Done(ctx, "s", d.Key, d.Lease); err != nil {
			t.Fatal(err)
		}
		if ok, err := q.Queued(ctx, "s", d.Key); err != nil || !ok {
			t.Fatalf("Queued after the Done of a re-enqueued delivery: %v %v, want queued", ok, err)
		}
		if st, _ := q.Stats(ctx, "s"); st.Depth != 1 || st.Leased != 0 || !st.Oldest.Equal(again.Enqueued) {
			t.Fatalf("Stats after the Done: %+v, want 1 queued, none leased, oldest %v", st, again.Enqueued)
		}
		// Concurrency 1: the ended lease no longer counts.
		got := mustTake(t, q, "s", lim)
		if got.Key != again.Key || got.Token != "tok-2" || got.Attempts != 0 || got.Started || got.Lease == d.Lease ||
			!got.Enqueued.Equal(again.Enqueued) || got.Notification == nil || string(got.Notification.Body) != `{"id":"again"}` ||
			got.Credentials.Get("Authorization") != "Bearer again" {
			t.Fatalf("taken again: %+v (notification %+v), want the re-enqueued delivery, fresh", got, got.Notification)
		}
		if err := q.Done(ctx, "s", d.Key, d.Lease); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Done with the old lease: %v, want ErrNotOwner", err)
		}
		if err := q.Done(ctx, "s", got.Key, got.Lease); err != nil {
			t.Fatal(err)
		}
		if ok, _ := q.Queued(ctx, "s", got.Key); ok {
			t.Fatal("queued after the second Done: the re-enqueue was counted twice")
		}
		noTake(t, q, "s", lim)
	}},
	{"enqueue_while_leased_then_retry", func(t *testing.T, q Queue) {
		ctx := ctxT(t)
		lim := QueueLimits{Lease: qLease}
		if err := q.Enqueue(ctx, "s", delivery("s:x")); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, "s", lim)
		if err := q.Start(ctx, "s", d.Key, d.Lease); err != nil {
			t.Fatal(err)
		}
		again := delivery("s:x")
		again.Token = "tok-2"
		if err := q.Enqueue(ctx, "s", again); err != nil {
			t.Fatal(err)
		}
		if err := q.Retry(ctx, "s", d.Key, d.Lease, time.Now().Add(time.Hour), 3); err != nil {
			t.Fatal(err)
		}
		got := mustTake(t, q, "s", lim) // due now, not in an hour
		if got.Token != "tok-2" || got.Attempts != 3 || got.Started {
			t.Fatalf("taken after the Retry: token %q attempts %d started %v, want tok-2, 3, not started",
				got.Token, got.Attempts, got.Started)
		}
		// The re-enqueue is spent: a Retry of this lease waits its time.
		if err := q.Retry(ctx, "s", got.Key, got.Lease, time.Now().Add(time.Hour), 4); err != nil {
			t.Fatal(err)
		}
		noTake(t, q, "s", lim)
		if st, _ := q.Stats(ctx, "s"); st.Depth != 1 || st.Leased != 0 {
			t.Fatalf("Stats after the second Retry: %+v", st)
		}
	}},
	{"enqueue_while_leased_lease_runs_out", func(t *testing.T, q Queue) {
		// The lease runs out instead: the taker-over has the new token
		// (so it settles the new claim), and its Done ends the delivery.
		ctx := ctxT(t)
		if err := q.Enqueue(ctx, "s", delivery("s:o")); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, "s", QueueLimits{Lease: time.Second})
		again := delivery("s:o")
		again.Token = "tok-2"
		if err := q.Enqueue(ctx, "s", again); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		over := mustTake(t, q, "s", QueueLimits{Lease: qLease})
		if over.Token != "tok-2" || over.Lease == d.Lease {
			t.Fatalf("taken over: token %q, lease reused %v", over.Token, over.Lease == d.Lease)
		}
		if err := q.Done(ctx, "s", d.Key, d.Lease); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Done with the lease that ran out: %v", err)
		}
		if err := q.Done(ctx, "s", over.Key, over.Lease); err != nil {
			t.Fatal(err)
		}
		if ok, _ := q.Queued(ctx, "s", over.Key); ok {
			t.Fatal("queued after the taker-over's Done")
		}
	}},
	{"enqueue_while_leased_race", reenqueueRace},
}

// reenqueueRace: takers take and settle (Done, sometimes Retry soon)
// while one enqueuer per key enqueues it again as soon as it sees it
// taken, so the Enqueue lands between Take and Done: every Enqueue that
// returned nil is followed by a take of its token or a newer one. Half
// the keys are left queued (retried in an hour).
func reenqueueRace(t *testing.T, q Queue) {
	ctx := ctxT(t)
	const keys, rounds = 6, 25
	lim := QueueLimits{Lease: 30 * time.Second}
	var taken [keys]atomic.Int64 // newest round taken, per key
	stop := make(chan struct{})
	var takers sync.WaitGroup
	for w := range 4 {
		takers.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				d, wait, err := q.Take(context.Background(), "s", lim)
				if err != nil {
					t.Error(err)
					return
				}
				if d == nil {
					time.Sleep(min(wait, 2*time.Millisecond))
					continue
				}
				var k, r int
				if _, err := fmt.Sscanf(d.Token, "race-%d-%d", &k, &r); err != nil {
					t.Errorf("token %q: %v", d.Token, err)
					return
				}
				if r > int(taken[k].Load()) {
					taken[k].Store(int64(r))
				}
				if n%2 == 0 {
					if err := q.Start(context.Background(), "s", d.Key, d.Lease); err != nil {
						t.Errorf("Start %s: %v", d.Token, err)
						return
					}
				}
				if (n+w)%5 == 0 {
					time.Sleep(time.Millisecond)
				}
				switch {
				case r == rounds && k%2 == 1:
					// Left queued at the end, for a look at what stays.
					err = q.Retry(context.Background(), "s", d.Key, d.Lease, time.Now().Add(time.Hour), d.Attempts+1)
				case (n+w)%3 == 0:
					err = q.Retry(context.Background(), "s", d.Key, d.Lease, time.Now().Add(5*time.Millisecond), d.Attempts+1)
				default:
					err = q.Done(context.Background(), "s", d.Key, d.Lease)
				}
				if err != nil {
					t.Errorf("settling %s: %v", d.Token, err)
					return
				}
			}
		})
	}
	var enqueuers sync.WaitGroup
	for k := range keys {
		enqueuers.Go(func() {
			for r := 1; r <= rounds; r++ {
				d := delivery(fmt.Sprintf("s:race%d", k))
				d.Token = fmt.Sprintf("race-%d-%d", k, r)
				if err := q.Enqueue(ctx, "s", d); err != nil {
					t.Errorf("Enqueue %s: %v", d.Token, err)
					return
				}
				until := time.Now().Add(10 * time.Second)
				for taken[k].Load() < int64(r) {
					if time.Now().After(until) {
						t.Errorf("%s enqueued, never taken (newest taken: round %d): the Enqueue was lost", d.Token, taken[k].Load())
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
		})
	}
	enqueuers.Wait()
	close(stop)
	takers.Wait()
}

func init() {
	var cases []storeCase[Queuer]
	for _, c := range queueReenqueueCases {
		cases = append(cases, storeCase[Queuer]{c.name, func(t *testing.T, s Queuer) { c.run(t, s.Queue()) }})
	}
	suites = append(suites, newSuite("queue_reenqueue", "delivery queue", cases))
}

// The embedded queue's disk copy follows a re-enqueue: after the Done, a
// restart finds the new delivery; leased at the restart (a lease running
// out), the delivery comes back with the new token and its attempt
// started.
func TestEmbeddedQueueReenqueueSurvivesRestart(t *testing.T) {
	open := reopenable(t)
	ctx := ctxT(t)
	lim := QueueLimits{Lease: time.Hour}
	s, q := open()
	var leased []*Delivery
	for _, k := range []string{"s:done", "s:held"} {
		if err := q.Enqueue(ctx, "s", delivery(k)); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, "s", lim)
		if err := q.Start(ctx, "s", d.Key, d.Lease); err != nil {
			t.Fatal(err)
		}
		leased = append(leased, d)
	}
	for _, d := range leased {
		again := delivery(d.Key)
		again.Token = "tok-2-" + d.Key
		again.Notification.Body = []byte(`{"id":"again"}`)
		if err := q.Enqueue(ctx, "s", again); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Done(ctx, "s", leased[0].Key, leased[0].Lease); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, q = open()
	defer s.Close()
	if st, err := q.Stats(ctx, "s"); err != nil || st.Depth != 2 || st.Leased != 0 {
		t.Fatalf("Stats after the restart: %+v %v, want 2 queued, none leased", st, err)
	}
	for range 2 {
		d := mustTake(t, q, "s", lim)
		if d.Token != "tok-2-"+d.Key {
			t.Errorf("%s after the restart: token %q, want the re-enqueued one", d.Key, d.Token)
		}
		switch d.Key {
		case "s:done":
			if d.Started || d.Notification == nil || string(d.Notification.Body) != `{"id":"again"}` {
				t.Errorf("s:done after the restart: started %v, notification %+v; want the re-enqueued delivery", d.Started, d.Notification)
			}
		case "s:held":
			if !d.Started {
				t.Error("s:held after the restart: not started; its attempt was (the restart ended its lease)")
			}
		}
	}
}

// The embedded queue's disk copy is what its memory holds once the writes
// have returned, however they raced (the later write of a key writes the
// newer state): a restart would find no delivery resurrected, none lost,
// no stale token.
func TestEmbeddedQueueDiskFollowsMemory(t *testing.T) {
	s, err := NewEmbedded(filepath.Join(t.TempDir(), "q.db"), EmbeddedOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := s.Queue()
	reenqueueRace(t, q)
	lq := q.(*localQueue)
	mem := map[string]string{}
	lq.mu.Lock()
	for scope, sq := range lq.scopes {
		for k, it := range sq.items {
			mem[string(queueKey(scope, k))] = string(encodeDelivery(&it.d, it.due))
		}
	}
	lq.mu.Unlock()
	disk := map[string]string{}
	if err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketQueue); b != nil {
			return b.ForEach(func(k, v []byte) error {
				disk[string(k)] = string(v)
				return nil
			})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(mem) == 0 {
		t.Fatal("nothing queued after the race: the comparison would prove nothing")
	}
	for k, v := range mem {
		if disk[k] != v {
			t.Errorf("%q: on disk %q, in memory %q", k, disk[k], v)
		}
	}
	for k := range disk {
		if _, ok := mem[k]; !ok {
			t.Errorf("%q on disk, not in memory (resurrected by a restart)", k)
		}
	}
}
