package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/store"
)

// Run, not settled: what the store holds as run in the bill's period that
// no row of the bill matched, found by walking the store's day index.

// period is what "run, not settled" covers: the request's, the bill's
// own, or the whole days (in the platform's clock) of its rows.
func (rc *reconciler) period(sum bill.Summary) *PeriodView {
	switch {
	case !rc.opts.From.IsZero():
		return &PeriodView{From: rc.opts.From, To: rc.opts.To, Source: "request"}
	case !sum.From.IsZero() && sum.To.After(sum.From) && sum.To.Sub(sum.From) <= maxPeriod:
		to := sum.To
		if rc.bill.EndsInclusive {
			to = to.Add(time.Second) // a section ends at its last second (…08:59:59), inclusive
		}
		return &PeriodView{From: sum.From, To: to, Source: "bill"}
	case !rc.first.IsZero():
		z := rc.zone()
		f, l := rc.first.In(z), rc.last.In(z)
		from := time.Date(f.Year(), f.Month(), f.Day(), 0, 0, 0, 0, z)
		to := time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, z)
		return &PeriodView{From: from, To: to, Source: "rows"}
	}
	return nil
}

// walkMerchants are the merchants whose day index the period is walked
// for: the rows', merchant=, else the route's pins; "" for a platform
// whose keys name none.
func (rc *reconciler) walkMerchants() []string {
	if rc.ownEvents() {
		return []string{""}
	}
	var merchants []string
	for m := range rc.merchants {
		merchants = append(merchants, rc.keyMerchant(m))
	}
	if rc.opts.Merchant != "" && !rc.merchants[rc.opts.Merchant] {
		merchants = append(merchants, rc.opts.Merchant)
	}
	if len(merchants) == 0 {
		merchants = append(merchants, rc.pins...)
	}
	slices.Sort(merchants)
	return slices.Compact(merchants)
}

// unsettled walks the day index of the period: every payment and refund
// filed there whose platform time (or run) is inside it and that no row
// matched is run, not settled.
func (rc *reconciler) unsettled(ctx context.Context) error {
	p := rc.rep.Period
	merchants := rc.walkMerchants()
	if len(merchants) == 0 {
		rc.note("no merchant to look up (the bill has no rows): give merchant=<mchid> for run, not settled")
	}
	// From the previous bill's last minutes: what it left pending.
	for day := p.From.Add(-pendingWindow).UTC().Truncate(24 * time.Hour); day.Before(p.To); day = day.Add(24 * time.Hour) {
		for _, m := range merchants {
			q := store.RanQuery{Scope: rc.opts.Scope, Merchant: m, Day: day, Limit: batchSize}
			for {
				page, err := rc.env.Store.RanOn(ctx, q)
				if err != nil {
					return rc.storeErr(err)
				}
				if len(page.Orders) > 0 && m != "" {
					rc.indexed[m] = true
				}
				if err := rc.unsettledOrders(ctx, page.Orders); err != nil {
					return err
				}
				if page.Next == "" {
					break
				}
				q.Cursor = page.Next
			}
		}
	}
	return nil
}

func (rc *reconciler) unsettledOrders(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	orders, err := rc.orders(ctx, names)
	if err != nil {
		return err
	}
	p := rc.rep.Period
	for name, o := range orders {
		if o == nil {
			continue // forgotten (purged, order_ttl passed): a stale entry
		}
		_, km, _ := store.OrderParts(name)
		for _, ev := range o.Events {
			t := ev.Time()
			if ev.Settles == "" || t.Before(p.From.Add(-pendingWindow)) || !t.Before(p.To) {
				continue
			}
			h := rc.hash(ev.Key)
			if _, done := rc.reported[h]; done {
				continue
			}
			if _, hit := slices.BinarySearch(rc.matched, h); hit {
				continue
			}
			owner, mine, err := rc.billsOwn(ctx, km, ev)
			if err != nil {
				return err
			}
			if !mine {
				rc.foreign++
				continue
			}
			carried := t.Before(p.From)
			if carried && !rc.stillMissing(owner, ev) {
				continue // the previous bill's, settled there or judged by it
			}
			rc.reported[h] = struct{}{}
			it := Item{Order: name, Event: ev.Event, NotifiedAmount: ev.Amount, Currency: ev.Currency, Key: ev.Key, Ran: ev.Ran}
			if rc.ownEvents() {
				it.Event = keying.EventPaid
				if ev.Settles == keying.SettlesRefund {
					it.Event = keying.EventRefund
				}
				if len(ev.Refs) > 0 {
					it.Order = ev.Refs[0]
					if ev.Settles == keying.SettlesRefund {
						it.Event += ev.Refs[0]
					}
				}
			}
			if ev.Settles == keying.SettlesRefund {
				it.Note = rc.bill.RefundNote
			}
			switch {
			case carried:
				it.Note = strings.TrimSpace(fmt.Sprintf("pending since the bill that ended %s: in neither that bill nor this one. %s",
					p.From.In(rc.zone()).Format("2006-01-02 15:04"), it.Note))
			case !t.Before(p.To.Add(-pendingWindow)):
				rc.holdPending(owner, ev, it)
				continue
			}
			rc.rep.RunNotSettled.add(it, ev.Amount, rc.opts.Limit)
		}
	}
	return nil
}
