package store

import (
	"slices"
	"testing"
	"time"
)

func init() { suites = append(suites, newSuite("dead_mark", "listings", deadMarkCases)) }

// deadAttempt is an async delivery refused after the platform's signature
// expired: it ends the key's deliveries for good.
// deadStore is what the dead mark suite checks: the mark is written by
// the claim contract, read by listings, and cleared by a reopen.
type deadStore interface {
	Store
	Lister
	Recovery
}

func deadAttempt() *Attempt {
	a := attempt(401, AttemptFailed, `{"code":"SIGN_ERROR"}`)
	a.Error, a.Dead = "the platform's signature expired: refused (status 401)", true
	return a
}

// dayWindow is a retry window none of these keys comes near: only the
// dead mark can make them dead.
func dayWindow(string) time.Duration { return 24 * time.Hour }

// stateOf is key's state as an operator sees it (Lookup, then StateAt).
func stateOf(t *testing.T, s Store, key string) State {
	t.Helper()
	return lookup(t, s, key).StateAt(time.Now(), 24*time.Hour)
}

// listed is the listing of state with the day's window.
func listed(t *testing.T, s Lister, st State) []string {
	t.Helper()
	return listAll(t, s, ListQuery{State: st, Window: dayWindow, Limit: 10})
}

var deadMarkCases = []storeCase[deadStore]{
	// A key released with a dead attempt is listed dead at once, in every
	// store (Redis reads no attempts in a listing: the mark is in the
	// record), and not failed; a redelivery's claim makes it live again,
	// and a normal failure after it leaves it failed, not dead.
	{"dead_mark_release", func(t *testing.T, s deadStore) {
		ctx := ctxT(t)
		const dead, failed = "wechatpay:4200777:paid", "wechatpay:4200778:paid"
		won := claim(t, s, failed, "", longTTL, Won)
		if err := s.Release(ctx, failed, won.Token, longTTL, Journal{Notification: testNotification, Attempt: attempt(500, AttemptFailed, "down")}); err != nil {
			t.Fatal(err)
		}
		won = claim(t, s, dead, "", longTTL, Won)
		if err := s.Release(ctx, dead, won.Token, longTTL, Journal{Notification: testNotification, Attempt: deadAttempt()}); err != nil {
			t.Fatal(err)
		}
		if got := listed(t, s, StateDead); !slices.Equal(got, []string{dead}) {
			t.Fatalf("dead listing right after the dead release: %v, want [%s]", got, dead)
		}
		if got := listed(t, s, StateFailed); !slices.Equal(got, []string{failed}) {
			t.Fatalf("failed listing: %v, want [%s] (the dead key left out)", got, failed)
		}
		p, err := s.List(ctx, ListQuery{State: StateDead, Window: dayWindow})
		if err != nil || len(p.Records) != 1 || !p.Records[0].Dead || p.Records[0].StateAt(time.Now(), 24*time.Hour) != StateDead {
			t.Fatalf("the listed dead record should carry its mark: %+v, %v", p.Records, err)
		}
		// With no window at all (a route unknown to the reader) the mark
		// still decides.
		if got := listAll(t, s, ListQuery{State: StateDead, Limit: 10}); !slices.Equal(got, []string{dead}) {
			t.Fatalf("dead listing without a window: %v", got)
		}
		if rec := lookup(t, s, dead); !rec.Dead || rec.StateAt(time.Now(), 24*time.Hour) != StateDead {
			t.Fatalf("Lookup of the dead key: dead %v, state %s", rec.Dead, rec.StateAt(time.Now(), 24*time.Hour))
		}
		if st := stateOf(t, s, failed); st != StateFailed {
			t.Fatalf("the failed key reads %s", st)
		}

		// A redelivery claims it: live, in neither listing.
		won = claim(t, s, dead, "", longTTL, Won)
		if got := listed(t, s, StateDead); len(got) != 0 {
			t.Fatalf("dead listing while the redelivery is in flight: %v", got)
		}
		if got := listAll(t, s, ListQuery{State: StateInFlight, Limit: 10}); !slices.Equal(got, []string{dead}) {
			t.Fatalf("in flight: %v, want [%s]", got, dead)
		}
		// It fails as any delivery may: failed, not dead by a stale mark
		// (the dead attempt is still in its journal, one before the last).
		if err := s.Release(ctx, dead, won.Token, longTTL, Journal{Attempt: attempt(502, AttemptFailed, "bad gateway")}); err != nil {
			t.Fatal(err)
		}
		if got := listed(t, s, StateDead); len(got) != 0 {
			t.Fatalf("dead listing after the redelivery failed normally: %v", got)
		}
		if got := listed(t, s, StateFailed); !slices.Equal(got, []string{dead, failed}) {
			t.Fatalf("failed listing: %v, want [%s %s]", got, dead, failed)
		}
		rec := lookup(t, s, dead)
		if n := len(rec.Attempts); rec.Dead || rec.StateAt(time.Now(), 24*time.Hour) != StateFailed || n != 2 || !rec.Attempts[0].Dead {
			t.Fatalf("after a normal failure: dead %v, state %s, attempts %+v", rec.Dead, rec.StateAt(time.Now(), 24*time.Hour), rec.Attempts)
		}

		// Dead again, then redelivered and answered, then reopened by an
		// operator: failed, not dead.
		won = claim(t, s, dead, "", longTTL, Won)
		if err := s.Release(ctx, dead, won.Token, longTTL, Journal{Attempt: deadAttempt()}); err != nil {
			t.Fatal(err)
		}
		if got := listed(t, s, StateDead); !slices.Equal(got, []string{dead}) {
			t.Fatalf("dead listing after a second dead release: %v", got)
		}
		won = claim(t, s, dead, "", longTTL, Won)
		if err := s.Complete(ctx, dead, won.Token, answer, longTTL, Journal{Attempt: attempt(200, AttemptAnswered, "")}); err != nil {
			t.Fatal(err)
		}
		if got := listed(t, s, StateDead); len(got) != 0 {
			t.Fatalf("dead listing after the key was answered: %v", got)
		}
		if err := s.Reopen(ctx, dead, longTTL); err != nil {
			t.Fatal(err)
		}
		if got := listed(t, s, StateDead); len(got) != 0 {
			t.Fatalf("dead listing after a reopen: %v", got)
		}
		if st := stateOf(t, s, dead); st != StateFailed {
			t.Fatalf("reopened key reads %s, want failed", st)
		}
	}},
	// Leave journals a dead attempt on a claim left to run out: once it
	// has, the key is listed dead. A claim of it clears the mark even if
	// that claim runs out with nothing journaled (its last attempt is
	// still the dead one).
	{"dead_mark_leave", func(t *testing.T, s deadStore) {
		ctx := ctxT(t)
		const key = "paypal:WH-1:paid"
		won := claim(t, s, key, "", shortTTL, Won)
		if err := s.Leave(ctx, key, won.Token, longTTL, Journal{Notification: testNotification, Attempt: deadAttempt()}); err != nil {
			t.Fatal(err)
		}
		eventuallyWithin(t, shortTTL+deadline, "the left claim to be listed dead", func() bool {
			return slices.Equal(listed(t, s, StateDead), []string{key})
		})
		if got := listed(t, s, StateFailed); len(got) != 0 {
			t.Fatalf("failed listing of a dead left key: %v", got)
		}
		claim(t, s, key, "", shortTTL, Won)
		if got := listed(t, s, StateDead); len(got) != 0 {
			t.Fatalf("dead listing while it is claimed again: %v", got)
		}
		eventuallyWithin(t, shortTTL+deadline, "the second claim to run out", func() bool {
			return stateOf(t, s, key) == StateFailed
		})
		if got := listed(t, s, StateDead); len(got) != 0 {
			t.Fatalf("dead listing after a claim ran out: %v", got)
		}
		if rec := lookup(t, s, key); rec.Dead || !rec.Attempts[len(rec.Attempts)-1].Dead {
			t.Fatalf("the record %+v: unmarked, its last attempt still the dead one", rec)
		}
	}},
}
