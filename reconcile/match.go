package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/store"
)

// The matching of a bill against the store. Rows are looked up a batch at
// a time: Alipay's and WeChat Pay's by the order their key names
// (<scope>:<merchant>:<trade_no|transaction_id>, store.OrderIndex.Orders),
// Stripe's and PayPal's by the objects they name (EventsByRef, then
// Orders). Each event a row matched is kept as a 64-bit hash; after the
// last row, the day index of the bill's period (RanOn) yields every
// payment and refund that ran, and those whose hash no row left are run,
// not settled. Memory: the hashes (8 bytes a row), one batch, the items
// listed.

// batchSize rows are looked up together: one pipeline on Redis.
const batchSize = 500

// maxMerchants bounds the merchants one bill may name (WeChat Pay's 商户号
// of a service provider's sub-merchants).
const maxMerchants = 1000

type reconciler struct {
	env    *Env // the store, the routes' retry windows, the clock
	opts   Options
	preset *keying.Preset // the bill's platform
	bill   *bill.Traits   // what its bill allows for
	rep    *Report
	seed   maphash.Seed

	matched   []uint64            // hashes of the events rows matched; sorted after the last row
	reported  map[uint64]struct{} // run, not settled already listed (a day list may file an event twice)
	merchants map[string]bool     // the merchants rows named
	pins      []string            // the route's pinned merchants, for a bill without rows
	providers map[string]string   // a sub-merchant's service provider, as rows name it
	under     map[string]string   // a sub-merchant whose orders the keys name under its provider (WeChat Pay v2)
	foreign   int                 // the provider's events left out of run, not settled as another sub-merchant's
	untold    int                 // the provider's events whose sub-merchant no record tells
	found     map[string]bool     // merchants of which a row found an order
	indexed   map[string]bool     // merchants of which the period's day index has orders
	rec       recorded            // the journal's merchants, once scanned
	pending   pendingState
	appUntold error     // an Alipay bill's app, untold by records: its rows' orders may tell (appFromOrders)
	first     time.Time // the earliest and latest row times
	last      time.Time
}

func newReconciler(env *Env, opts Options) *reconciler {
	rep := &Report{Store: env.StoreID, Platform: opts.Platform, Scope: opts.Scope}
	return &reconciler{env: env, opts: opts, preset: platforms.Lookup(opts.Platform),
		bill: platforms.BillOf(opts.Platform), rep: rep, seed: maphash.MakeSeed(),
		reported: map[uint64]struct{}{}, merchants: map[string]bool{}, providers: map[string]string{}, under: map[string]string{}, found: map[string]bool{},
		indexed: map[string]bool{}}
}

// ownEvents: the platform's keys are event ids, its bill names objects.
func (rc *reconciler) ownEvents() bool {
	return rc.preset.OwnEvents
}

func (rc *reconciler) hash(key string) uint64 { return maphash.String(rc.seed, key) }

func (rc *reconciler) run(ctx context.Context, rd *bill.Reader) (*Report, error) {
	batch := make([]bill.Row, 0, batchSize)
	for {
		row, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, billErr(err)
		}
		if row.Kind != bill.Payment && row.Kind != bill.Refund {
			rc.rep.Skipped++
			continue
		}
		if !row.Time.IsZero() {
			if rc.first.IsZero() || row.Time.Before(rc.first) {
				rc.first = row.Time
			}
			if row.Time.After(rc.last) {
				rc.last = row.Time
			}
		}
		if batch = append(batch, row); len(batch) == batchSize {
			if err := rc.match(ctx, batch); err != nil {
				return nil, err
			}
			batch = batch[:0]
		}
	}
	if err := rc.match(ctx, batch); err != nil {
		return nil, err
	}
	if rc.appUntold != nil {
		return nil, rc.appUntold // no row to tell the app by
	}
	sum := rd.Summary()
	rc.rep.Bill = BillView{Layout: sum.Layout, Rows: sum.Rows, Payments: sum.Payments, Refunds: sum.Refunds,
		Others: sum.Others, Checked: sum.Checked, Account: sum.Account, From: sum.From, To: sum.To}
	if !sum.Checked {
		rc.note("the bill carries no totals to prove it whole (Stripe's exports have none): a truncated download would look like fewer rows")
	}
	slices.Sort(rc.matched)
	rc.rep.Period = rc.period(sum)
	if rc.rep.Period == nil {
		rc.note("the bill has no rows and names no period: run, not settled is not computed (give from and to)")
	} else {
		rc.loadPending(ctx)
		if err := rc.unsettled(ctx); err != nil {
			return nil, err
		}
		rc.noteUnder()
	}
	if err := rc.checkSeen(ctx); err != nil {
		return nil, err
	}
	if rc.ownEvents() {
		if err := rc.keyUnrun(ctx); err != nil {
			return nil, err
		}
	}
	if err := rc.states(ctx); err != nil {
		return nil, err
	}
	for _, c := range []*Category{&rc.rep.SettledNeverRun, &rc.rep.RunNotSettled, &rc.rep.AmountDiffers, &rc.rep.Matched, &rc.rep.PendingNextBill} {
		c.finish()
	}
	rc.savePending(ctx)
	for m := range rc.merchants {
		rc.rep.Merchant = append(rc.rep.Merchant, m)
	}
	slices.Sort(rc.rep.Merchant)
	return rc.rep, nil
}

