package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
	"github.com/idemgate/idemgate/store"
)

// memPending is a PendingStore in a map: what the Caddy adapter keeps in
// Caddy's storage.
type memPending struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (p *memPending) Load(_ context.Context, name string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.m[name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return b, nil
}

func (p *memPending) Store(_ context.Context, name string, b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[name] = b
	return nil
}

// TestRunWithoutCaddy reconciles two days of WeChat Pay bills against a
// memory store, with the Env a caller outside Caddy fills: every category,
// the route's event, and a pending item carried to the next day's bill
// through the PendingStore, where that bill settles it.
func TestRunWithoutCaddy(t *testing.T) {
	const mch = "1900000109"
	cst := time.FixedZone("CST", 8*3600)
	day := time.Date(2026, 10, 3, 0, 0, 0, 0, cst)
	txn := func(i int) string { return fmt.Sprintf("4200000925202610030%09d", i) }
	ctx := context.Background()
	st := store.NewMemory()
	t.Cleanup(func() { st.Close() })
	ran := func(i int, amount string, at time.Time) {
		t.Helper()
		key := "wechatpay:" + mch + ":" + txn(i) + ":paid"
		won, err := st.Claim(ctx, key, "", time.Minute)
		if err != nil || won.Outcome != store.Won {
			t.Fatalf("claim %s: %+v %v", key, won, err)
		}
		run := &store.OrderRun{TTL: 24 * time.Hour, Amount: amount, Currency: "CNY", Settles: keying.SettlesPayment, At: at}
		if err := st.Complete(ctx, key, won.Token, store.Answer{Status: 200, BodyCached: true, Order: run}, time.Hour, store.Journal{}); err != nil {
			t.Fatalf("complete %s: %v", key, err)
		}
	}
	ran(1, "12.30", day.Add(9*time.Hour))                // matched
	ran(2, "5.00", day.Add(10*time.Hour))                // the bill says 6.00
	ran(4, "7.00", day.Add(23*time.Hour+55*time.Minute)) // the next day's bill has it
	ran(5, "8.00", day.Add(11*time.Hour))                // in no bill
	bill := func(rows ...billtest.Row) *bytes.Buffer {
		var b bytes.Buffer
		w := wechatpaybill.NewWriter(&b)
		for _, r := range rows {
			if err := w.Row(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return &b
	}
	row := func(i int, amount string, at time.Time) billtest.Row {
		return billtest.Row{Kind: billtest.Payment, Order: txn(i), MerchantOrder: fmt.Sprintf("M%d", i), Amount: amount,
			Currency: "CNY", Time: at, Merchant: mch}
	}
	var emitted []string
	pending := &memPending{m: map[string][]byte{}}
	env := Env{StoreID: "mem", Store: st, Pending: pending,
		Now: func() time.Time { return day.Add(30 * time.Hour) },
		Routes: func(scope string) []Route {
			if scope != "wechatpay" {
				return nil
			}
			return []Route{{Platform: "wechatpay", Merchants: []string{mch},
				Emit: func(name string, data map[string]any) { emitted = append(emitted, name) }}}
		}}

	rep, err := Run(ctx, env, Options{Platform: "wechatpay", Matched: true},
		bill(row(1, "12.30", day.Add(9*time.Hour)), row(2, "6.00", day.Add(10*time.Hour)), row(3, "9.00", day.Add(12*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	wantCategories(t, "", rep, func(it Item) string {
		return strings.TrimPrefix(it.Order, "wechatpay:"+mch+":4200000925202610030") + "/" + it.State
	}, map[string]string{
		"matched":           "1 map[CNY:12.30] [000000001/answered]",
		"amount_differs":    "1 map[CNY:1.00] [000000002/answered]", // the difference, 6.00 - 5.00
		"settled_never_run": "1 map[CNY:9.00] [000000003/none]",
		"run_not_settled":   "1 map[CNY:8.00] [000000005/answered]",
		"pending_next_bill": "1 map[CNY:7.00] [000000004/answered]",
	})
	if rep.Store != "mem" || rep.Period == nil || rep.Period.Source != "rows" || !rep.Period.To.Equal(day.Add(24*time.Hour)) {
		t.Errorf("store %q, period %+v", rep.Store, rep.Period)
	}
	if len(emitted) != 1 || emitted[0] != "idempotency.reconcile" {
		t.Errorf("the route emitted %v, want one idempotency.reconcile", emitted)
	}
	if len(pending.m) != 1 {
		t.Fatalf("pending lists stored: %d, want 1", len(pending.m))
	}
	for name, b := range pending.m {
		var f pendingFile
		if err := json.Unmarshal(b, &f); err != nil || len(f.Keys) != 1 || !strings.Contains(f.Keys[0], txn(4)) || !strings.Contains(name, "/mem/wechatpay/"+mch+"/") {
			t.Errorf("pending list %s: %s (%v)", name, b, err)
		}
	}

	// The next day's bill settles the pending payment (dated after
	// midnight): it matches, and the note says the list was cleared.
	next := day.Add(24 * time.Hour)
	rep, err = Run(ctx, env, Options{Platform: "wechatpay"}, bill(row(4, "7.00", next.Add(2*time.Second))))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Matched.Count != 1 || rep.RunNotSettled.Count != 0 || rep.PendingNextBill.Count != 0 {
		t.Errorf("next day: matched %d, run not settled %d, pending %d", rep.Matched.Count, rep.RunNotSettled.Count, rep.PendingNextBill.Count)
	}
	if notes := strings.Join(rep.Notes, "\n"); !strings.Contains(notes, "1 pending from the bill that ended 2026-10-04 00:00: 1 settled in this bill, 0 in neither") {
		t.Errorf("next day's notes: %s", notes)
	}
}

// TestRunRefusals: what Run refuses before it reads a store, with the
// status the admin API answers.
func TestRunRefusals(t *testing.T) {
	env := Env{StoreID: "mem", Store: store.NewMemory(),
		Routes: func(string) []Route { return []Route{{Platform: "alipay"}} }}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Platform: "nope"}, "platform must be one of"},
		{Options{Platform: "wechatpay", Scope: "shop"}, "scope shop has alipay routes, and this is a wechatpay bill"},
	} {
		_, err := Run(context.Background(), env, c.opts, strings.NewReader(""))
		var re *Error
		if !errors.As(err, &re) || re.Status != 400 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want 400 %q", c.opts, err, c.want)
		}
	}
}

// wantCategories compares each category of rep named in want ("matched",
// "amount_differs", "settled_never_run", "run_not_settled",
// "pending_next_bill") with its want: "<count> <amounts> [<item>…]", each
// item as name writes it.
func wantCategories(t *testing.T, label string, rep *Report, name func(Item) string, want map[string]string) {
	t.Helper()
	cats := map[string]Category{"matched": rep.Matched, "amount_differs": rep.AmountDiffers,
		"settled_never_run": rep.SettledNeverRun, "run_not_settled": rep.RunNotSettled, "pending_next_bill": rep.PendingNextBill}
	for cat, w := range want {
		c, ok := cats[cat]
		if !ok {
			t.Fatalf("no category %q", cat)
		}
		if g := categoryLine(c, name); g != w {
			t.Errorf("%s%s: %s, want %s", label, cat, g, w)
		}
	}
}

// categoryLine is c as wantCategories compares it: "<count> <amounts>
// [refunds <refund_amounts>] [<item>…]".
func categoryLine(c Category, name func(Item) string) string {
	var s []string
	for _, it := range c.Items {
		s = append(s, name(it))
	}
	refunds := ""
	if len(c.RefundAmounts) > 0 {
		refunds = fmt.Sprintf(" refunds %v", c.RefundAmounts)
	}
	return fmt.Sprintf("%d %v%s %v", c.Count, c.Amounts, refunds, s)
}
