package cache

import (
	"testing"
	"time"
)

// TestAttemptDead: an attempt that ended a key's deliveries for good keeps
// its mark through the stored form (beside Resigned, in the same flags
// byte), and makes a failed record dead at once when its attempts are at
// hand; List goes by the window alone.
func TestAttemptDead(t *testing.T) {
	for _, a := range []Attempt{
		{Start: time.UnixMilli(1000), Outcome: AttemptFailed, Status: 401, Error: "the platform's signature expired", Dead: true},
		{Start: time.UnixMilli(1000), Outcome: AttemptFailed, Status: 401, Resigned: true, Dead: true},
		{Start: time.UnixMilli(1000), Outcome: AttemptFailed, Status: 500, Resigned: true},
	} {
		got, err := decodeAttempt(encodeAttempt(&a))
		if err != nil || got.Dead != a.Dead || got.Resigned != a.Resigned || got.Error != a.Error {
			t.Fatalf("round trip of %+v: %+v, %v", a, got, err)
		}
	}
	now := time.Now()
	rec := &Record{Key: "s:k", State: StateFailed, FirstSeen: now, Changed: now,
		Attempts: []Attempt{{Outcome: AttemptFailed}, {Outcome: AttemptFailed, Dead: true}}}
	if s := rec.StateAt(now, 24*time.Hour); s != StateDead {
		t.Errorf("a failed record whose last attempt is dead reads %s, want dead", s)
	}
	q := ListQuery{State: StateDead, Now: now, Window: func(string) time.Duration { return 24 * time.Hour }}
	if q.matches(rec) {
		t.Error("List should go by the window alone (Redis reads no attempts there)")
	}
	rec.Attempts = rec.Attempts[:1]
	if s := rec.StateAt(now, 24*time.Hour); s != StateFailed {
		t.Errorf("without the mark: %s, want failed", s)
	}
}
