package store

import (
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// repairCase is the order suite's case of RepairOrderEvent (see
// OrderRepairer), on every store: an answered record whose order lacks
// its event, as a settle a store outage deferred left it before that
// settle wrote the order, is repaired on read.
var repairCase = storeCase[orderStore]{"answered_record_without_its_order_event_is_repaired_on_read", func(t *testing.T, s orderStore) {
	ctx := ctxT(t)
	rs, ok := s.(interface {
		OrderRepairer
		OrderIndex
	})
	if !ok {
		t.Fatalf("%T repairs no order event", s)
	}
	const order = "alipay:2021:2026100322001400000000000077"
	key := order + ":paid"
	note := Journal{Notification: &Notification{Method: "POST", URI: "/notify", Body: []byte("x"), BodySize: 1, MerchantRefs: []string{"OUT-77"}}}
	answer := func(key string, run *OrderRun) {
		t.Helper()
		won := claim(t, s, key, "", longTTL, Won)
		if err := s.Complete(ctx, key, won.Token, Answer{Status: 200, Body: []byte("success"), BodyCached: true, Order: run}, longTTL, note); err != nil {
			t.Fatal(err)
		}
	}
	// The record alone, as the deferred settle stored it.
	answer(key, nil)
	rec := lookup(t, s, key)
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	run := &OrderRun{TTL: time.Hour, Amount: "77.00", Currency: "CNY", Settles: keying.SettlesPayment, At: at,
		Refs: []string{"OBJ-77"}, MerchantRefs: []string{"OUT-77"}}
	if ok, err := rs.RepairOrderEvent(ctx, key, run); err != nil || !ok {
		t.Fatalf("RepairOrderEvent = %v %v, want it repaired", ok, err)
	}
	o, err := s.Order(ctx, order)
	if err != nil {
		t.Fatalf("the order does not remember the repaired event: %v", err)
	}
	if len(o.Events) != 1 || o.Events[0].Key != key || o.Events[0].Amount != "77.00" || o.Events[0].Currency != "CNY" ||
		o.Events[0].Settles != keying.SettlesPayment || !o.Events[0].At.Equal(at) ||
		o.Events[0].Ran.UnixMilli() != rec.Changed.UnixMilli() {
		t.Fatalf("order %+v, want paid of 77.00 CNY, ran when its record was answered (%v)", o, rec.Changed)
	}
	if got := ranOn(t, rs, "alipay", "2021", at, 0); !slices.Contains(got, order) {
		t.Fatalf("the day index lists %q, not the order", got)
	}
	if got, err := rs.EventsByRef(ctx, "alipay", keying.SettlesPayment, []string{"OBJ-77"}); err != nil || len(got) != 1 || !slices.Equal(got[0], []string{key}) {
		t.Fatalf("EventsByRef(OBJ-77) = %q %v, want the key", got, err)
	}
	for _, ref := range []string{"OUT-77"} {
		if m := search(t, s, ref); len(m) != 1 || m[0].Key != key || m[0].Amount != "77.00" {
			t.Fatalf("search %s finds %+v, want the key with its amount", ref, m)
		}
	}
	// Idempotent: a second read repairs nothing, and the event stays.
	if ok, err := rs.RepairOrderEvent(ctx, key, &OrderRun{TTL: time.Hour, Amount: "1.00", Currency: "CNY"}); err != nil || ok {
		t.Fatalf("a second repair = %v %v, want nothing written", ok, err)
	}
	if got := ranOn(t, rs, "alipay", "2021", at, 0); len(got) != 1 {
		t.Fatalf("the day index after a second repair: %q", got)
	}

	// An event its order remembers is never overwritten: the real write
	// wins.
	refund := order + ":refund:R1"
	answer(refund, &OrderRun{TTL: time.Hour, Amount: "5.00", Currency: "CNY", Settles: keying.SettlesRefund})
	if ok, err := rs.RepairOrderEvent(ctx, refund, &OrderRun{TTL: time.Hour, Amount: "9.99", Currency: "CNY", Settles: keying.SettlesRefund}); err != nil || ok {
		t.Fatalf("repair of a remembered event = %v %v, want nothing written", ok, err)
	}
	if o, err := s.Order(ctx, order); err != nil || len(o.Events) != 2 || o.Events[1].Key != refund || o.Events[1].Amount != "5.00" {
		t.Fatalf("order %+v %v, want the refund's own 5.00", o, err)
	}

	// A purged record is never repaired from: the purge that forgot the
	// event is not undone.
	closed := order + ":closed"
	answer(closed, nil)
	if err := s.Delete(ctx, closed); err != nil {
		t.Fatal(err)
	}
	if ok, err := rs.RepairOrderEvent(ctx, closed, &OrderRun{TTL: time.Hour}); err != nil || ok {
		t.Fatalf("repair of a purged record = %v %v, want nothing written", ok, err)
	}
	// Nor is a record that is not answered (failed).
	failed := order + ":refund:R2"
	won := claim(t, s, failed, "", longTTL, Won)
	if err := s.Release(ctx, failed, won.Token, longTTL, note); err != nil {
		t.Fatal(err)
	}
	if ok, err := rs.RepairOrderEvent(ctx, failed, &OrderRun{TTL: time.Hour}); err != nil || ok {
		t.Fatalf("repair of a failed record = %v %v, want nothing written", ok, err)
	}
	if o, err := s.Order(ctx, order); err != nil || len(o.Events) != 2 {
		t.Fatalf("order %+v %v, want paid and refund:R1 only", o, err)
	}
}}

// The order suite reads orderCases in its init: the case joins them
// when the package's variables are initialized, before any init.
var _ = func() bool { orderCases = append(orderCases, repairCase); return true }()
