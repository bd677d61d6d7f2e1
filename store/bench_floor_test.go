package store

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
)

// BenchmarkStoreCPU measures CPU per first copy, and per replay that asks
// Redis, on the Redis store the way the load scripts do (CPU time per request, which a shared
// machine moves less than wall time), with 32 concurrent callers as wrk
// -c32 drives a gateway: this process's CPU (the gateway's share: the
// store's client work, go-redis, its I/O) and redis-server's. Beside the
// store's claim + complete it runs the floor under them: two round trips
// of an empty script through the same client and the same path (a
// shared batch, Batcher). What a first copy costs above the
// floor is the store's own work; the floor itself is what two round trips
// cost on this machine, whatever a gate does in them. A replay (no replay
// cache: every duplicate a claim) is held against one empty round trip.
func BenchmarkStoreCPU(b *testing.B) {
	c, pid := cpuBenchRedis(b)
	s := NewRedis(c, RedisOptions{})
	s.UseServerVersion(redisMajor(b, c)) // as a gateway after its start-up check
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	empty := redis.NewScript("return 1")
	a := Answer{Status: 200, Header: answer.Header, Body: []byte("success"), BodyCached: true}
	n := stripeLikeNotification()
	var seq atomic.Int64
	firstCopy := func(b *testing.B, j func() Journal) func() {
		return func() {
			key := "bench:cpu:" + strconv.FormatInt(seq.Add(1), 10)
			r, err := s.Claim(ctx, key, "fp", 30*time.Second)
			if err != nil || r.Outcome != Won {
				b.Errorf("claim: %+v %v", r, err)
				return
			}
			if err := s.Complete(ctx, key, r.Token, a, time.Hour, j()); err != nil {
				b.Error(err)
			}
		}
	}
	cases := []struct {
		name string
		op   func(b *testing.B) func()
	}{
		{"floor_two_empty_round_trips", func(b *testing.B) func() {
			return func() {
				for range 2 {
					if err := s.run(ctx, empty, []string{"bench:floor"}).Err(); err != nil {
						b.Error(err)
					}
				}
			}
		}},
		{"floor_one_empty_round_trip", func(b *testing.B) func() {
			return func() {
				if err := s.run(ctx, empty, []string{"bench:floor"}).Err(); err != nil {
					b.Error(err)
				}
			}
		}},
		{"replay", func(b *testing.B) func() {
			r, err := s.Claim(ctx, "bench:cpu:replay", "fp", 30*time.Second)
			if err == nil && r.Outcome == Won { // the benchmark's first run
				err = s.Complete(ctx, "bench:cpu:replay", r.Token, a, time.Hour, Journal{})
			}
			if err != nil {
				b.Fatal(err)
			}
			return func() {
				r, err := s.Claim(ctx, "bench:cpu:replay", "fp", 30*time.Second)
				if err != nil || r.Outcome != Answered {
					b.Errorf("replay: %+v %v", r, err)
				}
			}
		}},
		{"claim_complete", func(b *testing.B) func() { return firstCopy(b, func() Journal { return Journal{} }) }},
		{"claim_complete_journal_1KiB", func(b *testing.B) func() {
			return firstCopy(b, func() Journal {
				return Journal{Notification: n, Attempt: attempt(200, AttemptAnswered, "success")}
			})
		}},
	}
	for _, cs := range cases {
		b.Run(cs.name, func(b *testing.B) {
			op := cs.op(b)
			op() // loads the script
			measureCPU(b, pid, op)
		})
	}
}

// measureCPU runs op b.N times from 32 callers (on 2 cores, as wrk -c32
// drives a gateway) and reports this process's CPU and redis-server's
// (pid) per op.
func measureCPU(b *testing.B, pid int, op func()) {
	b.SetParallelism(16)
	g0, r0 := selfCPU(), procCPU(pid)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			op()
		}
	})
	b.StopTimer()
	g1, r1 := selfCPU(), procCPU(pid)
	b.ReportMetric(float64(g1-g0)/float64(time.Microsecond)/float64(b.N), "gw-cpu-µs/op")
	b.ReportMetric(float64(r1-r0)/float64(time.Microsecond)/float64(b.N), "redis-cpu-µs/op")
}

// cpuBenchRedis starts a redis-server for a CPU benchmark and returns a
// client set up as the gateway's is (caddymodule/store.go) and the
// server's pid, whose CPU the benchmark reads.
func cpuBenchRedis(b *testing.B) (*redis.Client, int) {
	rs := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), Protocol: 2, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	pid, err := redisPID(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return c, pid
}

// redisPID is the process id redis-server reports.
func redisPID(ctx context.Context, c *redis.Client) (int, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, os.ErrNotExist
}

// selfCPU is this process's CPU time so far (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is process pid's CPU time so far, from /proc (clock ticks of
// 10 ms: the benchmark's runs are long enough for it).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// redisMajor is the major version of c's server, as the gateway's start-up
// check reads it (the store then sends scripts in the form that server
// reads, and claims a first copy with a SET on Redis 7).
func redisMajor(b testing.TB, c redis.UniversalClient) int {
	rep, err := CheckRedis(context.Background(), c, RedisCheckOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return rep.Major
}
