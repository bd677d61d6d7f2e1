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
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
	"github.com/idemgate/idemgate/platforms/wechatpayv2"
	"github.com/idemgate/idemgate/store"
)

// TestRunWechatPayV2Partner: a WeChat Pay v2 service provider's (服务商)
// route pins its own mch_id, so the keys of its sub-merchants' orders name
// it, not the 特约商户号 the bill of a sub-merchant names. Notifications
// signed with the provider's API key, verified by the real preset, run
// into a memory store; the sub-merchant's bill matches them (a payment and
// a refund), its run, not settled leaves out another sub-merchant's
// orders under the same provider, a direct merchant's keys are as before,
// and a bill of a sub-merchant the scope has never seen is refused.
func TestRunWechatPayV2Partner(t *testing.T) {
	const (
		apiKey = "192006250b4c09247ec02edce69f6a2d"
		sp     = platformtest.WechatPayV2SpMchID
		subA   = platformtest.WechatPayV2SubMchID
		subB   = "1900000222"
	)
	cst := time.FixedZone("CST", 8*3600)
	day := time.Date(2026, 10, 3, 0, 0, 0, 0, cst)
	txn := func(i int) string { return fmt.Sprintf("4200000925202610030%09d", i) }
	ctx := context.Background()
	st := store.NewMemory()
	t.Cleanup(func() { st.Close() })
	w := platformtest.WechatPayV2{APIKey: apiKey}
	pl, err := wechatpayv2.New(wechatpayv2.Config{Secret: apiKey, MchIDs: []string{sp}})
	if err != nil {
		t.Fatal(err)
	}
	// run verifies body as the route does and settles its key, the body
	// journaled as the gate keeps it.
	run := func(body []byte) string {
		t.Helper()
		n, err := pl.Verify(&keying.Request{Method: "POST", Body: body, Now: day.Add(30 * time.Hour)})
		if err != nil {
			t.Fatalf("verify: %v", err)
		}
		key := "wechatpay_v2:" + n.Key
		won, err := st.Claim(ctx, key, "", time.Minute)
		if err != nil || won.Outcome != store.Won {
			t.Fatalf("claim %s: %+v %v", key, won, err)
		}
		o := &store.OrderRun{TTL: 72 * time.Hour, Amount: n.Money.Amount, Currency: n.Money.Currency, Settles: n.Settles, At: n.At}
		j := store.Journal{Notification: &store.Notification{Method: "POST", URI: "/notify", Body: body, BodySize: int64(len(body))}}
		if err := st.Complete(ctx, key, won.Token, store.Answer{Status: 200, BodyCached: true, Order: o}, time.Hour, j); err != nil {
			t.Fatalf("complete %s: %v", key, err)
		}
		return key
	}
	pay := func(sub string, i, fen int, at time.Time) string {
		f := platformtest.WechatPayV2PartnerPayment(sub, txn(i), fmt.Sprintf("M%d", i), fen)
		f["time_end"] = at.Format("20060102150405")
		return run(w.Body(w.Sign(f)))
	}
	if k := pay(subA, 1, 1000, day.Add(9*time.Hour)); k != "wechatpay_v2:"+sp+":"+txn(1)+":paid" {
		t.Fatalf("the partner key %s names not the provider's mch_id", k)
	}
	pay(subA, 2, 500, day.Add(10*time.Hour))
	pay(subA, 4, 800, day.Add(11*time.Hour)) // in no bill: run, not settled
	pay(subB, 3, 700, day.Add(12*time.Hour)) // another sub-merchant's: not in A's bill, not A's run, not settled
	// In the day's last minutes, in neither bill: each sub-merchant's
	// pending list holds its own, though one provider's keys hold both.
	pay(subA, 6, 600, day.Add(23*time.Hour+55*time.Minute))
	pay(subB, 8, 400, day.Add(23*time.Hour+56*time.Minute))
	// A refund of A's first payment: req_info under the provider's key,
	// the envelope naming the provider and the sub-merchant.
	env := w.RefundInfoFields(t, map[string]string{"transaction_id": txn(1), "out_trade_no": "M1", "refund_id": "50000000382019052709732678859",
		"out_refund_no": "R1", "total_fee": "1000", "refund_fee": "300", "settlement_refund_fee": "300", "refund_status": "SUCCESS",
		"success_time": day.Add(13 * time.Hour).Format(time.DateTime), "refund_recv_accout": "支付用户的零钱"}, signer.Nonce(32))
	env["mch_id"], env["sub_mch_id"] = sp, subA
	run(signer.WechatPayV2XML(env))

	bill := func(rows ...billtest.Row) *bytes.Buffer {
		var b bytes.Buffer
		bw := wechatpaybill.NewWriter(&b)
		for _, r := range rows {
			if err := bw.Row(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := bw.Close(); err != nil {
			t.Fatal(err)
		}
		return &b
	}
	row := func(sub string, i int, amount string, at time.Time) billtest.Row {
		return billtest.Row{Kind: billtest.Payment, Order: txn(i), MerchantOrder: fmt.Sprintf("M%d", i), Amount: amount,
			Currency: "CNY", Time: at, Merchant: sp, SubMerchant: sub}
	}
	refund := row(subA, 1, "3.00", day.Add(13*time.Hour))
	refund.Kind, refund.Refund = billtest.Refund, "R1"
	pending := &memPending{m: map[string][]byte{}}
	renv := Env{StoreID: "mem", Store: st, Pending: pending, Now: func() time.Time { return day.Add(30 * time.Hour) },
		Routes: func(scope string) []Route {
			return []Route{{Platform: "wechatpay_v2", Merchants: []string{sp}}}
		}}

	rep, err := Run(ctx, renv, Options{Platform: "wechatpay_v2", Matched: true},
		bill(row(subA, 1, "10.00", day.Add(9*time.Hour)), row(subA, 2, "5.00", day.Add(10*time.Hour)), refund,
			row(subA, 5, "9.00", day.Add(14*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	item := func(it Item) string {
		return strings.TrimPrefix(it.Order, "wechatpay_v2:"+sp+":4200000925202610030") + "/" + it.Event
	}
	got := func(c Category) string { return categoryLine(c, item) }
	wantCategories(t, "the sub-merchant's bill, ", rep, item, map[string]string{
		"matched":           "3 map[CNY:15.00] refunds map[CNY:3.00] [000000001/paid 000000002/paid 000000001/refund:R1]",
		"settled_never_run": "1 map[CNY:9.00] [000000005/paid]",
		"run_not_settled":   "1 map[CNY:8.00] [000000004/paid]",
		"amount_differs":    "0 map[] []",
		"pending_next_bill": "1 map[CNY:6.00] [000000006/paid]",
	})
	if len(rep.Merchant) != 1 || rep.Merchant[0] != subA {
		t.Errorf("the report's merchant %v, want the sub-merchant %s", rep.Merchant, subA)
	}
	if notes := strings.Join(rep.Notes, "\n"); !strings.Contains(notes, "2 events of the provider's other sub-merchants left out") {
		t.Errorf("notes: %s", notes)
	}

	// A sub-merchant the scope has never seen: refused, not reconciled.
	_, err = Run(ctx, renv, Options{Platform: "wechatpay_v2"}, bill(row("1900000333", 9, "9.00", day.Add(9*time.Hour))))
	var re *Error
	if !errors.As(err, &re) || re.Status != 400 || !strings.Contains(err.Error(), "merchant 1900000333's") ||
		!strings.Contains(err.Error(), "not reconciled") || !strings.Contains(err.Error(), "merchant="+sp) {
		t.Errorf("a bill of a sub-merchant never seen: %v, want 400 naming it", err)
	}
	// B was seen (its notification names it): its bill reconciles, and
	// A's orders are not its run, not settled.
	rep, err = Run(ctx, renv, Options{Platform: "wechatpay_v2"}, bill(row(subB, 3, "7.00", day.Add(12*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Matched.Count != 1 || rep.RunNotSettled.Count != 0 || rep.SettledNeverRun.Count != 0 || got(rep.PendingNextBill) != "1 map[CNY:4.00] [000000008/paid]" {
		t.Errorf("the other sub-merchant's bill: matched %d, run not settled %d, settled never run %d, pending %s",
			rep.Matched.Count, rep.RunNotSettled.Count, rep.SettledNeverRun.Count, got(rep.PendingNextBill))
	}
	// The next day's bill of A, without its pending payment: in neither
	// bill, so run, not settled, though B's bill was reconciled after A's.
	next := day.Add(24 * time.Hour)
	rep, err = Run(ctx, renv, Options{Platform: "wechatpay_v2"}, bill(row(subA, 10, "1.00", next.Add(time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	if g := got(rep.RunNotSettled); g != "1 map[CNY:6.00] [000000006/paid]" || !strings.Contains(rep.RunNotSettled.Items[0].Note, "pending since") {
		t.Errorf("A's next bill, run not settled: %s %+v, want A's pending payment", g, rep.RunNotSettled.Items)
	}
}
