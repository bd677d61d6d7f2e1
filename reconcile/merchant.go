package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/store"
)

// Whose bill it is. A bill names its merchant — WeChat Pay each row's 商户号
// (特约商户号 for a service provider's sub-merchant), Alipay the seller
// account in its head (#账号, the notify's seller_id + "0156") — and a
// bill of a merchant the scope neither pins nor has ever seen would report
// every payment of it as settled, never run, against someone else's
// orders: it is refused (400, naming both), never reconciled.
//
// What the scope has seen: the merchants of the orders the bill's rows
// found, of the day index of its period, and of the records its journal
// keeps (their keys name the merchant; an Alipay notify's body its
// seller_id), read in a bounded scan.

// maxSellerLookups bounds the journaled notifications read for their
// seller account, per reconciliation.
const maxSellerLookups = 200

// recorded is what the scope's journal shows: each merchant its keys
// name, with the bill accounts their notifications name (Alipay's seller).
type recorded map[string]map[string]bool

// recorded scans the scope's records that entered their state since
// (zero: all), at most maxJournalScan of them, once per reconciliation.
func (rc *reconciler) recorded(ctx context.Context, since time.Time) (recorded, error) {
	if rc.rec != nil {
		return rc.rec, nil
	}
	rec := recorded{}
	account := rc.bill.Account
	scanned, lookups := 0, 0
	for _, st := range []store.State{store.StateAnswered, store.StateFailed, store.StateInFlight} {
		q := store.ListQuery{State: st, Scope: rc.opts.Scope, Since: since, Limit: 200}
		for scanned < maxJournalScan {
			page, err := rc.env.Store.List(ctx, q)
			if err != nil {
				return nil, rc.storeErr(err)
			}
			for _, r := range page.Records {
				scanned++
				order, _ := store.OrderOf(r.Key)
				_, m, id := store.OrderParts(order)
				if m == "" || id == "" {
					continue
				}
				if rec[m] == nil {
					rec[m] = map[string]bool{}
				}
				if rc.underProvider(m) {
					// The sub-merchant its notification names is seen.
					if lookups >= maxSellerLookups {
						continue
					}
					lookups++
					full, err := rc.env.Store.Lookup(ctx, r.Key)
					if err == nil && full.Notification != nil {
						if sub := rc.bill.SubMerchant(full.Notification.Body); sub != "" && rec[sub] == nil {
							rec[sub] = map[string]bool{}
						}
					} else if err != nil && !errors.Is(err, store.ErrNotFound) {
						return nil, rc.storeErr(err)
					}
					continue
				}
				// One seller account a merchant is enough to tell it by.
				if account == nil || len(rec[m]) > 0 || lookups >= maxSellerLookups {
					continue
				}
				lookups++
				full, err := rc.env.Store.Lookup(ctx, r.Key)
				if err == nil && full.Notification != nil {
					if a := account(full.Notification.Body); a != "" {
						rec[m][a] = true
					}
				} else if err != nil && !errors.Is(err, store.ErrNotFound) {
					return nil, rc.storeErr(err)
				}
			}
			if page.Next == "" {
				break
			}
			q.Cursor = page.Next
		}
	}
	rc.rec = rec
	return rec, nil
}

// resolveApp tells which merchant a bill that names the seller account
// only is for (Alipay's: which app_id), as its platform's
// bill.Traits.SellerMerchant says from what the scope recorded.
func (rc *reconciler) resolveApp(ctx context.Context, sum bill.Summary) error {
	since := time.Time{}
	if !sum.From.IsZero() {
		since = sum.From.Add(-24 * time.Hour) // that day's notifications, and the late copies of the day before
	}
	rec, err := rc.recorded(ctx, since)
	if err != nil {
		return err
	}
	if rc.bill.SellerMerchant == nil {
		return nil
	}
	got, err := rc.bill.SellerMerchant(bill.Sellers{Account: sum.Account, Scope: rc.opts.Scope,
		Merchant: rc.opts.Merchant, Pins: rc.pins, Recorded: rec})
	switch {
	case err != nil:
		return errorf(http.StatusBadRequest, "%v", err)
	case got.Untold != nil:
		// Nothing recorded (the bill is older than the records' ttl):
		// the orders its rows name, kept for order_ttl, tell (appFromOrders).
		rc.appUntold = errorf(http.StatusBadRequest, "%v", got.Untold)
	case got.Merchant != "":
		rc.opts.Merchant = got.Merchant
		rc.note(got.Note)
	}
	return nil
}

