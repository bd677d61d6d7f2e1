package store

import (
	"context"
	"errors"
	"time"
)

// ErrWaitTimeout is returned by WaitAnswer when the deadline passes while
// the key is still in flight.
var ErrWaitTimeout = errors.New("store: key still in flight at the wait's deadline")

// WaitOptions bound one WaitAnswer.
type WaitOptions struct {
	// Deadline ends the wait with ErrWaitTimeout.
	Deadline time.Time
	// OpTimeout bounds each store call (subscribe, look up).
	OpTimeout time.Duration
	// Recheck is how often the key is looked at without a wake-up: a claim
	// whose owner died expires without waking anybody. Usually a third of
	// the lock TTL.
	Recheck time.Duration
}

// WaitAnswer is the wait protocol for a copy whose key is in flight: it
// subscribes to the key's wake-ups first, then looks the key up (so a
// completion between the two is not missed), and repeats on every wake-up
// or recheck until the key is answered (the record), free — released
// (failed), deleted or expired — (nil, nil), or the deadline passes (ErrWaitTimeout).
// When ctx ends first, ctx's error is returned.
func WaitAnswer(ctx context.Context, s Store, key string, o WaitOptions) (*Record, error) {
	ctx, cancel := context.WithDeadline(ctx, o.Deadline)
	defer cancel()
	// ended tells a wait that ran out (ErrWaitTimeout) from a request that
	// went away (its own error).
	ended := func(err error) error {
		if !time.Now().Before(o.Deadline) {
			return ErrWaitTimeout
		}
		return err
	}
	for {
		rec, done, stop, err := lookWhileSubscribed(ctx, s, key, o.OpTimeout)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil, nil
		case err != nil && ctx.Err() != nil:
			return nil, ended(err)
		case err != nil:
			return nil, err
		case rec.State == StateAnswered:
			return rec, nil
		case rec.State != StateInFlight:
			// Released (failed): the key is free again, its history kept.
			return nil, nil
		}
		recheck := time.NewTimer(o.Recheck)
		select {
		case <-done:
		case <-recheck.C:
		case <-ctx.Done():
		}
		recheck.Stop()
		stop()
		if ctx.Err() != nil {
			return nil, ended(ctx.Err())
		}
	}
}

// lookWhileSubscribed subscribes to key's wake-ups and then looks it up.
// On success with an in-flight record the caller owns stop; in every
// other case the subscription is already dropped.
func lookWhileSubscribed(ctx context.Context, s Store, key string, opTimeout time.Duration) (*Record, <-chan struct{}, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	done, stop, err := s.Wait(ctx, key)
	if err != nil {
		return nil, nil, nil, err
	}
	rec, err := s.Lookup(ctx, key)
	if err != nil || rec.State != StateInFlight {
		stop()
		return rec, nil, nil, err
	}
	return rec, done, stop, nil
}
