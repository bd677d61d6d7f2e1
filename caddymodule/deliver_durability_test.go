package caddymodule

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// An async route's ack is as durable as its store: on Redis it needs AOF
// (issue 41, case 7). Every case asserts what the platform received and
// how often the backend ran.

// asyncSite is asyncRoute on store, delivering to backend, with extra in
// its deliver async block.
func asyncSite(store, backend, extra string) string {
	return strings.NewReplacer("{store}", store, "{backend}", backend, "{extra}", extra).Replace(asyncRoute)
}

// TestAsyncNeedsAOF: an async route on a Redis without AOF (RDB snapshots
// only, as in the issue) refuses to start, naming appendonly and both
// fixes; with `durability volatile` it starts and delivers, with a
// warning. A Redis with AOF whose appendfsync is everysec or no starts
// with a warning saying what a host crash can lose; with always, none.
func TestAsyncNeedsAOF(t *testing.T) {
	rdb := redistest.StartWith(t, redistest.Options{Args: []string{"--save", "3600 1"}})
	be := newAsyncBackend(t, "127.0.0.1:0")

	t.Run("refused", func(t *testing.T) {
		_, _, err := tryCaddy(t, asyncSite("store redis "+rdb.Addr(), be.addr(), "retry 200ms 800ms"))
		if err == nil {
			t.Fatal("an async route on a Redis with appendonly no started")
		}
		for _, want := range []string{rdb.Addr(), "appendonly no", "appendonly yes", "durability volatile", "restart"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the start's error does not say %q: %v", want, err)
			}
		}
		if n := be.total(); n != 0 {
			t.Errorf("backend ran %d times", n)
		}
	})

	t.Run("volatile", func(t *testing.T) {
		base, logFile, err := tryCaddy(t, asyncSite("store redis "+rdb.Addr(), be.addr(), "durability volatile"))
		if err != nil {
			t.Fatalf("durability volatile on a Redis without AOF: %v", err)
		}
		if !logHas(t, logFile, 5*time.Second, `"level":"warn"`, "durability volatile", "appendonly no", rdb.Addr()) {
			t.Error("no start-up warning that a Redis restart loses acked notifications")
		}
		if r := notify(t, base, "vol-1"); r.status != 200 || r.body != "success" {
			t.Fatalf("volatile route: %d %q, want the ack", r.status, r.body)
		}
		waitAnswered(t, 10*time.Second, "demo:vol-1")
		if n := be.count("vol-1"); n != 1 {
			t.Errorf("backend ran %d times for vol-1, want 1", n)
		}
	})

	for _, c := range []struct {
		fsync string
		warn  []string // in the start-up warning; none when nil
	}{
		{"always", nil},
		{"everysec", []string{"appendfsync everysec", "up to a second"}},
		{"no", []string{"appendfsync no", "operating system"}},
	} {
		t.Run("appendfsync "+c.fsync, func(t *testing.T) {
			rs := redistest.StartWith(t, redistest.Options{AOF: true, AppendFsync: c.fsync})
			base, logFile, err := tryCaddy(t, asyncSite("store redis "+rs.Addr(), be.addr(), ""))
			if err != nil {
				t.Fatalf("AOF with appendfsync %s: %v", c.fsync, err)
			}
			key := "fs-" + c.fsync
			if r := notify(t, base, key); r.status != 200 || r.body != "success" {
				t.Fatalf("%d %q, want the ack", r.status, r.body)
			}
			waitAnswered(t, 10*time.Second, "demo:"+key)
			if n := be.count(key); n != 1 {
				t.Errorf("backend ran %d times, want 1", n)
			}
			warned := logHas(t, logFile, time.Second, append([]string{`"level":"warn"`, "deliver async", rs.Addr()}, c.warn...)...)
			if c.warn != nil && !warned {
				t.Errorf("no start-up warning about appendfsync %s", c.fsync)
			}
			if c.warn == nil && logHas(t, logFile, 0, "appendfsync") {
				t.Errorf("a warning about appendfsync %s", c.fsync)
			}
		})
	}
}

