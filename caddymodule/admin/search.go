package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

// Search (GET /idempotency/search?q=<text>): an order as the customer
// names it. The merchant's own order number (out_trade_no), a refund's
// (out_biz_no, out_refund_no), a Stripe or PayPal object id finds the
// keys whose notifications signed it (store.Searcher); any text finds the
// keys that start with it, in every state.

// SearchView is the answer to GET /idempotency/search.
type SearchView struct {
	Store   string        `json:"store"`
	Q       string        `json:"q"`
	Matches []store.Match `json:"matches"`
}

func (a *AdminAPI) search(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := store.MaxSearch
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return apiError(http.StatusBadRequest, fmt.Errorf("limit must be a positive number, not %q", s))
		}
		limit = min(n, store.MaxSearch)
	}
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	v, err := a.svc.Search(ctx, ps, q.Get("q"), limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// Search finds the keys text names in ps: by a merchant's reference, then
// by key prefix (store.Search), at most limit of them.
func (s *Service) Search(ctx context.Context, ps *app.Store, text string, limit int) (SearchView, error) {
	a := s.app
	out := SearchView{Store: ps.ID, Q: text, Matches: []store.Match{}}
	q := store.SearchQuery{Q: text, Limit: limit, Window: a.WindowOf, Now: a.Now(), NoPrefix: !mayStartKey(strings.TrimSpace(text), a.ScopeNames())}
	m, err := store.Search(ctx, ps.Store, q)
	switch {
	case errors.Is(err, store.ErrEmptySearch):
		return out, apiError(http.StatusBadRequest, errors.New("search for what? ?q=<the merchant's order number (out_trade_no), a refund number, a Stripe or PayPal id, or the start of a key>"))
	case err != nil:
		return out, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
	}
	// A key whose event has not run (failed, in flight) has no amount in
	// its order: its notification's signed content names it (MoneyOf),
	// a refund's orders read once for all the matches. A key in flight
	// reads as on its page (StateOf: an async key's queued, retrying or
	// delivering).
	rb := newRefundBook(a, ps)
	for i := range m {
		inFlight := m[i].State == store.StateInFlight
		if (m[i].Amount != "" || m[i].FromOrder) && !inFlight {
			continue
		}
		rec, err := ps.Lookup(ctx, m[i].Key)
		if err != nil {
			continue
		}
		if inFlight {
			m[i].State = store.State(StateOf(a, rec).State)
		}
		if m[i].Amount == "" && m[i].State == store.StateAnswered && RepairOrderEvent(ctx, a, ps, rec) {
			// An answered record whose order lacked its event, written
			// back: the order now has its money, if the notification named it.
			if money, _, ok := stakeMoneyOf(ctx, a, rb, rec); ok {
				m[i].Amount, m[i].Currency = money.Amount, money.Currency
			}
			continue
		}
		if m[i].Amount == "" && !m[i].FromOrder {
			if money, _, ok := stakeMoneyOf(ctx, a, rb, rec); ok {
				m[i].Amount, m[i].Currency = money.Amount, money.Currency
			}
		}
	}
	m = typesAndPayments(ctx, a, ps, strings.TrimSpace(text), m, limit)
	if m != nil {
		out.Matches = m
	}
	return out, nil
}

// mayStartKey tells whether text may be the start of a key: every key is
// "<scope>:…", so text with a ":" may, and text without one only when a
// loaded scope starts with it. An order number (no ":") is then looked up
// by reference alone, and the key listings are not walked for it.
func mayStartKey(text string, scopes []string) bool {
	if strings.Contains(text, ":") {
		return true
	}
	for _, s := range scopes {
		if strings.HasPrefix(s, text) {
			return true
		}
	}
	return false
}
