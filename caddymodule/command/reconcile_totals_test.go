package command

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/reconcile"
)

// TestReconcileTableTotals: the table prints a category's payments and
// refunds in columns apart, never one figure, and an amount that differs
// with its signed difference, which its category's totals add.
func TestReconcileTableTotals(t *testing.T) {
	rep := &reconcile.Report{Platform: "wechatpay", Scope: "wechatpay", Store: "memory",
		Matched: reconcile.Category{Count: 3, Amounts: map[string]string{"CNY": "100.00"}, RefundAmounts: map[string]string{"CNY": "20.00"}},
		AmountDiffers: reconcile.Category{Count: 2, Amounts: map[string]string{"CNY": "1.00"}, RefundAmounts: map[string]string{"CNY": "-0.50"},
			Items: []reconcile.Item{
				{Order: "o1", Event: "paid", BillAmount: "6.00", NotifiedAmount: "5.00", Difference: "1.00", Currency: "CNY", State: "answered", Key: "k1"},
				{Order: "o2", Event: "refund:R2", BillAmount: "3.00", NotifiedAmount: "3.50", Difference: "-0.50", Currency: "CNY", State: "answered", Key: "k2"},
			}}}
	var b strings.Builder
	printReport(&b, rep)
	out := b.String()
	for _, want := range []string{
		"CATEGORY            COUNT  PAYMENTS    REFUNDS",
		"amount differs      2      CNY +1.00   CNY -0.50",
		"matched             3      CNY 100.00  CNY 20.00",
		"LINE  ORDER  EVENT      BILL      NOTIFIED  DIFFERENCE  STATE     KEY",
		"o1     paid       6.00 CNY  5.00 CNY  +1.00 CNY   answered  k1",
		"o2     refund:R2  3.00 CNY  3.50 CNY  -0.50 CNY   answered  k2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}
