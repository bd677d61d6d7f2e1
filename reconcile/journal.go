package reconcile

import (
	"context"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/store"
)

// Stripe's and PayPal's bill rows name objects, and their events are found
// through the ref index, which files an event once it has run. For a row
// settled but never run, its event — failed, or still at the backend — is
// found the way an operator would: among the scope's failed and in-flight
// records, by the objects their journaled notifications name.

// maxJournalScan bounds the records looked at per reconciliation.
const maxJournalScan = 2000

// keyUnrun gives the listed settled-never-run items of Stripe and PayPal
// the key of a record whose notification names their object.
func (rc *reconciler) keyUnrun(ctx context.Context) error {
	items := rc.rep.SettledNeverRun.Items
	want := map[string]int{}
	for i, it := range items {
		if it.Key == "" {
			for _, r := range it.refs {
				want[r] = i
			}
		}
	}
	scanned := 0
	for _, st := range []store.State{store.StateFailed, store.StateInFlight} {
		q := store.ListQuery{State: st, Scope: rc.opts.Scope, Limit: 200}
		for len(want) > 0 && scanned < maxJournalScan {
			page, err := rc.env.Store.List(ctx, q)
			if err != nil {
				return rc.storeErr(err)
			}
			for _, rec := range page.Records {
				if scanned++; scanned > maxJournalScan {
					break
				}
				full, err := rc.env.Store.Lookup(ctx, rec.Key)
				if err != nil || full.Notification == nil {
					continue // gone since the listing, or nothing journaled
				}
				for _, r := range billRefs(rc.bill, full.Notification.Body) {
					if i, ok := want[r]; ok {
						items[i].Key = rec.Key
						for _, other := range items[i].refs {
							delete(want, other)
						}
					}
				}
			}
			if page.Next == "" {
				break
			}
			q.Cursor = page.Next
		}
	}
	return nil
}

// billRefs are the objects a notification body names, as the bill b
// names them: the Refs its Notification would carry whatever its type (a
// journaled body, verified when it arrived, of an event that never ran:
// reconciliation finds it by the object its bill row names). nil for a
// platform whose key names the order, or a body that is not JSON.
func billRefs(b *bill.Traits, body []byte) []string {
	if b == nil || len(b.RefPaths) == 0 {
		return nil
	}
	return keying.RefsAt(keying.NewFields(&keying.Request{Body: body}), b.RefPaths, nil)
}
