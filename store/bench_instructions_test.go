package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
)

// BenchmarkRedisInstructions counts the instructions redis-server runs per
// operation, under valgrind's callgrind: a count, not a time, so it does
// not move with the machine's load (two runs agree within 0.2%), where
// BenchmarkStoreCPU's CPU time moves by ±5%. It sees what a change of a
// few µs does to Redis. One caller, so no pipelining; run it with a fixed
// count, e.g. -benchtime 1000x (callgrind runs Redis ~50× slower). Needs
// valgrind (apt-get install valgrind).
func BenchmarkRedisInstructions(b *testing.B) {
	n := stripeEventNotification()
	a := Answer{Status: 200, Header: answer.Header, Body: []byte("success"), BodyCached: true}
	var seq int
	first := func(j bool) func(b *testing.B, s *Redis) {
		return func(b *testing.B, s *Redis) {
			seq++
			key := "stripe:evt_" + strconv.Itoa(seq)
			r, err := s.Claim(context.Background(), key, "fp", 30*time.Second)
			if err != nil || r.Outcome != Won {
				b.Fatalf("claim: %+v %v", r, err)
			}
			var jn Journal
			if j {
				jn = Journal{Notification: n, Attempt: attempt(200, AttemptAnswered, "success")}
			}
			if err := s.Complete(context.Background(), key, r.Token, a, time.Hour, jn); err != nil {
				b.Fatal(err)
			}
		}
	}
	// An Alipay order's paid event: its order state and day index written
	// by the completion script (a single server).
	order := func(b *testing.B, s *Redis) {
		seq++
		key := fmt.Sprintf("alipay:2021004123456789:20261003220014379710%06d:paid", seq)
		r, err := s.Claim(context.Background(), key, "fp", 30*time.Second)
		if err != nil || r.Outcome != Won {
			b.Fatalf("claim: %+v %v", r, err)
		}
		oa := a
		oa.Order = &OrderRun{TTL: 400 * 24 * time.Hour, Amount: "1288.00", Currency: "CNY", Settles: keying.SettlesPayment, At: time.Now()}
		if err := s.Complete(context.Background(), key, r.Token, oa, time.Hour, Journal{}); err != nil {
			b.Fatal(err)
		}
	}
	replay := func(b *testing.B, s *Redis) {
		r, err := s.Claim(context.Background(), "stripe:evt_replayed", "fp", 30*time.Second)
		if err == nil && r.Outcome == Won {
			err = s.Complete(context.Background(), "stripe:evt_replayed", r.Token, a, time.Hour, Journal{})
		} else if err == nil && r.Outcome != Answered {
			b.Fatalf("replay: %+v", r)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	empty := redis.NewScript("return 1")
	for _, c := range []struct {
		name string
		op   func(b *testing.B, s *Redis)
	}{
		{"floor_two_empty_round_trips", func(b *testing.B, s *Redis) {
			for range 2 {
				if err := s.run(context.Background(), empty, []string{"bench:floor"}).Err(); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"first_copy", first(false)},
		{"first_copy_journal_stripe_event", first(true)},
		{"first_copy_order_alipay_paid", order},
		// A storm of duplicates (or Redis 6, or wait_replicas): the claim
		// is the script, and the completion settles value by value.
		{"first_copy_journal_script_claim", func(b *testing.B, s *Redis) {
			s.dups.Store(dupsScale)
			first(true)(b, s)
		}},
		{"first_copy_script_claim", func(b *testing.B, s *Redis) {
			s.dups.Store(dupsScale)
			first(false)(b, s)
		}},
		{"replay_uncached", replay},
		// A replay among first copies: the SET first, then the script.
		{"replay_set_first", func(b *testing.B, s *Redis) {
			s.dups.Store(0)
			replay(b, s)
		}},
		{"in_flight_copy", func(b *testing.B, s *Redis) {
			r, err := s.Claim(context.Background(), "stripe:evt_in_flight", "fp", time.Hour)
			if err != nil || (r.Outcome != Won && r.Outcome != InFlight) {
				b.Fatalf("in flight: %+v %v", r, err)
			}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			out := filepath.Join(b.TempDir(), "callgrind.out")
			rs := redistest.StartUnder(b, "valgrind", "--tool=callgrind", "--callgrind-out-file="+out)
			cl := redis.NewClient(&redis.Options{Addr: rs.Addr()})
			defer cl.Close()
			s := NewRedis(cl, RedisOptions{})
			s.UseServerVersion(redisMajor(b, cl)) // as a gateway after its start-up check
			defer s.Close()
			for range 200 { // scripts loaded, tables grown
				c.op(b, s)
			}
			time.Sleep(2 * inFlightFlushEvery)
			pid := strconv.Itoa(rs.PID())
			callgrind(b, "-z", pid)
			ops := 0
			for b.Loop() {
				c.op(b, s)
				ops++
			}
			callgrind(b, "-d", pid)
			ir := callgrindTotal(b, out)
			b.ReportMetric(float64(ir)/float64(ops), "redis-instr/op")
		})
	}
}

func callgrind(b *testing.B, args ...string) {
	if out, err := exec.Command("callgrind_control", args...).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %v: %v %s", args, err, out)
	}
}

// callgrindTotal is the instruction count of the last dump written at
// out (callgrind names the dumps out.1, out.2…).
func callgrindTotal(b *testing.B, out string) int64 {
	dumps, _ := filepath.Glob(out + ".*")
	last, lastN := "", -1
	for _, d := range dumps {
		if n, err := strconv.Atoi(strings.TrimPrefix(d, out+".")); err == nil && n > lastN {
			last, lastN = d, n
		}
	}
	f, err := os.Open(last)
	if err != nil {
		b.Fatalf("no callgrind dump at %s.*: %v", out, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("%s: no summary line", last)
	return 0
}
