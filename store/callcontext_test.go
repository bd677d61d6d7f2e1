package store

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// With redis-server paused (SIGSTOP), a claim with a long deadline leads
// a batch that hangs on the wire; 16 claims with a short one queue behind
// it. Each gives up at its own deadline, with CallContext's context for
// Redis (the Batcher's timer wakes the queue) as with a timer's
// (bothContexts), and the long one at
// its own. The client is configured as the gateway's is
// (ContextTimeoutEnabled: go-redis then bounds its reads, a new
// connection's handshake too, by the call's deadline). Once Redis is
// back a claim goes through.
func TestCallContextUnderPause(t *testing.T) {
	testenv.Slow(t, "fault: redis-server paused under claims")
	for _, kind := range bothContexts {
		t.Run(kind.name, func(t *testing.T) {
			rs := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true, Protocol: 2})
			s := NewRedis(c, RedisOptions{Prefix: "cc"})
			t.Cleanup(func() { s.Close(); c.Close() })
			claim := func(key string, d time.Duration) (ClaimResult, error) {
				ctx, cancel := kind.ctx(d)
				defer cancel()
				return s.Claim(ctx, key, "", time.Minute)
			}
			// The batches' connection open, and the store's scripts known,
			// before the pause.
			if res, err := claim("before", 2*time.Second); err != nil || res.Outcome != Won {
				t.Fatalf("claim before the pause: %+v %v", res, err)
			}

			const long, short, margin = 3 * time.Second, 300 * time.Millisecond, 500 * time.Millisecond
			rs.Pause()
			longDone := make(chan time.Duration, 1)
			go func() {
				start := time.Now()
				if _, err := claim("paused:long", long); err == nil {
					t.Error("the long claim succeeded with Redis paused")
				}
				longDone <- time.Since(start)
			}()
			time.Sleep(50 * time.Millisecond) // the long claim's batch on the wire
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					start := time.Now()
					_, err := claim("paused:"+strconv.Itoa(i), short)
					if took := time.Since(start); err == nil || took > short+margin {
						t.Errorf("short claim %d with Redis paused: %v after %v, want an error within %v", i, err, took, short+margin)
					}
				})
			}
			wg.Wait()
			select {
			case took := <-longDone:
				if took < long-margin || took > long+margin {
					t.Errorf("the long claim gave up after %v, want about %v", took, long)
				}
			case <-time.After(long + 2*margin):
				t.Fatal("the long claim still waiting past its deadline")
			}
			rs.Resume()
			if res, err := claim("resumed", 2*time.Second); err != nil || res.Outcome != Won {
				t.Fatalf("claim after Redis came back: %+v %v", res, err)
			}
		})
	}
}
