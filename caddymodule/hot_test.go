package caddymodule

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	adminapi "github.com/idemgate/idemgate/caddymodule/admin"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestReplayCacheAcrossInstances: two gateway processes share one Redis
// with the replay cache on (the default).
//   - Duplicates on B are replayed from B's memory: Redis runs far fewer
//     scripts than copies, and the record still counts every copy.
//   - A purge through A's admin API, while B replays the key from memory
//     without pause, is seen by every copy that B receives after the purge
//     returned: the backend runs once more, and no such copy gets the old
//     answer.
//   - A forced redelivery through A likewise: B replays the new answer.
func TestReplayCacheAcrossInstances(t *testing.T) {
	rs := redistest.Start(t)
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 200, fmt.Sprintf("success %d", n), 0
	})
	site := fmt.Sprintf(`
	idempotency {
		key {idempotency.form.out_trade_no}
		scope hot
		store redis %s
	}
	reverse_proxy %s`, rs.Addr(), be.addr())
	pa, adminA, _ := startProcAdmin(t, site)
	pb, _, _ := startProcAdmin(t, site)
	a := gateway{base: pa.base, admin: adminA}
	const order = "hot-1"

	if r := notify(t, a.base, order); r.status != 200 || r.body != "success 1" || r.replayed {
		t.Fatalf("first copy: %d %q replayed=%v", r.status, r.body, r.replayed)
	}
	// B keeps it once its replay cache holds its lease (the subscription
	// answered and a ping came back: a moment after the process starts,
	// longer on a loaded machine): then a copy on B runs no script.
	copies := 1
	eventually(t, 10*time.Second, "B replays from memory", func() bool {
		before := rs.ScriptCalls()
		if r := notify(t, pb.base, order); r.status != 200 || r.body != "success 1" || !r.replayed {
			t.Fatalf("a copy on B: %d %q replayed=%v", r.status, r.body, r.replayed)
		}
		copies++
		return rs.ScriptCalls() == before
	})
	before := rs.ScriptCalls()
	for i := range 40 {
		if r := notify(t, pb.base, order); r.status != 200 || r.body != "success 1" || !r.replayed {
			t.Fatalf("copy %d on B: %d %q replayed=%v", i, r.status, r.body, r.replayed)
		}
	}
	if n := rs.ScriptCalls() - before; n > 10 {
		t.Fatalf("40 duplicates on B ran %d scripts in Redis: not replayed from memory", n)
	}
	eventually(t, 3*time.Second, "A sees B's copies counted", func() bool {
		var rec adminapi.RecordView
		a.adminJSON(t, http.MethodGet, keyURI("hot:"+order), &rec)
		return rec.Copies == int64(copies+40)
	})

	// B replays without pause while A purges.
	var purged atomic.Bool
	var stale, bad atomic.Int64
	var after atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				late := purged.Load()
				r := notify(t, pb.base, order)
				switch {
				case r.status != 200:
					bad.Add(1)
				case late && r.body != "success 2":
					stale.Add(1)
				case late:
					after.Add(1)
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	var del adminapi.DeletedView
	a.adminJSON(t, http.MethodDelete, keyURI("hot:"+order), &del)
	purged.Store(true)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if !del.Deleted {
		t.Fatalf("purge: %+v", del)
	}
	if bad.Load() != 0 || stale.Load() != 0 || after.Load() == 0 {
		t.Fatalf("copies on B after the purge on A returned: %d stale, %d not 200, %d right (want 0, 0, > 0)",
			stale.Load(), bad.Load(), after.Load())
	}
	if got := be.count(order); got != 2 {
		t.Fatalf("backend ran %d times, want 2 (before and after the purge)", got)
	}

	// A forced redelivery through A: B then replays the new answer.
	if r := notify(t, pb.base, order); r.body != "success 2" || !r.replayed {
		t.Fatalf("copy on B: %q replayed=%v", r.body, r.replayed)
	}
	var rd adminapi.RedeliveryView
	a.adminJSON(t, http.MethodPost, keyURI("hot:"+order)+"/redeliver?force=1", &rd)
	if !rd.Reopened || rd.Replayed || rd.Body != "success 3" {
		t.Fatalf("redeliver: %+v", rd)
	}
	if r := notify(t, pb.base, order); r.body != "success 3" || !r.replayed {
		t.Fatalf("copy on B after the redelivery on A: %q replayed=%v, want the new answer", r.body, r.replayed)
	}
	if got := be.count(order); got != 3 {
		t.Fatalf("backend ran %d times, want 3", got)
	}
}
