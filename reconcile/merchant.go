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

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/keying/bill"
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
	for _, st := range []cache.State{cache.StateAnswered, cache.StateFailed, cache.StateInFlight} {
		q := cache.ListQuery{State: st, Scope: rc.opts.Scope, Since: since, Limit: 200}
		for scanned < maxJournalScan {
			page, err := rc.env.Store.List(ctx, q)
			if err != nil {
				return nil, rc.storeErr(err)
			}
			for _, r := range page.Records {
				scanned++
				order, _ := cache.OrderOf(r.Key)
				_, m, id := cache.OrderParts(order)
				if m == "" || id == "" {
					continue
				}
				if rec[m] == nil {
					rec[m] = map[string]bool{}
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
				} else if err != nil && !errors.Is(err, cache.ErrNotFound) {
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

// resolveApp tells which app_id an Alipay bill is for, whose head names
// the seller account only: merchant= when given (checked against the
// seller its notifications name), else the one app whose recorded
// notifications name the bill's seller, else the route's one pinned
// app_id, else the one app_id recorded. Ambiguous: the caller must say.
// A bill of a seller none of the scope's notifications name, when some
// name one, is refused.
func (rc *reconciler) resolveApp(ctx context.Context, sum bill.Summary) error {
	since := time.Time{}
	if !sum.From.IsZero() {
		since = sum.From.Add(-24 * time.Hour) // that day's notifications, and the late copies of the day before
	}
	rec, err := rc.recorded(ctx, since)
	if err != nil {
		return err
	}
	account := sum.Account
	var forAccount, sellers []string
	for m, accts := range rec {
		for a := range accts {
			sellers = append(sellers, a)
			if a == account {
				forAccount = append(forAccount, m)
			}
		}
	}
	slices.Sort(forAccount)
	slices.Sort(sellers)
	sellers = slices.Compact(sellers)
	if account != "" && len(sellers) > 0 && len(forAccount) == 0 {
		return errorf(http.StatusBadRequest, "this Alipay bill is seller account %s's (#账号), and the notifications scope %s recorded name seller account %s: "+
			"not reconciled against another seller's orders (the wrong bill, or another scope: scope=…)", account, rc.opts.Scope, strings.Join(sellers, ", "))
	}
	if m := rc.opts.Merchant; m != "" {
		if accts := rec[m]; account != "" && len(accts) > 0 && !accts[account] {
			return errorf(http.StatusBadRequest, "this Alipay bill is seller account %s's (#账号), and app_id %s's notifications name seller account %s: not reconciled",
				account, m, strings.Join(slices.Sorted(maps.Keys(accts)), ", "))
		}
		return nil
	}
	cands, how := forAccount, "the app_id whose notifications name the bill's seller account "+account
	if pinned := intersect(forAccount, rc.pins); len(pinned) > 0 {
		cands = pinned
	}
	if len(cands) == 0 && len(rc.pins) > 0 {
		cands, how = rc.pins, "the app_id the route pins"
	}
	if len(cands) == 0 {
		cands, how = slices.Sorted(maps.Keys(rec)), "the app_id of the notifications recorded"
	}
	switch len(cands) {
	case 1:
		rc.opts.Merchant = cands[0]
		rc.note(fmt.Sprintf("app_id %s: %s", cands[0], how))
		return nil
	case 0:
		return errorf(http.StatusBadRequest, "an Alipay bill names the seller account (%s), not the app_id of the keys, and scope %s neither pins an app_id nor has recorded a notification to tell it from: say which with merchant=<app_id>",
			orNone(account), rc.opts.Scope)
	}
	return errorf(http.StatusBadRequest, "an Alipay bill names the seller account (%s), not the app_id of the keys, and scope %s has several (%s: %s): say which with merchant=<app_id>",
		orNone(account), rc.opts.Scope, how, strings.Join(cands, ", "))
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
	return errorf(http.StatusBadRequest, "%s, and scope %s %s and has recorded nothing of %s: not reconciled, "+
		"as its payments would all read as settled, never run (the wrong bill, or another scope: scope=…)",
		what, rc.opts.Scope, seen, strings.Join(unknown, ", "))
}

// isPinned: the route pins m, or the service provider m's rows name.
func (rc *reconciler) isPinned(m string) bool {
	return slices.Contains(rc.pins, m) || rc.providers[m] != "" && slices.Contains(rc.pins, rc.providers[m])
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none in its head"
	}
	return s
}
