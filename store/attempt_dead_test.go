package store

import (
	"testing"
	"time"
)

// TestAttemptDead: an attempt that ended a key's deliveries for good keeps
// its mark through the stored form (beside Resigned, in the same flags
// byte). The record's own mark, not its attempts, makes a failed record
// dead at once, in StateAt and in a listing alike (a listing has no
// attempts).
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
	window := func(string) time.Duration { return 24 * time.Hour }
	rec := &Record{Key: "s:k", State: StateFailed, FirstSeen: now, Changed: now, Dead: true}
	dead, failed := ListQuery{State: StateDead, Now: now, Window: window}, ListQuery{State: StateFailed, Now: now, Window: window}
	if s := rec.StateAt(now, 24*time.Hour); s != StateDead || !dead.matches(rec) || failed.matches(rec) {
		t.Errorf("a failed record marked dead reads %s, listed dead %v, failed %v; want dead only", s, dead.matches(rec), failed.matches(rec))
	}
	// A redelivered key: the mark cleared, its dead attempt kept.
	rec.Dead, rec.Attempts = false, []Attempt{{Outcome: AttemptFailed, Dead: true}}
	if s := rec.StateAt(now, 24*time.Hour); s != StateFailed || dead.matches(rec) || !failed.matches(rec) {
		t.Errorf("unmarked, its last attempt dead: %s, listed dead %v, failed %v; want failed only", s, dead.matches(rec), failed.matches(rec))
	}
	// The mark counts only while the key is failed.
	rec.State, rec.Dead = StateInFlight, true
	if s := rec.StateAt(now, 24*time.Hour); s != StateInFlight || dead.matches(rec) {
		t.Errorf("in flight with a stale mark: %s, listed dead %v", s, dead.matches(rec))
	}
}

// TestEntryDeadMark: the embedded store keeps the mark in the record's
// stored form, and a record stored before the mark (without its byte)
// decodes unmarked.
func TestEntryDeadMark(t *testing.T) {
	e := newEntry("s:k", "fp", time.UnixMilli(5000), time.Minute)
	e.fail(time.UnixMilli(6000), time.Hour, Journal{Notification: testNotification, Attempt: deadAttempt()})
	if !e.Dead {
		t.Fatal("a release journaling a dead attempt did not mark the entry")
	}
	b := encodeEntry(e)
	got, err := decodeEntry(b)
	if err != nil || !got.Dead || got.State != StateFailed || len(got.Attempts) != 1 {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	old, err := decodeEntry(b[:len(b)-1])
	if err != nil || old.Dead || old.State != StateFailed || len(old.Attempts) != 1 || !old.Attempts[0].Dead {
		t.Fatalf("a record stored before the mark: %+v, %v", old, err)
	}
	if r := e.claimOn("", time.UnixMilli(7000), time.Minute); r.Outcome != Won || e.Dead {
		t.Fatalf("a claim of the dead key: %v, still marked %v", r.Outcome, e.Dead)
	}
}
