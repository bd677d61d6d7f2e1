package admin

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/internal/registry"
	"github.com/idemgate/idemgate/keying"
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
	v, err := Summary(r.Context(), a.app, ps, r.URL.Query().Get("scope"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// Summary reads the money at stake in ps (of scope, if not "").
func Summary(ctx context.Context, app *registry.App, ps *registry.Store, scope string) (SummaryView, error) {
	return SummaryUpTo(ctx, app, ps, scope, MaxSummary)
}

// SummaryUpTo is Summary reading at most limit keys per state (the
// console's overview, which reloads itself, reads fewer).
func SummaryUpTo(ctx context.Context, app *registry.App, ps *registry.Store, scope string, limit int) (SummaryView, error) {
	out := SummaryView{Store: ps.ID, Scope: scope}
	for _, st := range []struct {
		state cache.State
		into  *StakeView
	}{{cache.StateFailed, &out.Failed}, {cache.StateDead, &out.Dead}, {cache.StateInFlight, &out.InFlight}} {
		recs, err := matching(ctx, app, ps, BulkRequest{State: string(st.state), Scope: scope}, limit+1)
		if err != nil && len(recs) == 0 {
			return SummaryView{}, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
		}
		*st.into = stakeOf(ctx, app, ps, recs[:min(len(recs), limit)])
		st.into.Partial = err != nil || len(recs) > limit
	}
	out.Refused = refusedCount(ctx, app, ps, scope)
	return out, nil
}

func stakeOf(ctx context.Context, app *registry.App, ps *registry.Store, recs []*cache.Record) StakeView {
	v := StakeView{Amounts: map[string]string{}, RefundAmounts: map[string]string{}}
	payments, refunds := map[string][]string{}, map[string][]string{}
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
		m, refund, ok := stakeMoneyOf(ctx, app, rec)
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
// first receipt; false when it cannot be told (see StakeView).
func MoneyOf(ctx context.Context, app *registry.App, rec *cache.Record) (keying.Money, bool) {
	m, _, ok := stakeMoneyOf(ctx, app, rec)
	return m, ok
}

// stakeMoneyOf is MoneyOf, and whether the money is a refund's: the
// business event the signed content names is a refund (refund:<id>, and
// its other outcomes), or the platform says it settles as one (a Stripe
// or PayPal refund event).
func stakeMoneyOf(ctx context.Context, app *registry.App, rec *cache.Record) (m keying.Money, refund, ok bool) {
	n := rec.Notification
	if n == nil || n.Truncated() {
		return keying.Money{}, false, false
	}
	rt, ok := routeOf(app, rec)
	if !ok || rt.Platform == nil {
		return keying.Money{}, false, false
	}
	u, err := url.ParseRequestURI(n.URI)
	if err != nil {
		return keying.Money{}, false, false
	}
	got, err := rt.Platform.Verify(&keying.Request{Method: n.Method, URL: u, Header: n.Header.Clone(),
		Body: n.Body, Now: rec.FirstSeen, Context: ctx})
	if err != nil || got.Money.Amount == "" || got.Money.Currency == "" {
		return keying.Money{}, false, false
	}
	refund = got.Settles == keying.SettlesRefund || strings.HasPrefix(got.Event, keying.EventRefund)
	return got.Money, refund, true
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
