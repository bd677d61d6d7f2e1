package store

import (
	"context"
	"testing"
	"time"
)

// A completion wakes its key's channel only when a copy's claim found the
// key in flight: that copy may be waiting. A first copy nobody duplicated
// publishes nothing. Each case ends with a marker the test publishes
// itself, so "nothing" is the marker coming first, not a timeout.
func TestRedisCompleteWakesOnlyWaiters(t *testing.T) {
	s, c := redisStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := Answer{Status: 200, Body: []byte("success"), BodyCached: true}

	for _, dup := range []bool{false, true} {
		key := "wake:alone"
		if dup {
			key = "wake:duplicated"
		}
		ps := c.Subscribe(ctx, s.channel(key))
		if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
			t.Fatal(err)
		}
		won, err := s.Claim(ctx, key, "fp", time.Minute)
		if err != nil || won.Outcome != Won {
			t.Fatalf("claim: %+v %v", won, err)
		}
		if dup {
			if r, err := s.Claim(ctx, key, "fp", time.Minute); err != nil || r.Outcome != InFlight {
				t.Fatalf("duplicate: %+v %v, want in flight", r, err)
			}
		}
		if err := s.Complete(ctx, key, won.Token, a, time.Hour, Journal{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Publish(ctx, s.channel(key), "marker").Err(); err != nil {
			t.Fatal(err)
		}
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := "marker"
		if dup {
			want = "c"
		}
		if m.Payload != want {
			t.Errorf("duplicated %v: the channel's first message is %q, want %q", dup, m.Payload, want)
		}
		ps.Close()
	}
}
