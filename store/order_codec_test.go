package store

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// TestOrderEventCodec: every value an order remembers comes back as it
// was given — amounts exactly as written, the platform's time to the
// second, before or after the run — and values of the former text layout
// still read.
func TestOrderEventCodec(t *testing.T) {
	ran := time.UnixMilli(1791000000123)
	for _, amount := range []string{"", "1288.00", "0.01", "500", "-3.5", "0.0000001", "12.3456789", "12.34567891",
		"007", "1.", ".5", "99999999999999.99", "123456789012345678", "1e5", "¥1"} {
		for _, at := range []time.Time{{}, ran.Add(-90 * time.Second), ran.Add(3 * time.Second), ran.Add(-400 * 24 * time.Hour)} {
			r := &OrderRun{Amount: amount, Currency: "CNY", Settles: keying.SettlesRefund, At: at, Refs: []string{"re_1", "", "ch_2"}}
			v := encodeOrderEvent(ran, r)
			ev, err := decodeOrderEvent("alipay:1:T", "refund:R", string(v))
			if err != nil {
				t.Fatalf("%q at %v: %v", amount, at, err)
			}
			if ev.Amount != amount || ev.Currency != "CNY" || !ev.Ran.Equal(ran) || !ev.At.Equal(at.Truncate(time.Second)) ||
				ev.Settles != keying.SettlesRefund || !slices.Equal(ev.Refs, r.Refs) || ev.Key != "alipay:1:T:refund:R" {
				t.Fatalf("%q at %v: %+v", amount, at, ev)
			}
		}
	}
	if n := len(encodeOrderEvent(ran, &OrderRun{Amount: "1288.00", Currency: "CNY", Settles: keying.SettlesPayment, At: ran})); n > 16 {
		t.Errorf("a paid event takes %d bytes, want ≤ 16 (the order's Redis budget)", n)
	}
	// A payment the browser's return ran (`return business`) names that
	// channel, its refs still read after it; an event without one reads
	// as before.
	for _, via := range []string{"GET /alipay/return", ""} {
		r := &OrderRun{Amount: "9.90", Currency: "CNY", Settles: keying.SettlesPayment, Refs: []string{"r1"}, Via: via}
		ev, err := decodeOrderEvent("alipay:1:T", "paid", string(encodeOrderEvent(ran, r)))
		if err != nil || ev.Via != via || !slices.Equal(ev.Refs, r.Refs) || ev.Amount != "9.90" {
			t.Fatalf("via %q: %+v %v", via, ev, err)
		}
	}
	old := strconv.FormatInt(ran.UnixMilli(), 36) + ",9.90,CNY"
	ev, err := decodeOrderEvent("alipay:1:T", "paid", old)
	if err != nil || ev.Amount != "9.90" || ev.Currency != "CNY" || !ev.Ran.Equal(ran) || ev.Settles != "" {
		t.Fatalf("former layout: %+v %v", ev, err)
	}
	for _, bad := range []string{"", "\x01", "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "zz!,1,CNY"} {
		if _, err := decodeOrderEvent("o", "paid", bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// TestPackID: day index entries come back as they went in; digits take
// half the bytes.
func TestPackID(t *testing.T) {
	for _, id := range []string{"2013112011001004330000121536", "1", "12", "0001", "evt_1NG8Du2eZvKYlo2CUI79vXWy", "\x00x", "\xffx", ""} {
		got, ok := unpackID(packID(id))
		if !ok || got != id {
			t.Errorf("%q → %x → %q %v", id, packID(id), got, ok)
		}
	}
	if n := len(packID("2013112011001004330000121536")); n != 15 {
		t.Errorf("a 28-digit trade_no packs to %d bytes, want 15", n)
	}
	for _, bad := range [][]byte{{}, {0x83, 0x12}, {0x82, 0x1a}} {
		if _, ok := unpackID(bad); ok {
			t.Errorf("%x unpacked", bad)
		}
	}
}

// TestSlotTags: the order state's tag puts it in its order's slot, for
// every slot; the table is the layout, so two of its entries are pinned.
func TestSlotTags(t *testing.T) {
	// The check value of CRC-16/XMODEM, as the Cluster spec gives it.
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	tags := slotTags()
	for slot, tag := range tags {
		if tag == "" || len(tag) > 3 || int(crc16(tag)%16384) != slot {
			t.Fatalf("slot %d: tag %q", slot, tag)
		}
	}
	s := &Redis{prefix: "idem"}
	for _, order := range []string{"alipay:2021004123456789:2013112011001004330000121536", "demo:x", "demo:%:{b}c"} {
		if got, want := redisSlot(s.orderKey(order)), redisSlot(s.hashKey(order+":paid")); got != want {
			t.Errorf("%q: state in slot %d, events in %d", order, got, want)
		}
	}
	if got := s.orderKey("alipay:2021004123456789:2013112011001004330000121536"); len(got) > 27 {
		t.Errorf("order key %q: %d bytes, want ≤ 27 (32 in Redis)", got, len(got))
	}
	if got := s.orderKey("stripe:evt_1"); redisSlot(got) != redisSlot(s.hashKey("stripe:evt_1")) {
		t.Errorf("a key that is its own event: %q apart from its record", got)
	}
	// The layout: these names must never change.
	if got, want := s.orderKey("alipay:2021004123456789:2013112011001004330000121536"), pinnedOrderKey; got != want {
		t.Errorf("order key %q, want %q", got, want)
	}
}

const pinnedOrderKey = "idem:{zJ}oFqkMm399E2BIsA2u"

// FuzzOrderEventCodec: any stored value decodes or is refused, never
// panics; any run's amount, currency and refs come back as they went in.
func FuzzOrderEventCodec(f *testing.F) {
	f.Add("1288.00", "CNY", "ch_1", string(encodeOrderEvent(time.UnixMilli(1791000000123), &OrderRun{Amount: "9.90"})), []byte{0x95, 0x12})
	f.Add("007", "", "", "mbc1234a,1288.00,CNY", []byte{0x01})
	f.Fuzz(func(t *testing.T, amount, currency, ref, stored string, packed []byte) {
		_, _ = decodeOrderEvent("o", "paid", stored)
		_, _ = unpackID(packed)
		ran := time.UnixMilli(1791000000123)
		r := &OrderRun{Amount: amount, Currency: currency, Refs: []string{ref}, At: ran.Add(-time.Minute)}
		ev, err := decodeOrderEvent("o", "paid", string(encodeOrderEvent(ran, r)))
		if err != nil || ev.Amount != amount || ev.Currency != currency || len(ev.Refs) != 1 || ev.Refs[0] != ref {
			t.Fatalf("%q %q %q: %+v %v", amount, currency, ref, ev, err)
		}
		if id, ok := unpackID(packID(ref)); !ok || id != ref {
			t.Fatalf("packID(%q) came back %q %v", ref, id, ok)
		}
	})
}

// TestOrderOwnRefunds: Alipay's refunds of 30.00, 20.00 and 10.00 of one
// trade, whose notifications name the trade's refunded total (30.00,
// 50.00, 60.00), read back with their own amounts and their totals,
// whatever order they ran in; until an earlier refund runs, a later one
// owns its increase over those that ran. A refund that names its own
// amount (WeChat Pay) is left as it is.
func TestOrderOwnRefunds(t *testing.T) {
	ran := time.UnixMilli(1791000000123)
	totals := map[string]string{"refund:r1": "30.00", "refund:r2": "50.00", "refund:r3": "60.00"}
	for _, order := range [][]string{{"refund:r1", "refund:r2", "refund:r3"}, {"refund:r3", "refund:r1", "refund:r2"}, {"refund:r2", "refund:r3", "refund:r1"}} {
		o := &orderState{}
		o.ran("paid", ran, &OrderRun{TTL: time.Hour, Amount: "129.00", Currency: "CNY", Settles: keying.SettlesPayment})
		for i, ev := range order {
			o.ran(ev, ran.Add(time.Duration(i+1)*time.Second), &OrderRun{TTL: time.Hour, Amount: totals[ev], Currency: "CNY",
				Settles: keying.SettlesRefund, RefundTotal: true})
		}
		v, err := o.view("alipay:1:T")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, e := range v.Events {
			got[e.Event] = e.Amount + "/" + e.RefundedTotal
		}
		want := map[string]string{"paid": "129.00/", "refund:r1": "30.00/30.00", "refund:r2": "20.00/50.00", "refund:r3": "10.00/60.00"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ran in the order %v: %v, want %v", order, got, want)
		}
	}
	o := &orderState{}
	o.ran("refund:r3", ran, &OrderRun{TTL: time.Hour, Amount: "60.00", Currency: "CNY", Settles: keying.SettlesRefund, RefundTotal: true})
	o.ran("refund:r1", ran, &OrderRun{TTL: time.Hour, Amount: "30.00", Currency: "CNY", Settles: keying.SettlesRefund, RefundTotal: true})
	if v, _ := o.view("alipay:1:T"); v.Events[0].Amount != "30.00" || v.Events[1].Amount != "30.00" {
		t.Errorf("the second refund not run yet: %+v, want 30.00 each (the third's increase over the first)", v.Events)
	}
	w := &orderState{}
	w.ran("refund:a", ran, &OrderRun{TTL: time.Hour, Amount: "30.00", Currency: "CNY", Settles: keying.SettlesRefund})
	w.ran("refund:b", ran, &OrderRun{TTL: time.Hour, Amount: "20.00", Currency: "CNY", Settles: keying.SettlesRefund})
	if v, _ := w.view("wechatpay:1:T"); v.Events[0].Amount != "30.00" || v.Events[1].Amount != "20.00" || v.Events[0].RefundedTotal != "" {
		t.Errorf("refunds that name their own amounts: %+v", v.Events)
	}
	// A gateway of an earlier version reads a total's flags as an event
	// that settles nothing, and its amount as written.
	b := encodeOrderEvent(ran, &OrderRun{Amount: "60.00", Currency: "CNY", Settles: keying.SettlesRefund, RefundTotal: true})
	if b[0]&flagSettles != settlesRefundTotal || b[0] >= '0' {
		t.Errorf("flags %#x", b[0])
	}
}