func (rc *reconciler) note(s string) { rc.rep.Notes = append(rc.rep.Notes, s) }

func (rc *reconciler) storeErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errorf(http.StatusServiceUnavailable, "store %s: the reconciliation took longer than %v", rc.env.StoreID, Timeout)
	}
	return errorf(http.StatusServiceUnavailable, "store %s: %v", rc.env.StoreID, err)
}

// eventOf names a row's business event: paid, or refund:<id> — the id its
// notification carries (Alipay out_biz_no, WeChat Pay out_refund_no; for
// Stripe and PayPal the refund object's id).
func eventOf(row bill.Row) string {
	if row.Kind == bill.Payment {
		return keying.EventPaid
	}
	id := row.Refund
	if id == "" {
		id = row.ID
	}
	return keying.EventRefund + id
}

// merchantOf is the merchant of a row's key.
func (rc *reconciler) merchantOf(row bill.Row) (string, error) {
	m := rc.opts.Merchant
	if m != "" && row.Merchant != "" && m != row.Merchant && m != row.Provider {
		return "", errorf(http.StatusBadRequest, "%s bill, line %d: the row is merchant %s's, and merchant=%s: not reconciled against another merchant's orders",
			rc.opts.Platform, row.Line, row.Merchant, m)
	}
	if m == "" {
		m = row.Merchant
		if row.Provider != "" {
			rc.providers[m] = row.Provider
		}
	}
	if row.Provider != "" && m == row.Merchant && rc.keysUnder(row.Provider) {
		rc.under[m] = row.Provider
	}
	if m == "" {
		return "", errorf(http.StatusBadRequest, "%s bill, line %d: no merchant (商户号) on the row: give merchant=<mchid>", rc.opts.Platform, row.Line)
	}
	if !rc.merchants[m] {
		if len(rc.merchants) == maxMerchants {
			return "", errorf(http.StatusBadRequest, "%s bill, line %d: more than %d merchants in one bill", rc.opts.Platform, row.Line, maxMerchants)
		}
		rc.merchants[m] = true
	}
	return m, nil
}

// match looks a batch of rows up and files each in its category.
func (rc *reconciler) match(ctx context.Context, rows []bill.Row) error {
	if len(rows) == 0 {
		return nil
	}
	if rc.ownEvents() {
		return rc.matchByRef(ctx, rows)
	}
	if rc.appUntold != nil {
		if err := rc.appFromOrders(ctx, rows); err != nil {
			return err
		}
	}
	names, ms := make([]string, len(rows)), make([]string, len(rows))
	for i, row := range rows {
		m, err := rc.merchantOf(row)
		if err != nil {
			return err
		}
		names[i], ms[i] = store.OrderName(rc.opts.Scope, rc.keyMerchant(m), row.Order), m
	}
	orders, err := rc.orders(ctx, names)
	if err != nil {
		return err
	}
	for i, row := range rows {
		event := eventOf(row)
		key := names[i] + ":" + event
		it := Item{Order: names[i], Event: event, BillAmount: row.Amount, Currency: row.Currency, Key: key,
			Line: row.Line, BillTime: row.Time}
		ev, o := findEvent(orders[names[i]], key)
		if o != nil {
			rc.found[ms[i]] = true
		}
		if ev == nil {
			ran, err := rc.answeredRecord(ctx, key)
			if err != nil {
				return err
			}
			if ran != nil {
				rc.classify(it, row, *ran, "", ranNote)
				continue
			}
			rc.rep.SettledNeverRun.add(it, row.Amount, rc.opts.Limit)
			continue
		}
		notified, note := ev.Amount, ""
		if rc.bill.RefundIsTotal && row.Kind == bill.Refund {
			notified, note = refundOfTotal(o, ev)
		}
		rc.classify(it, row, *ev, notified, note)
	}
	return nil
}