// TestAsyncAcksSurviveRedisKill: the scenario, five notifications
// with the backend down, then Redis killed (SIGKILL) and restarted, then
// the backend up: every notification the platform was acked reaches the
// backend exactly once. On the Redis (RDB snapshots only) the
// route does not start, so nothing is acked (the platform keeps its
// retries); with AOF (appendfsync always) all five are acked, and all
// five come back with Redis.
func TestAsyncAcksSurviveRedisKill(t *testing.T) {
	testenv.Slow(t, "fault: Redis killed and restarted")
	for _, c := range []struct {
		name string
		opts redistest.Options
		aof  bool
	}{
		{"rdb only", redistest.Options{Args: []string{"--save", "3600 1"}}, false},
		{"aof always", redistest.Options{AOF: true, AppendFsync: "always", Args: []string{"--save", "3600 1"}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := redistest.StartWith(t, c.opts)
			addr := reservePort(t) // the backend: down for now
			base, _, err := tryCaddy(t, asyncSite("store redis "+rs.Addr(), addr, "retry 200ms 800ms"))
			if !c.aof {
				if err == nil || !strings.Contains(err.Error(), "appendonly no") {
					t.Errorf("async route on a Redis without AOF: start error %v, want a refusal naming appendonly", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			var acked []string
			for i := range 5 {
				k := "kill-" + itoa(i)
				if err != nil {
					break // no route: the platform's notifications are not acked
				}
				if r := notify(t, base, k); r.status == 200 && r.body == "success" {
					acked = append(acked, k)
				} else if c.aof {
					t.Errorf("%s: %d %q, want the ack", k, r.status, r.body)
				}
			}
			rs.Kill()
			rs.Restart()
			be := newAsyncBackend(t, addr)
			deadline := time.Now().Add(15 * time.Second)
			for _, k := range acked {
				for be.count(k) == 0 && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
			}
			time.Sleep(time.Second) // a second delivery would come by now
			for _, k := range acked {
				if n := be.count(k); n != 1 {
					t.Errorf("%s was acked, then Redis was killed: the backend ran it %d times, want 1", k, n)
				}
			}
			if n := be.total(); n != len(acked) {
				t.Errorf("backend ran %d times in all, want %d (once per ack)", n, len(acked))
			}
		})
	}
}

// TestAsyncAOFOffAtRunTime: AOF switched off after the start (CONFIG SET
// appendonly no) is found by the background check: the route's acks fail
// closed (503 + Retry-After, never the ack: the platform retries), logged
// at error naming appendonly, for new notifications and for copies of
// queued ones alike; nothing acked before is lost. Switched on again, the
// acks resume, and every notification reaches the backend once.
func TestAsyncAOFOffAtRunTime(t *testing.T) {
	testenv.Slow(t, "fault: AOF switched off at run time")
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	addr := reservePort(t) // the backend: down until the end
	base, logFile, err := tryCaddy(t, asyncSite("store redis "+rs.Addr(), addr, "retry 200ms 800ms"))
	if err != nil {
		t.Fatal(err)
	}
	recheckRedisEvery(t, 200*time.Millisecond)
	for _, k := range []string{"before-0", "before-1"} {
		if r := notify(t, base, k); r.status != 200 || r.body != "success" {
			t.Fatalf("%s with AOF: %d %q, want the ack", k, r.status, r.body)
		}
	}
	ctx := context.Background()
	if err := rs.Client().ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if !logHas(t, logFile, 5*time.Second, `"level":"error"`, "Redis turned appendonly off", rs.Addr()) {
		t.Fatal("no error logged after appendonly was turned off")
	}
	for i, k := range []string{"during", "during", "before-0"} {
		r := notify(t, base, k)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || r.body == "success" {
			t.Fatalf("copy %d of %s without AOF: %d %q Retry-After=%q, want 503 + Retry-After and no ack",
				i, k, r.status, r.body, r.header.Get("Retry-After"))
		}
	}
	if !logHas(t, logFile, time.Second, `"level":"error"`, "acks refused", "appendonly", rs.Addr()) {
		t.Error("the route's refused acks were not logged at error naming appendonly")
	}
	if err := rs.Client().ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "acks to resume", func() bool {
		r := notify(t, base, "during")
		return r.status == 200 && r.body == "success"
	})
	if r := notify(t, base, "after"); r.status != 200 || r.body != "success" {
		t.Fatalf("after AOF is back: %d %q, want the ack", r.status, r.body)
	}
	be := newAsyncBackend(t, addr)
	keys := []string{"before-0", "before-1", "during", "after"}
	for _, k := range keys {
		waitAnswered(t, 30*time.Second, "demo:"+k)
	}
	time.Sleep(time.Second)
	for _, k := range keys {
		if n := be.count(k); n != 1 {
			t.Errorf("%s: backend ran %d times, want 1", k, n)
		}
	}
	if n := be.total(); n != len(keys) {
		t.Errorf("backend ran %d times in all, want %d", n, len(keys))
	}
}
