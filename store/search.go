package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
)

// Search: an order as the customer names it. A key is the platform's
// name of an event (Alipay's trade_no, Stripe's event id); the customer,
// and so support, quotes the merchant's own order number (out_trade_no),
// a refund number, or a Stripe or PayPal object id. A notification names
// them in its signed content (Notification.MerchantRefs), and a store
// that is a Searcher files the key under each of them when the key is
// settled — completed, released or left — in the same store operation
// (no extra round trip; on Redis in the settling script on a single
// server, beside it in the same pipeline on Cluster, as the order
// indexes are). An entry is kept for the order's ttl when the completion
// names an order (Answer.Order), else for the record's ttl, and never
// shortened by a later settle. Entries are not removed by a purge or a
// reopen: Search checks each against the record, or the order once the
// record is gone, and drops the stale ones.

// Searcher is the search index, a feature of the memory, embedded and
// Redis stores apart from the claim contract (Store): only the operator
// searches; callers check for it with a type assertion.
type Searcher interface {
	// KeysByRef returns the full keys filed under ref (an exact match),
	// at most MaxSearch of them; stale ones may be among them.
	KeysByRef(ctx context.Context, ref string) ([]string, error)
}

// MaxSearch bounds the matches of one search, and the keys one ref
// returns.
const MaxSearch = 100

// maxPrefixPages bounds the List pages one prefix search reads per state:
// a prefix that matches nothing must not walk a whole large store.
const maxPrefixPages = 20

// ErrEmptySearch: a search for nothing.
var ErrEmptySearch = errors.New("store: search text is empty")

// SearchQuery is what Search looks for.
type SearchQuery struct {
	// Q is a merchant's reference (exact) or the start of a key.
	Q string
	// Limit bounds the matches (default and at most MaxSearch).
	Limit int
	// NoPrefix skips the key prefix search: text that cannot start a key
	// (no scope starts with it) would only walk the listings for nothing.
	NoPrefix bool
	// Window is a key's platform retry window, for the dead state (see
	// ListQuery.Window); Now the clock (zero: time.Now()).
	Window func(key string) time.Duration
	Now    time.Time
}