// maxOrderLookups bounds the rows whose merchant's order number is
// looked up to tell an Alipay bill's app from its orders.
const maxOrderLookups = 50

// appFromOrders tells an Alipay bill's app when no record does (their
// ttl passed, the orders' has not): the app_id of the orders its first
// rows name, found by the merchant's order number (out_trade_no, filed
// for search for order_ttl) and checked against the row's trade_no. One
// app: it; none or several: the caller must say (rc.appUntold).
func (rc *reconciler) appFromOrders(ctx context.Context, rows []bill.Row) error {
	untold := rc.appUntold
	rc.appUntold = nil
	sr, ok := rc.env.Store.(store.Searcher)
	if !ok {
		return untold
	}
	apps := map[string]bool{}
	lookups := 0
	for _, row := range rows {
		if row.MerchantOrder == "" || row.Order == "" {
			continue
		}
		if lookups == maxOrderLookups {
			break
		}
		lookups++
		keys, err := sr.KeysByRef(ctx, row.MerchantOrder)
		if errors.Is(err, store.ErrNoExtension) {
			return untold
		}
		if err != nil {
			return rc.storeErr(err)
		}
		var names []string
		for _, k := range keys {
			order, _ := store.OrderOf(k)
			if scope, m, id := store.OrderParts(order); scope == rc.opts.Scope && m != "" && id == row.Order {
				names = append(names, order)
			}
		}
		if len(names) == 0 {
			continue
		}
		orders, err := rc.orders(ctx, names)
		if err != nil {
			return err
		}
		for n, o := range orders {
			if o != nil && len(o.Events) > 0 {
				_, m, _ := store.OrderParts(n)
				apps[m] = true
			}
		}
	}
	switch len(apps) {
	case 0:
		return untold
	case 1:
		for m := range apps {
			rc.opts.Merchant = m
			rc.note(fmt.Sprintf("app_id %s: the app_id of the orders the bill's rows name (no notification of the scope is recorded any more: their ttl passed)", m))
		}
		return nil
	}
	return errorf(http.StatusBadRequest, "an Alipay bill names the seller account, not the app_id of the keys, and the orders its rows name are of several apps (%s): say which with merchant=<app_id>",
		strings.Join(slices.Sorted(maps.Keys(apps)), ", "))
}

