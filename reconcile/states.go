package reconcile

import (
	"context"
	"errors"
	"strings"

	"github.com/idemgate/idemgate/store"
)

// states fills in the record of each item listed. An event that ran has
// its record's state while the record is kept (answered, …), "ran" once
// its ttl has passed and only its order remembers it.
func (rc *reconciler) states(ctx context.Context) error {
	for _, c := range []*Category{&rc.rep.RunNotSettled, &rc.rep.AmountDiffers, &rc.rep.Matched, &rc.rep.PendingNextBill} {
		for i := range c.Items {
			it := &c.Items[i]
			rec, err := rc.env.Store.Lookup(ctx, it.Key)
			switch {
			case errors.Is(err, store.ErrNotFound):
				it.State = "ran"
			case err != nil:
				return rc.storeErr(err)
			default:
				it.State = rc.env.stateOf(rec)
			}
		}
	}
	return rc.unrunStates(ctx)
}

// unrunStates fills in the record of each settled-never-run item listed:
// its state, attempts and, when it keeps the notification and its backend
// never answered it, how to redeliver.
func (rc *reconciler) unrunStates(ctx context.Context) error {
	items := rc.rep.SettledNeverRun.Items
	for i := range items {
		it := &items[i]
		if it.Key == "" {
			it.State = "none"
			it.Note = "no event that names " + strings.Join(it.refs, " or ") + " ran, and no failed or in-flight record names it: no notification arrived (or its record's ttl passed)"
			continue
		}
		rec, err := rc.env.Store.Lookup(ctx, it.Key)
		if errors.Is(err, store.ErrNotFound) {
			it.State = "none"
			if it.Note == "" {
				it.Note = "no record: no notification arrived (or its record's ttl passed)"
			}
			continue
		}
		if err != nil {
			return rc.storeErr(err)
		}
		it.State = rc.env.stateOf(rec)
		it.Attempts = rec.AttemptCount
		if rec.State == store.StateAnswered {
			// The backend ran it: nothing to redeliver (never --force).
			it.Note = "answered: the backend ran it, though its order does not remember the event"
			continue
		}
		if rec.Notification != nil && rec.State != store.StateInFlight {
			it.Redeliver = "idemgate idempotency redeliver " + shellQuote(it.Key)
		}
	}
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
