package delivery

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// TestStateShownAttemptOfThisClaim: another instance reads a queued key
// retrying once an attempt of its current claim failed. The store
// records a failed attempt after it ends, moving the record's changed
// time past the attempt's start: a slow attempt (a time-out, a slow
// 502) is still this claim's. A redelivered key's earlier attempts are
// not, however shortly before the redelivery they ended.
func TestStateShownAttemptOfThisClaim(t *testing.T) {
	now := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		attempt store.Attempt
		changed time.Time
		want    string
	}{
		{"no attempt yet", store.Attempt{}, now, StateQueued},
		{"started after the claim", store.Attempt{Start: now.Add(time.Millisecond), Duration: time.Millisecond}, now, StateRetrying},
		{"a slow attempt whose journaling moved changed", store.Attempt{Start: now.Add(5 * time.Millisecond), Duration: 30 * time.Second}, now.Add(30*time.Second + 7*time.Millisecond), StateRetrying},
		{"a fast attempt a ms before its own write", store.Attempt{Start: now.Add(time.Millisecond), Duration: 200 * time.Microsecond}, now.Add(2 * time.Millisecond), StateRetrying},
		{"a redelivered key's earlier attempt", store.Attempt{Start: now.Add(-10 * time.Minute), Duration: time.Second}, now, StateQueued},
		{"a redelivered key's attempt just before the redelivery", store.Attempt{Start: now.Add(-300 * time.Millisecond), Duration: 250 * time.Millisecond}, now, StateQueued},
	} {
		// The claim (or the redelivery's) was at now: last_seen; changed
		// is where the attempt's journaling left it.
		rec := &store.Record{State: store.StateInFlight, Changed: c.changed, FirstSeen: now.Add(-time.Hour), LastSeen: now}
		if !c.attempt.Start.IsZero() {
			rec.Attempts = []store.Attempt{c.attempt}
		}
		if got := StateShown(rec, now, 0, true, nil); got.State != c.want {
			t.Errorf("%s: %s, want %s", c.name, got.State, c.want)
		}
	}
	// What this instance's engine holds wins.
	rec := &store.Record{State: store.StateInFlight, Changed: now}
	if got := StateShown(rec, now, 0, true, &KeyState{Delivering: true}); got.State != StateDelivering {
		t.Errorf("held and delivering: %s", got.State)
	}
}
