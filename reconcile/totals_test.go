package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
	"github.com/idemgate/idemgate/store"
)

// TestRunTotals: a WeChat Pay bill with payments and refunds in every
// category. Each category totals payments (amounts) and refunds
// (refund_amounts) apart, never summed into one figure; an amount that
// differs carries its difference (bill minus notified), and the
// category's totals are the differences, not the bill's amounts.
func TestRunTotals(t *testing.T) {
	const mch = "1900000109"
	cst := time.FixedZone("CST", 8*3600)
	day := time.Date(2026, 10, 3, 0, 0, 0, 0, cst)
	txn := func(i int) string { return fmt.Sprintf("4200000925202610030%09d", i) }
	ctx := context.Background()
	st := store.NewMemory()
	t.Cleanup(func() { st.Close() })
	ran := func(i int, event, amount string, at time.Time) {
		t.Helper()
		key := "wechatpay:" + mch + ":" + txn(i) + ":" + event
		won, err := st.Claim(ctx, key, "", time.Minute)
		if err != nil || won.Outcome != store.Won {
			t.Fatalf("claim %s: %+v %v", key, won, err)
		}
		settles := keying.SettlesPayment
		if strings.HasPrefix(event, keying.EventRefund) {
			settles = keying.SettlesRefund
		}
		run := &store.OrderRun{TTL: 24 * time.Hour, Amount: amount, Currency: "CNY", Settles: settles, At: at}
		if err := st.Complete(ctx, key, won.Token, store.Answer{Status: 200, BodyCached: true, Order: run}, time.Hour, store.Journal{}); err != nil {
			t.Fatalf("complete %s: %v", key, err)
		}
	}
	at := func(h int) time.Time { return day.Add(time.Duration(h) * time.Hour) }
	ran(1, "paid", "100.00", at(9))
	ran(1, "refund:R1", "20.00", at(10)) // matched
	ran(2, "paid", "5.00", at(9))        // the bill says 6.00: +1.00
	ran(3, "paid", "50.00", at(9))
	ran(3, "refund:R3", "3.50", at(11)) // the bill says 3.00: -0.50
	ran(4, "paid", "8.00", at(12))      // in no bill
	ran(4, "refund:R4", "1.00", at(13)) // in no bill
	ran(6, "paid", "30.00", at(9))

	var b bytes.Buffer
	w := wechatpaybill.NewWriter(&b)
	for _, r := range []billtest.Row{
		{Kind: billtest.Payment, Order: txn(1), MerchantOrder: "M1", Amount: "100.00", Time: at(9)},
		{Kind: billtest.Refund, Order: txn(1), MerchantOrder: "M1", Refund: "R1", Amount: "20.00", Time: at(10)},
		{Kind: billtest.Payment, Order: txn(2), MerchantOrder: "M2", Amount: "6.00", Time: at(9)},
		{Kind: billtest.Payment, Order: txn(3), MerchantOrder: "M3", Amount: "50.00", Time: at(9)},
		{Kind: billtest.Refund, Order: txn(3), MerchantOrder: "M3", Refund: "R3", Amount: "3.00", Time: at(11)},
		{Kind: billtest.Payment, Order: txn(5), MerchantOrder: "M5", Amount: "9.00", Time: at(9)},               // never ran
		{Kind: billtest.Refund, Order: txn(6), MerchantOrder: "M6", Refund: "R6", Amount: "4.00", Time: at(14)}, // never ran
		{Kind: billtest.Payment, Order: txn(6), MerchantOrder: "M6", Amount: "30.00", Time: at(9)},
	} {
		r.Currency, r.Merchant = "CNY", mch
		if err := w.Row(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	env := Env{StoreID: "mem", Store: st, Now: func() time.Time { return at(30) },
		Routes: func(string) []Route { return []Route{{Platform: "wechatpay", Merchants: []string{mch}}} }}
	rep, err := Run(ctx, env, Options{Platform: "wechatpay"}, &b)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name            string
		got             Category
		count           int
		amount, refunds string
	}{
		{"matched", rep.Matched, 4, "180.00", "20.00"},
		{"amount_differs", rep.AmountDiffers, 2, "1.00", "-0.50"},
		{"settled_never_run", rep.SettledNeverRun, 2, "9.00", "4.00"},
		{"run_not_settled", rep.RunNotSettled, 2, "8.00", "1.00"},
	} {
		if c.got.Count != c.count || c.got.Amounts["CNY"] != c.amount || len(c.got.Amounts) != 1 ||
			c.got.RefundAmounts["CNY"] != c.refunds || len(c.got.RefundAmounts) != 1 {
			t.Errorf("%s: %d amounts %v refund_amounts %v, want %d, CNY %s and CNY %s apart", c.name, c.got.Count,
				c.got.Amounts, c.got.RefundAmounts, c.count, c.amount, c.refunds)
		}
	}
	diffs := map[string]string{}
	for _, it := range rep.AmountDiffers.Items {
		diffs[it.Event] = it.BillAmount + "-" + it.NotifiedAmount + "=" + it.Difference
	}
	if diffs["paid"] != "6.00-5.00=1.00" || diffs["refund:R3"] != "3.00-3.50=-0.50" {
		t.Errorf("amount differs items: %v, want each with its difference, bill minus notified", diffs)
	}
	if rep.PendingNextBill.RefundAmounts == nil {
		t.Errorf("pending_next_bill has no refund_amounts: %+v", rep.PendingNextBill)
	}
}

// TestAlipayAppFromOrders: an Alipay bill names the seller account, not
// the app_id of the keys. Past the records' ttl (nothing recorded to tell
// it by) and inside order_ttl, the app is told from the orders its rows
// name, not refused; a bill whose rows name no kept order still asks for
// merchant=.
func TestAlipayAppFromOrders(t *testing.T) {
	const app = "2021004123456789"
	cst := time.FixedZone("CST", 8*3600)
	day := time.Date(2026, 10, 3, 0, 0, 0, 0, cst)
	trade := func(i int) string { return fmt.Sprintf("2026100322001458860%09d", i) }
	ctx := context.Background()
	st := store.NewMemory()
	t.Cleanup(func() { st.Close() })
	for i := 1; i <= 2; i++ {
		key := "alipay:" + app + ":" + trade(i) + ":paid"
		won, err := st.Claim(ctx, key, "", time.Minute)
		if err != nil || won.Outcome != store.Won {
			t.Fatalf("claim %s: %+v %v", key, won, err)
		}
		run := &store.OrderRun{TTL: 400 * 24 * time.Hour, Amount: fmt.Sprintf("%d.00", i*10), Currency: "CNY",
			Settles: keying.SettlesPayment, At: day.Add(10 * time.Hour), MerchantRefs: []string{fmt.Sprintf("M%d", i)}}
		// The record's ttl is short: it is gone when the bill is reconciled.
		if err := st.Complete(ctx, key, won.Token, store.Answer{Status: 200, BodyCached: true, Order: run}, 20*time.Millisecond, store.Journal{}); err != nil {
			t.Fatalf("complete %s: %v", key, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := st.Lookup(ctx, "alipay:"+app+":"+trade(1)+":paid"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the record is still kept: %v", err)
	}
	bill := func(rows ...billtest.Row) *bytes.Buffer {
		var b bytes.Buffer
		w := alipaybill.NewWriter(&b, "20881021772966100156", day, day.Add(24*time.Hour))
		for _, r := range rows {
			r.Kind, r.Currency, r.Time = billtest.Payment, "CNY", day.Add(10*time.Hour)
			if err := w.Row(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return &b
	}
	env := Env{StoreID: "mem", Store: st}
	rep, err := Run(ctx, env, Options{Platform: "alipay", Matched: true},
		bill(billtest.Row{Order: trade(1), MerchantOrder: "M1", Amount: "10.00"}, billtest.Row{Order: trade(2), MerchantOrder: "M2", Amount: "20.00"},
			billtest.Row{Order: trade(3), MerchantOrder: "M3", Amount: "30.00"}))
	if err != nil {
		t.Fatalf("a bill past the records' ttl: %v", err)
	}
	if len(rep.Merchant) != 1 || rep.Merchant[0] != app || rep.Matched.Count != 2 || rep.SettledNeverRun.Count != 1 ||
		!strings.Contains(strings.Join(rep.Notes, "\n"), "app_id "+app+": the app_id of the orders the bill's rows name") {
		t.Errorf("merchant %v, matched %d, settled never run %d, notes %q", rep.Merchant, rep.Matched.Count, rep.SettledNeverRun.Count, rep.Notes)
	}
	if len(rep.Matched.Items) != 2 {
		t.Errorf("matched items: %+v", rep.Matched.Items)
	}
	for _, it := range rep.Matched.Items {
		if it.State != "ran" {
			t.Errorf("%s: state %q, want ran", it.Key, it.State)
		}
	}

	_, err = Run(ctx, env, Options{Platform: "alipay"}, bill(billtest.Row{Order: trade(7), MerchantOrder: "M7", Amount: "70.00"}))
	var re *Error
	if !errors.As(err, &re) || re.Status != 400 || !strings.Contains(err.Error(), "say which with merchant=<app_id>") {
		t.Errorf("a bill whose rows name no kept order: %v, want 400 asking for merchant=", err)
	}
}
