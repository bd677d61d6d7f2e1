package delivery

import (
	"time"

	"github.com/idemgate/idemgate/store"
)

// The states of a deliver async route's key that the store keeps in
// flight (its claim is held while the notification is queued): the
// platform has its ack, and the gateway delivers it.
const (
	// StateQueued: waiting for its turn in the queue.
	StateQueued = "queued"
	// StateRetrying: an attempt failed; the next one is due at
	// next_attempt (when this instance holds it).
	StateRetrying = "retrying"
	// StateDelivering: a gateway is sending it to the backend now.
	StateDelivering = "delivering"
)

// Shown is a record's state as the operator surfaces name it.
type Shown struct {
	State       string
	NextAttempt time.Time
	// Async: the key's route delivers from its queue: the platform has
	// its ack and retries nothing.
	Async bool
}

// StateShown is the one rule every operator surface names a key's state
// by (the key page, lists, search, an order's page, reconciliation's
// items; the console and the CLI through the admin API), so that none
// reads in_flight where another reads retrying. It is rec's state at
// now: the store's; dead once window (the route's retry window, async:
// give_up) since the first copy has passed (0: never by the window); and
// for an async route's key in flight, queued, retrying or delivering.
// held is what this process's engine knows of the key (nil: it does not
// hold it); a key another instance holds reads queued, or retrying once
// an attempt since it was claimed has failed (rec's journal tells).
func StateShown(rec *store.Record, now time.Time, window time.Duration, async bool, held *KeyState) Shown {
	s := Shown{State: string(rec.StateAt(now, window)), Async: async}
	if !async || rec.State != store.StateInFlight {
		return s
	}
	s.State = StateQueued
	if n := len(rec.Attempts); n > 0 && sinceClaimed(rec.Attempts[n-1], rec) {
		// An attempt since the key was claimed (and queued): a retry is
		// due. Attempts from before (a redelivered dead key's) do not
		// count.
		s.State = StateRetrying
	}
	if held != nil {
		switch {
		case held.Delivering:
			s.State = StateDelivering
		case !held.NextAttempt.IsZero():
			s.State, s.NextAttempt = StateRetrying, held.NextAttempt
		}
	}
	return s
}

// sinceClaimed says whether a is an attempt of the key's current claim:
// it started at or after the claim. The claim's time is the record's
// last copy (a claim sets last_seen and changed together); changed alone
// is not it, as the write that journals a failed attempt moves changed
// past the attempt's start, and a slow attempt (a time-out, a slow 502)
// would read as an earlier claim's. A redelivered key's earlier attempts
// started before the redelivery claimed it.
func sinceClaimed(a store.Attempt, rec *store.Record) bool {
	claimed := rec.Changed
	if !rec.LastSeen.IsZero() && rec.LastSeen.Before(claimed) {
		claimed = rec.LastSeen
	}
	return !a.Start.Before(claimed.Truncate(time.Millisecond))
}
