package store

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// The deferred settle's contract (see Settler), on every store of
// factories: a completion the store could not take when the backend
// answered, kept and retried, writes what a settle writes.

// settledStore is what the deferred settle suite reads back: the record
// (Lister), the order's event (OrderBook, OrderIndex) and the search
// references (Searcher).
type settledStore interface {
	Store
	Lister
	OrderBook
	OrderIndex
	Searcher
}

// downStore is a store whose completions fail while down is set, before
// they reach it: the store outage a Settler keeps an answer through.
type downStore struct {
	Store
	down atomic.Bool
}

func (d *downStore) Complete(ctx context.Context, key, token string, a Answer, ttl time.Duration, j Journal) error {
	if d.down.Load() {
		return errors.New("store down")
	}
	return d.Store.Complete(ctx, key, token, a, ttl, j)
}

func (d *downStore) Lookup(ctx context.Context, key string) (*Record, error) {
	if d.down.Load() {
		return nil, errors.New("store down")
	}
	return d.Store.Lookup(ctx, key)
}

var settleCases = []storeCase[settledStore]{
	// A payment whose completion was deferred by an outage is, once the
	// retry went through, the order's paid event with its money, filed in
	// the day index and under the objects and references it named, and an
	// answered record in the listing: nothing reports it "settled, never
	// run".
	{"deferred_settle_writes_order", func(t *testing.T, s settledStore) {
		ctx := ctxT(t)
		const order = "alipay:2021:2026100322001400000000000009"
		key := order + ":paid"
		at := time.Now().UTC().Truncate(time.Second)
		run := &OrderRun{TTL: time.Hour, Amount: "88.00", Currency: "CNY", Settles: keying.SettlesPayment, At: at,
			Refs: []string{"OBJ-9"}, MerchantRefs: []string{"OUT-9"}}
		d := &downStore{Store: s}
		st := NewSettler(d, SettlerOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
		defer st.Close()
		won := claim(t, s, key, "fp", longTTL, Won)
		d.down.Store(true)
		done := make(chan error, 1)
		err := st.Complete(ctx, key, won.Token, "fp", Answer{Status: 200, Body: []byte("success"), BodyCached: true, Order: run},
			longTTL, Journal{}, func(err error) { done <- err })
		if !errors.Is(err, ErrKept) {
			t.Fatalf("Complete with the store down = %v, want ErrKept", err)
		}
		time.Sleep(30 * time.Millisecond)
		d.down.Store(false)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the kept answer settled with %v", err)
			}
		case <-time.After(deadline):
			t.Fatal("the kept answer was never settled")
		}

		if rec := lookup(t, s, key); rec.State != StateAnswered || string(rec.Body) != "success" {
			t.Fatalf("record %+v, want the answer", rec)
		}
		o, err := s.Order(ctx, order)
		if err != nil {
			t.Fatalf("the order does not remember its paid event: %v", err)
		}
		if len(o.Events) != 1 || o.Events[0].Event != "paid" || o.Events[0].Key != key || o.Events[0].Amount != "88.00" ||
			o.Events[0].Currency != "CNY" || o.Events[0].Settles != keying.SettlesPayment || !o.Events[0].At.Equal(at) {
			t.Fatalf("order %+v, want its paid event of 88.00 CNY", o)
		}
		if os, err := s.Orders(ctx, []string{order}); err != nil || len(os) != 1 || os[0] == nil || len(os[0].Events) != 1 {
			t.Fatalf("Orders (reconciliation's look-up): %+v %v", os, err)
		}
		if got := ranOn(t, s, "alipay", "2021", at, 0); !slices.Contains(got, order) {
			t.Fatalf("the day index of %s lists %q, not the order", at.Format(time.DateOnly), got)
		}
		if got, err := s.EventsByRef(ctx, "alipay", keying.SettlesPayment, []string{"OBJ-9"}); err != nil || len(got) != 1 || !slices.Equal(got[0], []string{key}) {
			t.Fatalf("EventsByRef(OBJ-9) = %q %v, want the key", got, err)
		}
		if m := search(t, s, "OUT-9"); len(m) != 1 || m[0].Key != key || m[0].State != StateAnswered || m[0].Amount != "88.00" {
			t.Fatalf("search OUT-9 finds %+v, want the answered key with its amount", m)
		}
		page, err := s.List(ctx, ListQuery{State: StateAnswered, Scope: "alipay"})
		if err != nil || !slices.ContainsFunc(page.Records, func(r *Record) bool { return r.Key == key }) {
			t.Fatalf("the answered listing: %+v %v", page.Records, err)
		}
	}},
}

func init() {
	suites = append(suites, newSuite("settle", "settle's read-back extensions", settleCases))
}
