package admin

import (
	"cmp"
	"context"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// The money at stake: GET /idempotency/summary[?scope=…] counts the failed,
// dead and in-flight keys and adds up their amounts per currency, the
// payments' and the refunds' apart: money the merchant received is not
// money it owes its customers, and one sum of both misleads. The
// amount is read back from each journaled notification by verifying it as
// its route does (keying's Notification.Money, judged against the first
// receipt), so only signed content counts and no store keeps more.

// SummaryView is the answer to GET /idempotency/summary.
type SummaryView struct {
	Store    string    `json:"store"`
	Scope    string    `json:"scope,omitempty"`
	Failed   StakeView `json:"failed"`
	Dead     StakeView `json:"dead"`
	InFlight StakeView `json:"in_flight"`
	// Refused counts the notifications refused before any claim in the
	// last RefusedWindow (refused.go); nil when the store keeps none.
	Refused *RefusedCount `json:"refused,omitempty"`
}

// StakeView is one state's keys: how many, and their amounts per currency
// in major units, as exact decimal strings ("120.00"): Amounts the
// payments' (and those of any other notification that names an amount),
// RefundAmounts the refunds', never added to them.
type StakeView struct {
	Count         int               `json:"count"`
	Amounts       map[string]string `json:"amounts"`
	RefundAmounts map[string]string `json:"refund_amounts"`
	// WithoutAmount counts the keys counted without an amount: their
	// notification was not kept whole (journal_body), none was kept, it
	// no longer verifies, or its platform names no amount (generic).
	WithoutAmount int `json:"without_amount,omitempty"`
	// Partial: more than MaxSummary keys, or a store error part way:
	// the figures are those of the keys read.
	Partial bool `json:"partial,omitempty"`
}

// MaxSummary bounds the keys read per state.
const MaxSummary = 10_000

func (a *AdminAPI) summary(w http.ResponseWriter, r *http.Request) error {
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	v, err := a.svc.Summary(r.Context(), ps, r.URL.Query().Get("scope"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// Summary reads the money at stake in ps (of scope, if not "").
func (s *Service) Summary(ctx context.Context, ps *app.Store, scope string) (SummaryView, error) {
	return s.SummaryUpTo(ctx, ps, scope, MaxSummary)
}

// SummaryUpTo is Summary reading at most limit keys per state (the
// console's overview, which reloads itself, reads fewer).
func (s *Service) SummaryUpTo(ctx context.Context, ps *app.Store, scope string, limit int) (SummaryView, error) {
	a := s.app
	out := SummaryView{Store: ps.ID, Scope: scope}
	for _, st := range []struct {
		state store.State
		into  *StakeView
	}{{store.StateFailed, &out.Failed}, {store.StateDead, &out.Dead}, {store.StateInFlight, &out.InFlight}} {
		recs, err := matching(ctx, a, ps, BulkRequest{State: string(st.state), Scope: scope}, limit+1)
		if err != nil && len(recs) == 0 {
			return SummaryView{}, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
		}
		*st.into = stakeOf(ctx, a, ps, recs[:min(len(recs), limit)])
		st.into.Partial = err != nil || len(recs) > limit
	}
	out.Refused = refusedCount(ctx, a, ps, scope)
	return out, nil
}

func stakeOf(ctx context.Context, a *app.App, ps *app.Store, recs []*store.Record) StakeView {
	v := StakeView{Amounts: map[string]string{}, RefundAmounts: map[string]string{}}
	payments, refunds := map[string][]string{}, map[string][]string{}
	rb := newRefundBook(a, ps)
	for _, rec := range recs {
		v.Count++
		if rec.Notification == nil {
			// Listings carry no journal: the record itself has it.
			lctx, cancel := context.WithTimeout(ctx, adminTimeout)
			full, err := ps.Lookup(lctx, rec.Key)
			cancel()
			if err == nil {
				rec = full
			}
		}
		m, refund, ok := stakeMoneyOf(ctx, a, rb, rec)
		if _, valid := new(big.Rat).SetString(m.Amount); !ok || !valid {
			v.WithoutAmount++
			continue
		}
		into := payments
		if refund {
			into = refunds
		}
		into[m.Currency] = append(into[m.Currency], m.Amount)
	}
	for cur, as := range payments {
		v.Amounts[cur] = AddDecimals(as)
	}
	for cur, as := range refunds {
		v.RefundAmounts[cur] = AddDecimals(as)
	}
	return v
}

// MoneyOf is the amount a record's notification carries, read from its
// signed content by verifying it as its route does, judged against its
// first receipt, as its event's own (a refund that names the order's
// refunded total: its increase over the order's other refunds in ps);
// false when it cannot be told (see StakeView).
func MoneyOf(ctx context.Context, a *app.App, ps *app.Store, rec *store.Record) (keying.Money, bool) {
	m, _, ok := stakeMoneyOf(ctx, a, newRefundBook(a, ps), rec)
	return m, ok
}

// stakeMoneyOf is MoneyOf, and whether the money is a refund's: the
// business event the signed content names is a refund (refund:<id>, and
// its other outcomes), or the platform says it settles as one (a Stripe
// or PayPal refund event).
func stakeMoneyOf(ctx context.Context, a *app.App, rb *refundBook, rec *store.Record) (m keying.Money, refund, ok bool) {
	got, ok := verified(ctx, a, rec)
	if !ok || got.Money.Amount == "" || got.Money.Currency == "" {
		return keying.Money{}, false, false
	}
	refund = got.Settles == keying.SettlesRefund || strings.HasPrefix(got.Event, keying.EventRefund)
	m = got.Money
	if got.RefundTotal {
		m.Amount = rb.own(ctx, rec.Key, m.Amount)
	}
	return m, refund, true
}

// verified is rec's journaled notification verified again as its route
// does, judged against its first receipt; false when it cannot be (not
// kept whole, no route, no longer verifies).
func verified(ctx context.Context, a *app.App, rec *store.Record) (*keying.Notification, bool) {
	n := rec.Notification
	if n == nil || n.Truncated() {
		return nil, false
	}
	rt, ok := routeOf(a, rec)
	if !ok || rt.Platform == nil {
		return nil, false
	}
	u, err := url.ParseRequestURI(n.URI)
	if err != nil {
		return nil, false
	}
	got, err := rt.Platform.Verify(&keying.Request{Method: n.Method, URL: u, Header: n.Header.Clone(),
		Body: n.Body, Now: rec.FirstSeen, Context: ctx})
	return got, err == nil
}

// refundBook knows, per order, the refunded totals its refunds named
// (Alipay's refund_fee): those that ran, from the order state, and those
// whose keys have a record that has not run (failed, dead, in flight),
// from their notifications. A refund's own amount is its total's
// increase over the others' (keying.RefundIncrease, as the order state
// gives the events that ran): a refund whose predecessor is not known to
// the store yet shows its increase over those known. It reads each order
// once, for a summary's or a listing's many keys.
type refundBook struct {
	app    *app.App
	ps     *app.Store
	orders map[string]map[string]string // order → key → total
}

func newRefundBook(a *app.App, ps *app.Store) *refundBook {
	return &refundBook{app: a, ps: ps, orders: map[string]map[string]string{}}
}

// own is the own amount of key's refund whose notification named total.
func (rb *refundBook) own(ctx context.Context, key, total string) string {
	order, _ := store.OrderOf(key)
	known, ok := rb.orders[order]
	if !ok {
		known = rb.read(ctx, order)
		rb.orders[order] = known
	}
	var others []string
	for k, t := range known {
		if k != key {
			others = append(others, t)
		}
	}
	own, _ := keying.RefundIncrease(total, others)
	return own
}

// refundBookLimit bounds the records of one order's keys read per state.
const refundBookLimit = 100

// read gathers order's refunds' totals, key by key.
func (rb *refundBook) read(ctx context.Context, order string) map[string]string {
	known := map[string]string{}
	if ob, err := store.As[store.OrderBook](rb.ps.Store, "order state"); err == nil {
		if o, err := ob.Order(ctx, order); err == nil {
			for _, e := range o.Events {
				if t := cmp.Or(e.RefundedTotal, e.Amount); e.Settles == keying.SettlesRefund && t != "" {
					known[e.Key] = t
				}
			}
		}
	}
	for _, st := range []store.State{store.StateInFlight, store.StateFailed} {
		page, err := rb.ps.List(ctx, store.ListQuery{State: st, Prefix: order + ":", Limit: refundBookLimit})
		if err != nil {
			continue
		}
		for _, r := range page.Records {
			if o, _ := store.OrderOf(r.Key); o != order || known[r.Key] != "" {
				continue
			}
			full, err := rb.ps.Lookup(ctx, r.Key)
			if err != nil {
				continue
			}
			if got, ok := verified(ctx, rb.app, full); ok && got.RefundTotal && got.Money.Amount != "" {
				known[r.Key] = got.Money.Amount
			}
		}
	}
	return known
}

// AddDecimals adds decimal strings exactly ("88.88" + "31.12" =
// "120.00"), keeping the most decimals any of them has; an unreadable one
// is skipped.
func AddDecimals(as []string) string {
	sum, places := new(big.Rat), 0
	for _, a := range as {
		r, ok := new(big.Rat).SetString(a)
		if !ok {
			continue
		}
		sum.Add(sum, r)
		if _, frac, found := strings.Cut(a, "."); found {
			places = max(places, len(frac))
		}
	}
	return sum.FloatString(places)
}
