package journal

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

func TestRetryWindow(t *testing.T) {
	sched := keying.Schedule{time.Minute, 10 * time.Minute} // the last retry 11m after the first copy
	for _, c := range []struct {
		name                   string
		giveUp, platform, want time.Duration
		sched                  keying.Schedule
	}{
		{"async: give_up, whatever the platform", 2 * time.Hour, 24 * time.Hour, 2 * time.Hour, sched},
		{"platform window alone", 0, 24 * time.Hour, 24 * time.Hour, nil},
		{"schedule past the window", 0, 5 * time.Minute, 11*time.Minute + time.Minute, sched},
		{"window past the schedule", 0, 24 * time.Hour, 24 * time.Hour, sched},
		{"no platform", 0, 0, 0, nil},
	} {
		if got := RetryWindow(c.giveUp, c.platform, c.sched, time.Minute); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// emitted is the route's events as an Emitter sees them.
type emitted []string

func (e *emitted) Emit(event, key string, status int, attempts int64) {
	*e = append(*e, fmt.Sprintf("%s %s %d %d", event, key, status, attempts))
}

// TestFailedEmit: a key released after failed attempts reads back with
// its attempts; within the retry window its events are failed alone and
// its record goes to the last-copy check, past the window failed and
// dead, and a key the store cannot read is failed with no attempts.
func TestFailedEmit(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	for i := range 2 {
		c, err := st.Claim(ctx, "k", "fp", time.Minute)
		if err != nil || c.Outcome != store.Won {
			t.Fatalf("claim %d: %+v %v", i, c, err)
		}
		j := store.Journal{Attempt: Attempt(Result{Outcome: "backend_failed", Start: time.Now(), Status: 502})}
		if err := st.Release(ctx, "k", c.Token, time.Hour, j); err != nil {
			t.Fatal(err)
		}
	}
	window := time.Hour
	for _, c := range []struct {
		name     string
		key      string
		now      time.Time
		want     []string
		lastCopy bool
	}{
		{"within the window", "k", time.Now(), []string{"idempotency.failed k 502 2"}, true},
		{"past the window", "k", time.Now().Add(2 * window), []string{"idempotency.failed k 502 2", "idempotency.dead k 502 2"}, false},
		{"unreadable", "gone", time.Now(), []string{"idempotency.failed gone 502 0"}, false},
	} {
		f := ReadFailed(st, c.key, time.Second, func() time.Time { return c.now }, window)
		var ev emitted
		var told *store.Record
		f.Emit(&ev, c.key, 502, func(r *store.Record) { told = r })
		if fmt.Sprint(ev) != fmt.Sprint(c.want) {
			t.Errorf("%s: events %q, want %q", c.name, ev, c.want)
		}
		if (told != nil) != c.lastCopy || (told != nil && told.Key != "k") {
			t.Errorf("%s: last-copy check got %+v, want it told: %v", c.name, told, c.lastCopy)
		}
	}
}
