package catchup

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// TestFleetAsksOnce: two gateway instances on one real Redis, each with
// its own engine for the route: per period one asks the platform, the
// other skips; when the holder stops, the other takes over once the
// lease runs out.
func TestFleetAsksOnce(t *testing.T) {
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("fleet%d", prefixSeq.Add(1))
	c := newClock()
	l := &lister{now: c.Now, events: []keying.PlatformEvent{event("evt_1", c.Now().Add(-time.Hour))}}
	engines := make([]*Engine, 2)
	for i := range engines {
		s := store.NewRedis(srv.Client(), store.RedisOptions{Prefix: prefix})
		t.Cleanup(func() { s.Close() })
		engines[i] = mustEngine(t, Config{Scope: "stripe", Platform: "stripe", API: l, Store: s, Recover: RecoverResend,
			Every: 2 * time.Second, Now: c.Now, Owner: fmt.Sprint("instance-", i)})
	}
	for round := range 3 {
		n := 0
		for _, e := range engines {
			ran, err := e.Tick(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if ran {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("round %d: %d instances ran", round, n)
		}
		c.Add(2 * time.Hour)
	}
	l.mu.Lock()
	lists := l.lists
	l.mu.Unlock()
	if lists != 3 || l.resends("evt_1") != 2 { // at grace and 1h on (the second round is 2h on, the third 4h: before 7h)
		t.Fatalf("the platform was listed %d times, resent %v", lists, l.resent)
	}
	// Instance 0 holds the lease; it stops. Instance 1 takes over once
	// the lease (Every) ran out.
	if ran, _ := engines[1].Tick(ctxT(t)); ran {
		t.Fatal("instance 1 ran while instance 0 holds the lease")
	}
	time.Sleep(2500 * time.Millisecond)
	if ran, err := engines[1].Tick(ctxT(t)); err != nil || !ran {
		t.Fatalf("instance 1 after the lease ran out: %v, %v", ran, err)
	}
}
