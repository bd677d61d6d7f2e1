package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// The order state's contract (see Order), on every store of factories.

// orderStore is what the order suite checks: the claim contract, which
// remembers an order's events as it completes, OrderBook, which reads
// them, and Recovery, which forgets them.
type orderStore interface {
	Store
	OrderBook
	Recovery
}

// orderCases are TestContract's cases for orders.
var orderCases = []storeCase[orderStore]{
	// A paid event outlives its record: once the answer's ttl has passed,
	// a copy of the event is Answered from the order, writes nothing and
	// is never won; the order lists the event with its money.
	{"event_outlives_record", func(t *testing.T, s orderStore) {
		ctx := ctxT(t)
		const key = "alipay:2021:T1:paid"
		won := claim(t, s, key, "fp", longTTL, Won)
		run := &OrderRun{TTL: time.Hour, Amount: "9.90", Currency: "CNY"}
		if err := s.Complete(ctx, key, won.Token, Answer{Status: 200, Body: []byte("success"), BodyCached: true, Order: run}, shortTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		if r := claim(t, s, key, "fp", longTTL, Answered); r.Record.FromOrder || string(r.Record.Body) != "success" {
			t.Fatalf("within ttl the record answers: %+v", r.Record)
		}
		eventuallyWithin(t, shortTTL+deadline, "the record forgotten after its ttl", func() bool {
			_, err := s.Lookup(ctx, key)
			return errors.Is(err, ErrNotFound)
		})
		for range 3 {
			r := claim(t, s, key, "another fp", longTTL, Answered)
			if !r.Record.FromOrder || r.Record.Key != key || r.Record.BodyCached || r.Record.Status != 0 {
				t.Fatalf("after ttl: %+v, want the order's memory of the event", r.Record)
			}
		}
		if _, err := s.Lookup(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a copy answered from the order wrote a record: %v", err)
		}
		o, err := s.Order(ctx, "alipay:2021:T1")
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Events) != 1 || o.Events[0].Event != "paid" || o.Events[0].Key != key ||
			o.Events[0].Amount != "9.90" || o.Events[0].Currency != "CNY" || o.Events[0].Ran.IsZero() {
			t.Fatalf("order: %+v", o)
		}
		if d := time.Until(o.ExpiresAt); d < 50*time.Minute || d > time.Hour+time.Minute {
			t.Fatalf("order expires in %v, want about its order_ttl of 1h", d)
		}
	}},
	// The events of one order are each their own: paid does not answer a
	// refund, the two refunds are apart, and all three are listed.
	{"events_apart", func(t *testing.T, s orderStore) {
		ctx := ctxT(t)
		keys := []string{"wechatpay:m:T2:paid", "wechatpay:m:T2:refund:R1", "wechatpay:m:T2:refund:R2"}
		for i, k := range keys {
			won := claim(t, s, k, "", longTTL, Won)
			run := &OrderRun{TTL: time.Hour, Amount: fmt.Sprintf("%d.00", i+1), Currency: "CNY"}
			if err := s.Complete(ctx, k, won.Token, Answer{Status: 204, BodyCached: true, Order: run}, longTTL, Journal{}); err != nil {
				t.Fatal(err)
			}
		}
		o, err := s.Order(ctx, "wechatpay:m:T2")
		if err != nil || len(o.Events) != 3 {
			t.Fatalf("order: %+v %v", o, err)
		}
		for i, ev := range o.Events {
			if ev.Key != keys[i] || ev.Amount != fmt.Sprintf("%d.00", i+1) {
				t.Errorf("event %d: %+v, want %s", i, ev, keys[i])
			}
		}
		claim(t, s, "wechatpay:m:T2:refund:R3", "", longTTL, Won)
		if _, err := s.Order(ctx, "wechatpay:m:T3"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("an order nobody paid: %v", err)
		}
	}},
	// A failed event is not remembered; Complete without Order remembers
	// nothing either.
	{"failed_not_remembered", func(t *testing.T, s orderStore) {
		ctx := ctxT(t)
		won := claim(t, s, "alipay:2021:T4:paid", "", longTTL, Won)
		if err := s.Release(ctx, "alipay:2021:T4:paid", won.Token, shortTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		won = claim(t, s, "alipay:2021:T5:paid", "", longTTL, Won)
		if err := s.Complete(ctx, "alipay:2021:T5:paid", won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		for _, o := range []string{"alipay:2021:T4", "alipay:2021:T5"} {
			if _, err := s.Order(ctx, o); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %v, want no order state", o, err)
			}
		}
		claim(t, s, "alipay:2021:T4:paid", "", longTTL, Won)
	}},
	// Delete forgets the event too, also once the record is gone; Reopen
	// (a forced redelivery) forgets it, so the next claim wins.
	{"purge_and_reopen_forget", func(t *testing.T, s orderStore) {
		ctx := ctxT(t)
		run := &OrderRun{TTL: time.Hour}
		complete := func(key string, ttl time.Duration) {
			t.Helper()
			won := claim(t, s, key, "", longTTL, Won)
			if err := s.Complete(ctx, key, won.Token, Answer{Status: 200, BodyCached: true, Order: run}, ttl, Journal{}); err != nil {
				t.Fatal(err)
			}
		}
		complete("alipay:2021:T6:paid", longTTL)
		if err := s.Reopen(ctx, "alipay:2021:T6:paid", longTTL); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "alipay:2021:T6:paid", "", longTTL, Won)

		complete("alipay:2021:T7:paid", shortTTL)
		eventuallyWithin(t, shortTTL+deadline, "the record forgotten", func() bool {
			_, err := s.Lookup(ctx, "alipay:2021:T7:paid")
			return errors.Is(err, ErrNotFound)
		})
		claim(t, s, "alipay:2021:T7:paid", "", longTTL, Answered)
		if err := s.Delete(ctx, "alipay:2021:T7:paid"); err != nil {
			t.Fatalf("purge of an event whose record is gone: %v", err)
		}
		if _, err := s.Order(ctx, "alipay:2021:T7"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("order after the purge: %v", err)
		}
		claim(t, s, "alipay:2021:T7:paid", "", longTTL, Won)
		if err := s.Delete(ctx, "alipay:2021:T8:paid"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("purge of nothing: %v", err)
		}
	}},
	// A key that is its own business event (Stripe's ids) is remembered
	// under itself.
	{"own_event", func(t *testing.T, s orderStore) {
		ctx := ctxT(t)
		const key = "stripe:evt_1"
		won := claim(t, s, key, "", longTTL, Won)
		if err := s.Complete(ctx, key, won.Token, Answer{Status: 200, BodyCached: true, Order: &OrderRun{TTL: time.Hour, Amount: "500", Currency: "JPY"}}, shortTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		eventuallyWithin(t, shortTTL+deadline, "the record forgotten", func() bool {
			_, err := s.Lookup(ctx, key)
			return errors.Is(err, ErrNotFound)
		})
		if r := claim(t, s, key, "", longTTL, Answered); !r.Record.FromOrder {
			t.Fatalf("%+v", r.Record)
		}
		o, err := s.Order(ctx, key)
		if err != nil || len(o.Events) != 1 || o.Events[0].Event != "" || o.Events[0].Key != key || o.Events[0].Amount != "500" {
			t.Fatalf("order: %+v %v", o, err)
		}
	}},
	// The order forgets its events after its ttl.
	{"order_expires", func(t *testing.T, s orderStore) {
		ctx := ctxT(t)
		won := claim(t, s, "alipay:2021:T9:paid", "", longTTL, Won)
		if err := s.Complete(ctx, "alipay:2021:T9:paid", won.Token, Answer{Status: 200, BodyCached: true, Order: &OrderRun{TTL: shortTTL}}, shortTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		eventuallyWithin(t, shortTTL+deadline, "the order forgotten after order_ttl", func() bool {
			_, err := s.Order(ctx, "alipay:2021:T9")
			return errors.Is(err, ErrNotFound)
		})
		claim(t, s, "alipay:2021:T9:paid", "", longTTL, Won)
	}},
	// Concurrent copies of every event of one order, the record gone: each
	// event was won exactly once before.
	{"concurrent_late_copies", func(t *testing.T, s orderStore) {
		ctx := ctxT(t)
		keys := []string{"alipay:2021:T10:paid", "alipay:2021:T10:refund:R1"}
		for _, k := range keys {
			won := claim(t, s, k, "", longTTL, Won)
			if err := s.Complete(ctx, k, won.Token, Answer{Status: 200, BodyCached: true, Order: &OrderRun{TTL: time.Hour}}, shortTTL, Journal{}); err != nil {
				t.Fatal(err)
			}
		}
		eventuallyWithin(t, shortTTL+deadline, "the records forgotten", func() bool {
			_, e1 := s.Lookup(ctx, keys[0])
			_, e2 := s.Lookup(ctx, keys[1])
			return errors.Is(e1, ErrNotFound) && errors.Is(e2, ErrNotFound)
		})
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := s.Claim(ctx, keys[i%2], "", longTTL)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Outcome != Answered || !r.Record.FromOrder {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if wins != 0 {
			t.Fatalf("%d late copies were not answered from the order", wins)
		}
	}},
}

func init() { suites = append(suites, newSuite("order", "order state", orderCases)) }
