package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// The reconciliation indexes' contract (see OrderIndex), on every store of
// factories.

// completeRun claims key and completes it with run.
func completeRun(t *testing.T, s Store, key string, run *OrderRun, ttl time.Duration) {
	t.Helper()
	won := claim(t, s, key, "", longTTL, Won)
	if err := s.Complete(ctxT(t), key, won.Token, Answer{Status: 200, BodyCached: true, Order: run}, ttl, Journal{}); err != nil {
		t.Fatal(err)
	}
}

// ranOn is every order RanOn lists for scope, merchant and day, following
// the pages of limit entries.
func ranOn(t *testing.T, s OrderIndex, scope, merchant string, day time.Time, limit int) []string {
	t.Helper()
	var out []string
	q := RanQuery{Scope: scope, Merchant: merchant, Day: day, Limit: limit}
	for pages := 0; ; pages++ {
		p, err := s.RanOn(ctxT(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if limit > 0 && len(p.Orders) > limit {
			t.Fatalf("a page of %d orders, limit %d", len(p.Orders), limit)
		}
		out = append(out, p.Orders...)
		if p.Next == "" {
			return out
		}
		if pages > 100 {
			t.Fatal("RanOn never ends")
		}
		q.Cursor = p.Next
	}
}

// indexStore is what the order index suite checks: the claim contract,
// which files the events as it completes, OrderIndex, which reads them,
// and Recovery, whose purge leaves stale entries the readers drop.
type indexStore interface {
	Store
	OrderIndex
	Recovery
}

var orderIndexCases = []storeCase[indexStore]{
	// Events that settle money are filed under the UTC day the platform
	// says they happened (else the day they ran), per scope and merchant;
	// the batch read returns their states; an event that moves no money
	// is remembered but not filed.
	{"index_days", func(t *testing.T, s indexStore) {
		ctx := ctxT(t)
		bj := time.FixedZone("CST", 8*3600)
		// 2026-10-03 07:30 in Beijing is 2026-10-02 in UTC.
		early := time.Date(2026, 10, 3, 7, 30, 0, 0, bj)
		late := time.Date(2026, 10, 3, 20, 0, 0, 0, bj)
		pay := func(at time.Time, amount string) *OrderRun {
			return &OrderRun{TTL: time.Hour, Amount: amount, Currency: "CNY", Settles: keying.SettlesPayment, At: at}
		}
		completeRun(t, s, "alipay:2021:2026100322001400000000000001:paid", pay(early, "9.90"), longTTL)
		completeRun(t, s, "alipay:2021:2026100322001400000000000002:paid", pay(late, "1288.00"), longTTL)
		refund := &OrderRun{TTL: time.Hour, Amount: "3.00", Currency: "CNY", Settles: keying.SettlesRefund, At: late}
		completeRun(t, s, "alipay:2021:2026100322001400000000000001:refund:R1", refund, longTTL)
		completeRun(t, s, "alipay:2022:2026100322001400000000000003:paid", pay(late, "1.00"), longTTL)
		completeRun(t, s, "alipay:2021:2026100322001400000000000004:closed", &OrderRun{TTL: time.Hour, At: late}, longTTL)
		noAt := &OrderRun{TTL: time.Hour, Amount: "2.00", Currency: "CNY", Settles: keying.SettlesPayment}
		completeRun(t, s, "alipay:2021:T-not-digits:paid", noAt, longTTL)

		if got, want := ranOn(t, s, "alipay", "2021", early, 0), []string{"alipay:2021:2026100322001400000000000001"}; !slices.Equal(got, want) {
			t.Fatalf("2 October (UTC): %q, want %q", got, want)
		}
		got := ranOn(t, s, "alipay", "2021", late, 1)
		slices.Sort(got)
		if want := []string{"alipay:2021:2026100322001400000000000001", "alipay:2021:2026100322001400000000000002"}; !slices.Equal(got, want) {
			t.Fatalf("3 October (UTC), a page at a time: %q, want %q (the closed order is not filed)", got, want)
		}
		if got := ranOn(t, s, "alipay", "2022", late, 0); !slices.Equal(got, []string{"alipay:2022:2026100322001400000000000003"}) {
			t.Fatalf("merchant 2022: %q", got)
		}
		if got := ranOn(t, s, "alipay", "2021", time.Now(), 0); !slices.Contains(got, "alipay:2021:T-not-digits") {
			t.Fatalf("an event without the platform's time is filed under the day it ran: %q", got)
		}
		if got := ranOn(t, s, "wechatpay", "2021", late, 0); len(got) != 0 {
			t.Fatalf("another scope: %q", got)
		}

		names := []string{"alipay:2021:2026100322001400000000000001", "alipay:2021:nobody", "alipay:2021:2026100322001400000000000004"}
		os, err := s.Orders(ctx, names)
		if err != nil || len(os) != 3 {
			t.Fatalf("Orders: %v %v", os, err)
		}
		if os[1] != nil {
			t.Fatalf("an order nobody paid: %+v", os[1])
		}
		o := os[0]
		if o.Key != names[0] || len(o.Events) != 2 {
			t.Fatalf("order: %+v", o)
		}
		for _, ev := range o.Events {
			want := map[string]struct {
				amount  string
				settles keying.Settlement
				at      time.Time
			}{"paid": {"9.90", keying.SettlesPayment, early}, "refund:R1": {"3.00", keying.SettlesRefund, late}}[ev.Event]
			if ev.Amount != want.amount || ev.Currency != "CNY" || ev.Settles != want.settles || !ev.At.Equal(want.at) || ev.Ran.IsZero() {
				t.Errorf("event %+v, want %+v", ev, want)
			}
		}
		if c := os[2]; c == nil || len(c.Events) != 1 || c.Events[0].Settles != "" || !c.Events[0].At.Equal(late) {
			t.Fatalf("the closed order is remembered, settling nothing: %+v", c)
		}
	}},
	// Objects a bill names find the events that named them, per kind: a
	// charge's payment and its refund are apart; two events naming one
	// object are both found, each once.
	{"index_refs", func(t *testing.T, s indexStore) {
		ctx := ctxT(t)
		run := func(settles keying.Settlement, refs ...string) *OrderRun {
			return &OrderRun{TTL: time.Hour, Amount: "5.00", Currency: "USD", Settles: settles, At: time.Now(), Refs: refs}
		}
		completeRun(t, s, "stripe:evt_1", run(keying.SettlesPayment, "ch_1", "pi_1"), longTTL)
		completeRun(t, s, "stripe:evt_2", run(keying.SettlesPayment, "pi_1", "ch_1"), longTTL)
		completeRun(t, s, "stripe:evt_3", run(keying.SettlesRefund, "re_1", "ch_1"), longTTL)
		completeRun(t, s, "stripe:evt_4", run("", "cus_1"), longTTL)
		got, err := s.EventsByRef(ctx, "stripe", keying.SettlesPayment, []string{"ch_1", "pi_1", "re_1", "ch_404"})
		if err != nil || len(got) != 4 {
			t.Fatalf("EventsByRef: %q %v", got, err)
		}
		for i := range got {
			slices.Sort(got[i])
		}
		want := [][]string{{"stripe:evt_1", "stripe:evt_2"}, {"stripe:evt_1", "stripe:evt_2"}, nil, nil}
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("payments of ref %d: %q, want %q", i, got[i], want[i])
			}
		}
		got, err = s.EventsByRef(ctx, "stripe", keying.SettlesRefund, []string{"re_1", "ch_1"})
		if err != nil || !slices.Equal(got[0], []string{"stripe:evt_3"}) || !slices.Equal(got[1], []string{"stripe:evt_3"}) {
			t.Fatalf("refunds: %q %v", got, err)
		}
		if got, _ := s.EventsByRef(ctx, "stripe", "", []string{"cus_1"}); len(got[0]) != 0 {
			t.Fatalf("an event that settles nothing is not filed: %q", got)
		}
		if got, _ := s.EventsByRef(ctx, "paypal", keying.SettlesPayment, []string{"ch_1"}); len(got[0]) != 0 {
			t.Fatalf("another scope: %q", got)
		}
		os, err := s.Orders(ctx, []string{"stripe:evt_3"})
		if err != nil || os[0] == nil || !slices.Equal(os[0].Events[0].Refs, []string{"re_1", "ch_1"}) || os[0].Events[0].Event != "" {
			t.Fatalf("a key that is its own event keeps its refs: %+v %v", os, err)
		}
	}},
	// The indexes are kept order_ttl: the refs then forget the event with
	// its order; a day's entries may stay while the day has longer-lived
	// ones (Redis keeps a day's list as long as its last entry), and a
	// purge leaves its entry: readers check entries against the order
	// state, which forgot the event.
	{"index_expires_and_purge", func(t *testing.T, s indexStore) {
		ctx := ctxT(t)
		at := time.Now()
		short := &OrderRun{TTL: shortTTL, Amount: "1.00", Currency: "USD", Settles: keying.SettlesPayment, At: at, Refs: []string{"ch_9"}}
		completeRun(t, s, "stripe:evt_9", short, shortTTL)
		long := &OrderRun{TTL: time.Hour, Amount: "1.00", Currency: "USD", Settles: keying.SettlesPayment, At: at, Refs: []string{"ch_8"}}
		completeRun(t, s, "stripe:evt_8", long, longTTL)
		if got := ranOn(t, s, "stripe", "", at, 0); len(got) != 2 || !slices.Contains(got, "stripe:evt_9") || !slices.Contains(got, "stripe:evt_8") {
			t.Fatalf("filed, each once: %q", got)
		}
		if err := s.Delete(ctx, "stripe:evt_8"); err != nil {
			t.Fatal(err)
		}
		if os, err := s.Orders(ctx, []string{"stripe:evt_8"}); err != nil || os[0] != nil {
			t.Fatalf("the purged event's order: %+v %v", os, err)
		}
		eventuallyWithin(t, shortTTL+deadline, "the short order's refs forgotten after its order_ttl", func() bool {
			refs, err := s.EventsByRef(ctx, "stripe", keying.SettlesPayment, []string{"ch_9"})
			return err == nil && len(refs[0]) == 0
		})
		if os, err := s.Orders(ctx, []string{"stripe:evt_9", "stripe:evt_8"}); err != nil || os[0] != nil || os[1] != nil {
			t.Fatalf("orders after the ttl and the purge: %+v %v", os, err)
		}
		if refs, err := s.EventsByRef(ctx, "stripe", keying.SettlesPayment, []string{"ch_8"}); err != nil || len(refs[0]) != 1 {
			t.Fatalf("the purged event's ref stays for its ttl: %q %v", refs, err)
		}
	}},
	// A cursor the store did not hand out is refused; a day nobody filed
	// is empty.
	{"index_bad_cursor", func(t *testing.T, s indexStore) {
		p, err := s.RanOn(context.Background(), RanQuery{Scope: "alipay", Merchant: "1", Day: time.Now()})
		if err != nil || len(p.Orders) != 0 || p.Next != "" {
			t.Fatalf("an empty day: %+v %v", p, err)
		}
		if _, ok := s.(*Embedded); ok {
			return // its cursor is the last id of a page: any string is one
		}
		if _, err := s.RanOn(context.Background(), RanQuery{Scope: "alipay", Merchant: "1", Day: time.Now(), Cursor: "x"}); !errors.Is(err, ErrBadQuery) {
			t.Fatalf("a bad cursor: %v", err)
		}
	}},
}

func init() { suites = append(suites, newSuite("order_index", "order index", orderIndexCases)) }