// Match is one key Search found.
type Match struct {
	Key   string `json:"key"`
	State State  `json:"state"`
	// Order and Event are the key's order and its business event there
	// (OrderOf): an order's other events are found by its number too.
	Order string `json:"order"`
	Event string `json:"event,omitempty"`
	// Amount and Currency are what the order remembers the event ran
	// with; "" when it did not run (yet) or named none.
	Amount   string `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	// Ref is the merchant's reference the key was found by, "" for a key
	// found by its prefix.
	Ref string `json:"ref,omitempty"`
	// FromOrder: the key's record is gone (its ttl passed); its order
	// remembers that it ran.
	FromOrder bool `json:"from_order,omitempty"`
	// Changed is when the key entered its state (when it ran, for
	// FromOrder).
	Changed time.Time `json:"changed"`
}

// Search finds the keys a merchant's reference names (when s is a
// Searcher) and the keys that start with q.Q, in every state, the
// reference's first, each newest first.
func Search(ctx context.Context, s Store, q SearchQuery) ([]Match, error) {
	// An order number pasted from a chat or a mail often carries blanks.
	if q.Q = strings.TrimSpace(q.Q); q.Q == "" {
		return nil, ErrEmptySearch
	}
	if q.Limit <= 0 || q.Limit > MaxSearch {
		q.Limit = MaxSearch
	}
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	window := func(key string) time.Duration {
		if q.Window == nil {
			return 0
		}
		return q.Window(key)
	}
	ls, err := As[Lister](s, "listings")
	if err != nil {
		return nil, err
	}
	ob, err := As[OrderBook](s, "order state")
	if err != nil {
		return nil, err
	}
	ox, err := As[OrderIndex](s, "order index")
	if err != nil {
		return nil, err
	}
	var byRef, byPrefix []Match
	seen := map[string]bool{}
	if sr, ok := s.(Searcher); ok {
		keys, err := sr.KeysByRef(ctx, q.Q)
		if err != nil {
			return nil, err
		}
		for _, key := range keys {
			if seen[key] {
				continue
			}
			seen[key] = true
			m, ok, err := refMatch(ctx, s, ob, key, q.Q, q.Now, window(key))
			if err != nil {
				return nil, err
			}
			if ok {
				byRef = append(byRef, m)
			}
		}
	}
	for _, st := range []State{StateInFlight, StateAnswered, StateFailed} {
		if q.NoPrefix {
			break
		}
		cursor := ""
		for page := 0; page < maxPrefixPages && len(byPrefix) < q.Limit; page++ {
			// No Window: dead keys are failed ones here, told apart below.
			p, err := ls.List(ctx, ListQuery{State: st, Prefix: q.Q, Limit: q.Limit, Cursor: cursor, Now: q.Now})
			if err != nil {
				return nil, err
			}
			for _, r := range p.Records {
				if !seen[r.Key] {
					seen[r.Key] = true
					byPrefix = append(byPrefix, recordMatch(r, q.Now, window(r.Key)))
				}
			}
			if cursor = p.Next; cursor == "" {
				break
			}
		}
	}
	newest := func(a, b Match) int { return b.Changed.Compare(a.Changed) }
	slices.SortStableFunc(byRef, newest)
	slices.SortStableFunc(byPrefix, newest)
	out := append(byRef, byPrefix...)
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, amounts(ctx, ox, out)
}

// refMatch checks a key filed under ref against the store: its record,
// whose notification must name ref (one kept from before references
// were filed names none, and is taken), or else its order's event. ok is
// false for a stale entry (purged, reopened and expired, or gone).
func refMatch(ctx context.Context, s Store, ob OrderBook, key, ref string, now time.Time, window time.Duration) (Match, bool, error) {
	rec, err := s.Lookup(ctx, key)
	switch {
	case err == nil:
		if n := rec.Notification; n != nil && len(n.MerchantRefs) > 0 && !slices.Contains(n.MerchantRefs, ref) {
			return Match{}, false, nil
		}
		m := recordMatch(rec, now, window)
		m.Ref = ref
		return m, true, nil
	case !errors.Is(err, ErrNotFound):
		return Match{}, false, err
	}
	order, event := OrderOf(key)
	o, err := ob.Order(ctx, order)
	if errors.Is(err, ErrNotFound) {
		return Match{}, false, nil
	}
	if err != nil {
		return Match{}, false, err
	}
	for _, ev := range o.Events {
		if ev.Key == key {
			return Match{Key: key, State: StateAnswered, Order: order, Event: event, Ref: ref, FromOrder: true, Changed: ev.Ran,
				Amount: ev.Amount, Currency: ev.Currency}, true, nil
		}
	}
	return Match{}, false, nil
}

func recordMatch(r *Record, now time.Time, window time.Duration) Match {
	order, event := OrderOf(r.Key)
	return Match{Key: r.Key, State: r.StateAt(now, window), Order: order, Event: event, Changed: r.Changed}
}

// amounts fills in what each match's order remembers its event ran with,
// reading the orders in one batch (one round trip on Redis).
func amounts(ctx context.Context, s OrderIndex, ms []Match) error {
	var names []string
	for _, m := range ms {
		if m.Amount == "" && !slices.Contains(names, m.Order) {
			names = append(names, m.Order)
		}
	}
	if len(names) == 0 {
		return nil
	}
	orders, err := s.Orders(ctx, names)
	if err != nil {
		return err
	}
	for i := range ms {
		j := slices.Index(names, ms[i].Order)
		if j < 0 || orders[j] == nil {
			continue
		}
		for _, ev := range orders[j].Events {
			if ev.Key == ms[i].Key {
				ms[i].Amount, ms[i].Currency = ev.Amount, ev.Currency
			}
		}
	}
	return nil
}

// searchTTL is how long a settle keeps its key's search entries: the
// order's ttl when it names one, else the record's.
func searchTTL(ttl time.Duration, run *OrderRun) time.Duration {
	if run != nil && run.TTL > ttl {
		return run.TTL
	}
	return ttl
}

// searchRefs are the references a settle files its key under: its
// journal's notification's, and a completion's order run's.
func searchRefs(j Journal, runs ...*OrderRun) []string {
	var refs []string
	if j.Notification != nil {
		refs = j.Notification.MerchantRefs
	}
	for _, r := range runs {
		if r == nil {
			continue
		}
		for _, ref := range r.MerchantRefs {
			if !slices.Contains(refs, ref) {
				refs = append(slices.Clip(refs), ref)
			}
		}
	}
	return refs
}
