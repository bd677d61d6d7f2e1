package catchup

import (
	"context"
	"errors"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
	"time"
)

// listLimit bounds the events one pass lists.
const listLimit = 1000

// events is a pass on an EventLister platform: the events of
// [now-Window, now-Grace) whose key has no record and no order event are
// missing; each is resent (or alerted) on the back-off schedule until its
// key has a record or the window passed. A failed list changes nothing.
func (e *Engine) events(ctx context.Context) error {
	now := e.cfg.Now()
	var evs []keying.PlatformEvent
	err := e.call(ctx, func(ctx context.Context) error {
		var err error
		evs, err = e.lister.Events(ctx, now.Add(-e.cfg.Window), now.Add(-e.cfg.Grace), listLimit)
		return err
	})
	if errors.Is(err, ErrCapped) {
		return nil // the cap is spent: the next pass lists
	}
	if err != nil {
		e.apiReason(err) // the Observer hears of it
		return err
	}
	for _, ev := range evs {
		if err := e.event(ctx, now, ev); err != nil {
			if errors.Is(err, ErrCapped) {
				return nil // the rest waits for the next pass, unchanged
			}
			return err
		}
	}
	return nil
}

// event handles one listed event.
func (e *Engine) event(ctx context.Context, now time.Time, ev keying.PlatformEvent) error {
	if ev.ID == "" || ev.At.After(now.Add(-e.cfg.Grace)) {
		return nil // inside grace: the platform's own retries run
	}
	key := e.cfg.Scope + ":" + ev.ID
	m, err := e.item(ctx, ev.ID)
	if err != nil {
		return err
	}
	rec, err := e.store.Lookup(ctx, key)
	switch {
	case err == nil && rec.State == store.StateAnswered:
		return e.recovered(ctx, m, key)
	case err == nil:
		return nil // it reached the gate (in flight, failed): never resent from here
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	order, event := store.OrderOf(key)
	if k, err := e.ran(ctx, order, event); err != nil || k != "" {
		if err != nil {
			return err
		}
		return e.recovered(ctx, m, k)
	}
	if !due(m, now) {
		return nil
	}
	n := store.Missing{Found: now}
	if m != nil {
		n = *m
	}
	n.Scope, n.Platform, n.ID = e.cfg.Scope, e.cfg.Platform, ev.ID
	n.MerchantRef, n.Amount, n.Currency, n.At = ev.MerchantRef, ev.Money.Amount, ev.Money.Currency, ev.At
	n.Outcome, n.Reason = OutcomeMissing, ""
	switch e.cfg.Recover {
	case RecoverResend:
		err := e.call(ctx, func(ctx context.Context) error { return e.lister.Resend(ctx, ev.ID) })
		if errors.Is(err, ErrCapped) {
			return err
		}
		n.Action = store.MissingResent
		if err != nil {
			n.Reason = e.apiReason(err)
		}
	default:
		n.Action, n.Outcome = store.MissingAlerted, OutcomeAlertOnly
	}
	n.Attempts++
	n.NextAt = next(n.Attempts, now, ev.At.Add(e.cfg.Window))
	if n.Action == store.MissingAlerted {
		n.NextAt = time.Time{} // alerted once; the record's arrival still marks it recovered
	}
	return e.put(ctx, m, n)
}
