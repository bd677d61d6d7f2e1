package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// The search index's contract (see Searcher), on every store of
// factories.

// refsJournal is a journal whose notification names refs.
func refsJournal(refs ...string) Journal {
	return Journal{Notification: &Notification{Method: "POST", URI: "/notify", Body: []byte("out_trade_no=" + refs[0]),
		BodySize: int64(len("out_trade_no=" + refs[0])), MerchantRefs: refs},
		Attempt: &Attempt{Start: time.Now(), Outcome: AttemptAnswered, Status: 200}}
}

// search runs Search for q and returns its matches' keys.
func search(t *testing.T, s Store, q string) []Match {
	t.Helper()
	m, err := Search(ctxT(t), s, SearchQuery{Q: q})
	if err != nil {
		t.Fatalf("Search(%q): %v", q, err)
	}
	return m
}

func matchKeys(ms []Match) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Key
	}
	return out
}

// searchStore is what the search suite checks: the claim contract, which
// files keys under references as it settles, Searcher, which finds them,
// and Recovery, whose purge leaves stale entries Search drops.
type searchStore interface {
	Store
	Searcher
	Recovery
}

var searchCases = []storeCase[searchStore]{
	// A key is found by the merchant's references its notification
	// named, whether it was completed (with its order's amount), released
	// (support needs a failed key most) or left in flight; an order's
	// other events that name the same order number are found with it.
	{"search_by_ref", func(t *testing.T, s searchStore) {
		if _, ok := s.(Searcher); !ok {
			t.Fatalf("%T is no Searcher", s)
		}
		ctx := ctxT(t)
		paid := "alipay:2021:2026100322001400000000000001:paid"
		refund := "alipay:2021:2026100322001400000000000001:refund:R1"
		failed := "alipay:2021:2026100322001400000000000002:paid"
		left := "alipay:2021:2026100322001400000000000003:paid"
		run := &OrderRun{TTL: time.Hour, Amount: "9.90", Currency: "CNY", Settles: keying.SettlesPayment}
		won := claim(t, s, paid, "", longTTL, Won)
		if err := s.Complete(ctx, paid, won.Token, Answer{Status: 200, BodyCached: true, Order: run}, longTTL, refsJournal("OUT-1")); err != nil {
			t.Fatal(err)
		}
		won = claim(t, s, refund, "", longTTL, Won)
		refundRun := &OrderRun{TTL: time.Hour, Amount: "3.00", Currency: "CNY", Settles: keying.SettlesRefund}
		if err := s.Complete(ctx, refund, won.Token, Answer{Status: 200, BodyCached: true, Order: refundRun}, longTTL, refsJournal("OUT-1", "R1")); err != nil {
			t.Fatal(err)
		}
		won = claim(t, s, failed, "", longTTL, Won)
		if err := s.Release(ctx, failed, won.Token, longTTL, refsJournal("OUT-2")); err != nil {
			t.Fatal(err)
		}
		won = claim(t, s, left, "", longTTL, Won)
		if err := s.Leave(ctx, left, won.Token, longTTL, refsJournal("OUT-3")); err != nil {
			t.Fatal(err)
		}

		got := search(t, s, "OUT-1")
		if keys := matchKeys(got); len(keys) != 2 || !slices.Contains(keys, paid) || !slices.Contains(keys, refund) {
			t.Fatalf("OUT-1 finds %q, want the payment and the refund", keys)
		}
		if got[0].Key == paid {
			got[0], got[1] = got[1], got[0]
		}
		want := Match{Key: paid, State: StateAnswered, Order: "alipay:2021:2026100322001400000000000001", Event: "paid",
			Amount: "9.90", Currency: "CNY", Ref: "OUT-1"}
		if m := got[1]; m.Key != want.Key || m.State != want.State || m.Order != want.Order || m.Event != want.Event ||
			m.Amount != want.Amount || m.Currency != want.Currency || m.Ref != want.Ref || m.FromOrder || m.Changed.IsZero() {
			t.Fatalf("payment = %+v, want %+v", m, want)
		}
		if m := search(t, s, "R1"); len(m) != 1 || m[0].Key != refund || m[0].Event != "refund:R1" || m[0].Amount != "3.00" {
			t.Fatalf("R1 finds %+v", m)
		}
		// Blanks around a pasted number do not matter.
		if m := search(t, s, "  OUT-2\n"); len(m) != 1 || m[0].Key != failed || m[0].State != StateFailed || m[0].Amount != "" {
			t.Fatalf("OUT-2 finds %+v, want the failed key", m)
		}
		if m := search(t, s, "OUT-3"); len(m) != 1 || m[0].Key != left || m[0].State != StateInFlight {
			t.Fatalf("OUT-3 finds %+v, want the key left in flight", m)
		}
		if m := search(t, s, "OUT-"); len(m) != 0 {
			t.Fatalf("a part of a reference finds %+v: references match whole", m)
		}
		if _, err := Search(ctx, s, SearchQuery{Q: " "}); !errors.Is(err, ErrEmptySearch) {
			t.Fatalf("empty search: %v", err)
		}
	}},
	// A purged key's entry is stale: dropped, not shown. A reference
	// filed twice for one key (a failed copy, then its retry) is one
	// match, in the key's latest state.
	{"search_stale_and_retried", func(t *testing.T, s searchStore) {
		ctx := ctxT(t)
		gone := "wechatpay:1230000109:4200000001:paid"
		won := claim(t, s, gone, "", longTTL, Won)
		if err := s.Complete(ctx, gone, won.Token, Answer{Status: 200, BodyCached: true, Order: &OrderRun{TTL: time.Hour}}, longTTL, refsJournal("W-1")); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, gone); err != nil {
			t.Fatal(err)
		}
		if m := search(t, s, "W-1"); len(m) != 0 {
			t.Fatalf("a purged key is found: %+v", m)
		}
		retried := "wechatpay:1230000109:4200000002:paid"
		won = claim(t, s, retried, "", longTTL, Won)
		if err := s.Release(ctx, retried, won.Token, longTTL, refsJournal("W-2")); err != nil {
			t.Fatal(err)
		}
		won = claim(t, s, retried, "", longTTL, Won)
		if err := s.Complete(ctx, retried, won.Token, Answer{Status: 200, BodyCached: true, Order: &OrderRun{TTL: time.Hour, Amount: "1.00", Currency: "CNY"}}, longTTL, refsJournal("W-2")); err != nil {
			t.Fatal(err)
		}
		if m := search(t, s, "W-2"); len(m) != 1 || m[0].State != StateAnswered || m[0].Amount != "1.00" {
			t.Fatalf("W-2 finds %+v, want the key once, answered", m)
		}
		keys, err := s.(Searcher).KeysByRef(ctx, "W-2")
		if err != nil || !slices.Equal(keys, []string{retried}) {
			t.Fatalf("KeysByRef(W-2) = %q, %v: a key is filed once under a ref", keys, err)
		}
	}},
	// The index is kept as long as the order: once the key's record has
	// expired, its number still finds it, from its order.
	{"search_outlives_record", func(t *testing.T, s searchStore) {
		ctx := ctxT(t)
		key := "stripe:evt_1Search"
		won := claim(t, s, key, "", longTTL, Won)
		run := &OrderRun{TTL: time.Hour, Amount: "20.00", Currency: "USD"}
		if err := s.Complete(ctx, key, won.Token, Answer{Status: 200, BodyCached: true, Order: run}, shortTTL, refsJournal("pi_3Search", "ORDER-42")); err != nil {
			t.Fatal(err)
		}
		eventuallyWithin(t, 3*shortTTL, "the record expires", func() bool {
			_, err := s.Lookup(ctx, key)
			return errors.Is(err, ErrNotFound)
		})
		m := search(t, s, "ORDER-42")
		if len(m) != 1 || m[0].Key != key || m[0].State != StateAnswered || !m[0].FromOrder || m[0].Amount != "20.00" || m[0].Order != key || m[0].Event != "" {
			t.Fatalf("ORDER-42 finds %+v, want the key from its order", m)
		}
	}},
	// A key is found by its start too, in every state, its references'
	// matches first and never twice.
	{"search_prefix", func(t *testing.T, s searchStore) {
		ctx := ctxT(t)
		done, failed := "stripe:evt_pfx1", "stripe:evt_pfx2"
		won := claim(t, s, done, "", longTTL, Won)
		if err := s.Complete(ctx, done, won.Token, Answer{Status: 200, BodyCached: true}, longTTL, refsJournal("stripe:evt_pfx")); err != nil {
			t.Fatal(err)
		}
		won = claim(t, s, failed, "", longTTL, Won)
		if err := s.Release(ctx, failed, won.Token, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "stripe:evt_pfx3", "", longTTL, Won)
		claim(t, s, "stripe:evt_other", "", longTTL, Won)
		m := search(t, s, "stripe:evt_pfx")
		if len(m) != 3 || m[0].Key != done || m[0].Ref != "stripe:evt_pfx" {
			t.Fatalf("prefix finds %+v, want the ref's match first, then the other two", m)
		}
		if m, err := Search(ctxT(t), s, SearchQuery{Q: "stripe:evt_pfx", NoPrefix: true}); err != nil || len(m) != 1 || m[0].Key != done {
			t.Fatalf("NoPrefix finds %+v, %v: want the reference's match alone", m, err)
		}
		states := map[string]State{}
		for _, x := range m[1:] {
			states[x.Key] = x.State
		}
		if states[failed] != StateFailed || states["stripe:evt_pfx3"] != StateInFlight {
			t.Fatalf("states %v", states)
		}
	}},
	// A route with journal_body off keeps no notification: a completion
	// files its key under its order run's references.
	{"search_order_refs", func(t *testing.T, s searchStore) {
		key := "alipay:2021:2026100322001400000000000009:paid"
		run := &OrderRun{TTL: time.Hour, Amount: "5.00", Currency: "CNY", MerchantRefs: []string{"OUT-NOJOURNAL"}}
		completeRun(t, s, key, run, longTTL)
		if m := search(t, s, "OUT-NOJOURNAL"); len(m) != 1 || m[0].Key != key || m[0].Amount != "5.00" {
			t.Fatalf("OUT-NOJOURNAL finds %+v", m)
		}
	}},
}

func init() { suites = append(suites, newSuite("search", "search index", searchCases)) }

// TestNotificationMerchantRefsCodec: the references round-trip, and a
// notification without them is stored byte for byte as before.
func TestNotificationMerchantRefsCodec(t *testing.T) {
	n := &Notification{Method: "POST", URI: "/alipay/notify", Body: []byte("a=1"), BodySize: 3, Remote: "127.0.0.1:5"}
	before := encodeNotification(n)
	with := *n
	with.MerchantRefs = []string{"20260314172606001", "R1"}
	got, err := decodeNotification(encodeNotification(&with))
	if err != nil || !slices.Equal(got.MerchantRefs, with.MerchantRefs) || got.Remote != n.Remote {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	old, err := decodeNotification(before)
	if err != nil || old.MerchantRefs != nil || len(before) != len(appendRawNotification(nil, n)) {
		t.Fatalf("without refs: %+v, %v (%d bytes)", old, err, len(before))
	}
}