// checkSeen refuses a bill that names a merchant the scope neither pins
// nor has seen (its rows found no order of it, its period's day index has
// none, its journal names none).
func (rc *reconciler) checkSeen(ctx context.Context) error {
	if rc.ownEvents() {
		return nil
	}
	var unknown []string
	for m := range rc.merchants {
		if !rc.isPinned(m) && !rc.found[m] && !rc.indexed[m] {
			unknown = append(unknown, m)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	since := time.Time{}
	if p := rc.rep.Period; p != nil {
		since = p.From.Add(-24 * time.Hour)
	}
	rec, err := rc.recorded(ctx, since)
	if err != nil {
		return err
	}
	unknown = slices.DeleteFunc(unknown, func(m string) bool { return rec[m] != nil })
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	seen := "has seen no merchant"
	switch {
	case len(rc.pins) > 0:
		seen = "pins " + strings.Join(rc.pins, ", ")
	case len(rec) > 0:
		seen = "has seen merchant " + strings.Join(slices.Sorted(maps.Keys(rec)), ", ")
	}
	what := "this bill is merchant " + strings.Join(unknown, ", ") + "'s"
	if rc.bill.NamesSeller {
		what = "merchant=" + strings.Join(unknown, ", ") + " names an app_id"
	}
	hint := ""
	for _, m := range unknown {
		if p := rc.under[m]; p != "" {
			hint = fmt.Sprintf("; a service provider's bill of all its sub-merchants: merchant=%s reconciles it against all the orders keyed under %s", p, p)
			break
		}
	}
	return errorf(http.StatusBadRequest, "%s, and scope %s %s and has recorded nothing of %s: not reconciled, "+
		"as its payments would all read as settled, never run (the wrong bill, or another scope: scope=…%s)",
		what, rc.opts.Scope, seen, strings.Join(unknown, ", "), hint)
}

// isPinned: the route pins m, or the service provider m's rows name —
// unless the keys name that provider and not m (WeChat Pay v2): then only
// its orders or its notifications tell that the scope has seen m.
func (rc *reconciler) isPinned(m string) bool {
	if rc.under[m] != "" {
		return false
	}
	return slices.Contains(rc.pins, m) || rc.providers[m] != "" && slices.Contains(rc.pins, rc.providers[m])
}

// A WeChat Pay v2 service provider's route that pins its own mch_id keys
// every sub-merchant's orders under it: its day index holds all of them,
// and the one of a bill is told by the sub_mch_id its record's
// notification names.

// keysUnder: the platform keys a service provider's sub-merchants'
// orders under the route's one pinned mchid (WeChat Pay v2), and that is
// provider.
func (rc *reconciler) keysUnder(provider string) bool {
	return rc.bill.SubMerchant != nil && len(rc.pins) == 1 && rc.pins[0] == provider
}

// keyMerchant is the merchant the keys of m's orders name: its provider's
// where the keys are under it, else m.
func (rc *reconciler) keyMerchant(m string) string {
	if p := rc.under[m]; p != "" {
		return p
	}
	return m
}

// underProvider: km is the provider the keys of a bill's sub-merchant
// name.
func (rc *reconciler) underProvider(km string) bool {
	for _, p := range rc.under {
		if p == km {
			return true
		}
	}
	return false
}

// billsOwn says whether ev, an event of an order keyed under km, is of a
// merchant of the bill, and of which (owner, whose pending list holds
// it): always, km's, unless km is the provider of the bill's
// sub-merchants; then the sub_mch_id of its record's notification (none:
// the provider's own payment) must be one the bill names. A record no
// longer kept cannot tell: the event counts as the bill's first
// merchant's (rc.untold).
func (rc *reconciler) billsOwn(ctx context.Context, km string, ev store.OrderEvent) (owner string, mine bool, err error) {
	if !rc.underProvider(km) {
		return km, true, nil
	}
	full, err := rc.env.Store.Lookup(ctx, ev.Key)
	switch {
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return "", false, rc.storeErr(err)
	case err != nil || full.Notification == nil:
		rc.untold++
		return rc.pendingMerchants()[0], true, nil
	}
	owner = rc.bill.SubMerchant(full.Notification.Body)
	if owner == "" {
		owner = km
	}
	return owner, rc.merchants[owner], nil
}

// noteUnder says how the provider's orders were told apart.
func (rc *reconciler) noteUnder() {
	var subs []string
	for m, p := range rc.under {
		subs = append(subs, m+" under "+p)
	}
	if len(subs) == 0 {
		return
	}
	slices.Sort(subs)
	rc.note(fmt.Sprintf("the keys name the service provider's mch_id, not the 特约商户号: orders looked up as %s; run, not settled counts a provider's order as the sub-merchant's its notification names (sub_mch_id)",
		strings.Join(subs, ", ")))
	if rc.foreign > 0 {
		rc.note(fmt.Sprintf("%d events of the provider's other sub-merchants left out of run, not settled", rc.foreign))
	}
	if rc.untold > 0 {
		rc.note(fmt.Sprintf("%d events of the provider whose record is no longer kept, so whose sub-merchant cannot be told, counted as this bill's", rc.untold))
	}
}
