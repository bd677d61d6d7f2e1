package admin

import (
	"context"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// RepairOrderEvent writes rec's business event back into its order when
// rec is answered and its order lacks the event (store.OrderRepairer): a
// settle a store outage deferred stored the record alone. The order gets
// what the record's route's settle writes (app.Route.OrderRun): the
// event's money, platform time and references from the journaled
// notification, verified as its route does (without them when it cannot
// be read: a cut body, journal_body off), ran when the record was
// answered. The order page, reconciliation's look-up and search call it
// on what they read; a store error leaves the order as it was (they show
// the event as run anyway). repaired: it wrote.
func RepairOrderEvent(ctx context.Context, a *app.App, ps *app.Store, rec *store.Record) bool {
	if rec == nil || rec.State != store.StateAnswered || rec.FromOrder {
		return false
	}
	rs, err := store.As[store.OrderRepairer](ps.Store, "order repair")
	if err != nil {
		return false
	}
	rt, ok := routeOf(a, rec)
	if !ok || rt.OrderRun == nil {
		return false
	}
	n, ok := verified(ctx, a, rec)
	if !ok {
		n = &keying.Notification{}
	}
	run := rt.OrderRun(rec.Key, n)
	if run == nil {
		return false
	}
	done, err := rs.RepairOrderEvent(ctx, rec.Key, run)
	return err == nil && done
}
