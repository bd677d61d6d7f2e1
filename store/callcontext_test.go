package store

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// CallContext on Redis sets no timer, and its deadline ends a call as a
// timer's context does. The other stores get a timer's context.
func TestCallContext(t *testing.T) {
	rs := redistest.Start(t)
	s := NewRedis(rs.Client(), RedisOptions{Prefix: "cc"})
	t.Cleanup(func() { s.Close() })

	ctx, cancel := CallContext(s, 50*time.Millisecond)
	defer cancel()
	if ctx.Done() != nil {
		t.Fatal("Redis's call context has a Done: it set a timer")
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > 50*time.Millisecond || time.Until(d) < 0 {
		t.Fatalf("deadline %v %v, want within 50ms", d, ok)
	}
	if ctx.Err() != nil {
		t.Fatalf("Err before the deadline: %v", ctx.Err())
	}
	time.Sleep(60 * time.Millisecond)
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err after the deadline: %v", ctx.Err())
	}

	mctx, mcancel := CallContext(NewMemory(), time.Second)
	defer mcancel()
	if mctx.Done() == nil {
		t.Fatal("the memory store's call context has no Done: its waits would never end")
	}
}

// With redis-server paused (SIGSTOP), claims from 16 callers at once (one
// leads the batch on the wire, the others queue behind it) each fail, as
// many within the timeout with CallContext's context as with a timer's:
// all but one within the timeout and a margin. The one is the caller that
// leads the next batch on a new connection: go-redis waits for the new
// connection's handshake past the deadline (5 s), with either context.
// Once Redis is back a claim goes through.
func TestCallContextUnderPause(t *testing.T) {
	testenv.Slow(t, "fault: redis-server paused under claims")
	for _, kind := range []string{"timer", "call context"} {
		t.Run(kind, func(t *testing.T) {
			rs := redistest.Start(t)
			s := NewRedis(rs.Client(), RedisOptions{Prefix: "cc"})
			t.Cleanup(func() { s.Close() })
			within := func(d time.Duration) (context.Context, context.CancelFunc) {
				if kind == "timer" {
					return context.WithTimeout(context.Background(), d)
				}
				return CallContext(s, d)
			}
			claim := func(key string, d time.Duration) (ClaimResult, error) {
				ctx, cancel := within(d)
				defer cancel()
				return s.Claim(ctx, key, "", time.Minute)
			}
			// The batches' connection open before the pause.
			if res, err := claim("before", 2*time.Second); err != nil || res.Outcome != Won {
				t.Fatalf("claim before the pause: %+v %v", res, err)
			}

			const timeout, margin = 300 * time.Millisecond, 700 * time.Millisecond
			rs.Pause()
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				late []time.Duration
			)
			for i := range 16 {
				wg.Go(func() {
					start := time.Now()
					_, err := claim("paused:"+strconv.Itoa(i), timeout)
					took := time.Since(start)
					if err == nil {
						t.Errorf("claim %d with Redis paused succeeded", i)
					}
					if took > timeout+margin {
						mu.Lock()
						late = append(late, took)
						mu.Unlock()
					}
				})
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(8 * time.Second):
				t.Fatal("claims still waiting 8s into the pause")
			}
			rs.Resume()
			if len(late) > 1 {
				t.Errorf("%d claims past %v: %v; want at most the one on a new connection", len(late), timeout+margin, late)
			}
			if res, err := claim("resumed", 2*time.Second); err != nil || res.Outcome != Won {
				t.Fatalf("claim after Redis came back: %+v %v", res, err)
			}
			t.Logf("late: %v", late)
		})
	}
}