// ranNote is an answered record's item whose order lacks its event.
const ranNote = "answered: the backend ran it, though its order did not remember the event (a settle a store outage deferred, before that settle wrote the order too); the amount was not compared"

// answeredRecord is the event key's record as an event that ran, when
// its order does not remember it but the record is answered (not
// FromOrder): an answered record of a business event means the event
// ran, and it is never "settled, never run". nil when the record is gone
// or not answered.
func (rc *reconciler) answeredRecord(ctx context.Context, key string) (*store.OrderEvent, error) {
	rec, err := rc.env.Store.Lookup(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, rc.storeErr(err)
	case rec.State != store.StateAnswered || rec.FromOrder:
		return nil, nil
	}
	if rc.env.Repair != nil {
		// Written back into its order from the record: the day index,
		// the next reconciliation and every surface read it from there.
		rc.env.Repair(ctx, rec)
	}
	return &store.OrderEvent{Key: key, Ran: rec.Changed}, nil
}

// orders reads the states of names (once each) in one batch.
func (rc *reconciler) orders(ctx context.Context, names []string) (map[string]*store.Order, error) {
	uniq := slices.Clone(names)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	os, err := rc.env.Store.Orders(ctx, uniq)
	if err != nil {
		return nil, rc.storeErr(err)
	}
	out := make(map[string]*store.Order, len(uniq))
	for i, n := range uniq {
		out[n] = os[i]
	}
	return out, nil
}

// findEvent is key's event in o, if it ran.
func findEvent(o *store.Order, key string) (*store.OrderEvent, *store.Order) {
	if o == nil {
		return nil, nil
	}
	for i := range o.Events {
		if o.Events[i].Key == key {
			return &o.Events[i], o
		}
	}
	return nil, o
}

// refundOfTotal is what a refund's notification says this refund was
// where it names the order's refunded total (bill.Traits.RefundIsTotal).
// Alipay's refund_fee is the trade's cumulative refunded amount, which only
// grows: the refund's own amount is its increase over the order's other
// refunds that ran (keying.RefundIncrease, as the order state gives every
// surface; an event kept before the order state told a total apart has
// its total as Amount) — whatever order the notifications arrived in.
// Exact when every earlier refund of the trade ran here; one that never
// did shows as an amount difference of the next.
func refundOfTotal(o *store.Order, ev *store.OrderEvent) (string, string) {
	total := cmp.Or(ev.RefundedTotal, ev.Amount)
	if total == "" {
		return "", "the refund's notification named no refund_fee"
	}
	own, before := keying.RefundIncrease(total, store.RefundTotals(o.Events, ev.Key))
	if before == "" {
		return own, ""
	}
	prevEvent := ""
	for _, e := range o.Events {
		if e.Key != ev.Key && e.Settles == keying.SettlesRefund && cmp.Or(e.RefundedTotal, e.Amount) == before {
			prevEvent = e.Event
			break
		}
	}
	return own, fmt.Sprintf("refund_fee %s is the trade's refunded total: less %s of %s", total, before, prevEvent)
}

// classify files a row whose event ran: matched, or amount differs.
func (rc *reconciler) classify(it Item, row bill.Row, ev store.OrderEvent, notified, note string) {
	rc.matched = append(rc.matched, rc.hash(ev.Key))
	it.Key, it.NotifiedAmount, it.Ran, it.Note = ev.Key, notified, ev.Ran, note
	if ev.Via != "" {
		// `return business`: the browser's return ran the payment, and
		// the platform's notify was answered from it, never forwarded.
		it.Note = strings.TrimSpace(it.Note + " ran via " + ev.Via + "; the notify was answered from it")
	}
	if notified == "" {
		if it.Note == "" {
			it.Note = "the notification named no amount: not compared"
		}
		rc.rep.Matched.add(it, row.Amount, rc.matchedLimit())
		return
	}
	c, ok := cmpDecimal(row.Amount, notified)
	if !ok || c != 0 || ev.Currency != "" && !strings.EqualFold(ev.Currency, row.Currency) {
		if ev.Currency != "" && !strings.EqualFold(ev.Currency, row.Currency) {
			it.Note = strings.TrimSpace(it.Note + " notified in " + ev.Currency)
		} else if d, ok := subDecimal(row.Amount, notified); ok {
			it.Difference = d
		}
		// The category's totals are the gaps, not the bill's amounts;
		// one that is no amount adds nothing.
		rc.rep.AmountDiffers.add(it, it.Difference, rc.opts.Limit)
		return
	}
	rc.rep.Matched.add(it, row.Amount, rc.matchedLimit())
}

// matchedLimit lists matched items only when asked (?items=1).
func (rc *reconciler) matchedLimit() int {
	if rc.opts.Matched {
		return rc.opts.Limit
	}
	return 0
}

// refsOf are the objects a Stripe or PayPal row names, and the kind of
// event that names them.
func refsOf(row bill.Row) (keying.Settlement, []string) {
	var refs []string
	add := func(r string) {
		if r != "" && !slices.Contains(refs, r) {
			refs = append(refs, r)
		}
	}
	if row.Kind == bill.Payment {
		add(row.Order)
		add(row.PaymentIntent)
		return keying.SettlesPayment, refs
	}
	add(row.Refund)
	add(row.Order) // a Dashboard export names the charge; charge.refunded names it too
	return keying.SettlesRefund, refs
}

// matchByRef matches Stripe's and PayPal's rows through the ref index.
func (rc *reconciler) matchByRef(ctx context.Context, rows []bill.Row) error {
	var refs [2][]string // payments', refunds'
	for _, row := range rows {
		kind, rs := refsOf(row)
		k := 0
		if kind == keying.SettlesRefund {
			k = 1
		}
		refs[k] = append(refs[k], rs...)
	}
	byRef := [2]map[string][]string{{}, {}}
	var keys []string
	for k, kind := range []keying.Settlement{keying.SettlesPayment, keying.SettlesRefund} {
		if len(refs[k]) == 0 {
			continue
		}
		slices.Sort(refs[k])
		refs[k] = slices.Compact(refs[k])
		found, err := rc.env.Store.EventsByRef(ctx, rc.opts.Scope, kind, refs[k])
		if err != nil {
			return rc.storeErr(err)
		}
		for i, r := range refs[k] {
			byRef[k][r] = found[i]
			keys = append(keys, found[i]...)
		}
	}
	orders, err := rc.orders(ctx, keys)
	if err != nil {
		return err
	}
	for _, row := range rows {
		kind, rs := refsOf(row)
		k := 0
		if kind == keying.SettlesRefund {
			k = 1
		}
		it := Item{Order: rs[0], Event: eventOf(row), BillAmount: row.Amount, Currency: row.Currency, Line: row.Line, BillTime: row.Time}
		if row.Kind == bill.Payment {
			it.Order = row.Order
		}
		// Every event that named one of the row's objects and ran: each
		// is this row's (a payment intent's event and its charge's).
		var ran []store.OrderEvent
		for _, r := range rs {
			for _, key := range byRef[k][r] {
				if ev, _ := findEvent(orders[key], key); ev != nil && !slices.ContainsFunc(ran, func(e store.OrderEvent) bool { return e.Key == key }) {
					ran = append(ran, *ev)
				}
			}
		}
		if len(ran) == 0 {
			it.refs = rs
			rc.rep.SettledNeverRun.add(it, row.Amount, rc.opts.Limit)
			continue
		}
		best := ran[0]
		for _, ev := range ran {
			if c, ok := cmpDecimal(row.Amount, ev.Amount); ok && c == 0 {
				best = ev
			}
		}
		for _, ev := range ran {
			if ev.Key != best.Key {
				rc.matched = append(rc.matched, rc.hash(ev.Key))
			}
		}
		notified, note := best.Amount, ""
		if row.Kind == bill.Refund && len(best.Refs) > 0 && isCharge(best.Refs[0]) {
			notified, note = "", "the event names the charge (charge.refunded), which each of its refunds names too: the refund's amount is not compared"
		}
		rc.classify(it, row, best, notified, note)
	}
	return nil
}

// isCharge: a Stripe object id of a charge or a payment.
func isCharge(id string) bool { return strings.HasPrefix(id, "ch_") || strings.HasPrefix(id, "py_") }

// zone is the clock of the platform's bill days.
func (rc *reconciler) zone() *time.Location {
	if z := rc.bill.Zone; z != nil {
		return z
	}
	return time.UTC
}
