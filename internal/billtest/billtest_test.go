package billtest_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/platforms/paypal/paypalbill"
	"github.com/idemgate/idemgate/platforms/stripe/stripebill"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
)

// TestBillsRead: every platform's bill writer writes a bill that reads
// with its platform's bill Format (the parsers of the documented
// layouts), whole (its totals agree), row for row.
func TestBillsRead(t *testing.T) {
	at := time.Date(2026, 10, 3, 10, 0, 0, 0, keying.Beijing)
	from, to := time.Date(2026, 10, 3, 0, 0, 0, 0, keying.Beijing), time.Date(2026, 10, 4, 0, 0, 0, 0, keying.Beijing)
	cn := []billtest.Row{
		{Kind: billtest.Payment, Order: "2026100322001458860000000001", MerchantOrder: "M1", Merchant: "1900000109", Amount: "12.30", Currency: "CNY", Time: at},
		{Kind: billtest.Refund, Order: "2026100322001458860000000001", MerchantOrder: "M1", Merchant: "1900000109", Refund: "R1", Amount: "2.30", Currency: "CNY", Time: at.Add(time.Hour)},
	}
	intl := []billtest.Row{
		{Kind: billtest.Payment, Order: "ch_1", PaymentIntent: "pi_1", MerchantOrder: "M1", Amount: "12.30", Currency: "USD", Time: at},
		{Kind: billtest.Refund, Order: "ch_1", PaymentIntent: "pi_1", Refund: "re_1", MerchantOrder: "M1", Amount: "2.30", Currency: "USD", Time: at.Add(time.Hour)},
		{Kind: billtest.Payout, Order: "po_1", Amount: "10.00", Currency: "USD", Time: at.Add(2 * time.Hour)},
	}
	for _, c := range []struct {
		platform string
		start    func(io.Writer) billtest.Writer
		rows     []billtest.Row
		checked  bool
	}{
		{"alipay", func(w io.Writer) billtest.Writer { return alipaybill.NewWriter(w, "20880211096256330156", from, to) }, cn, true},
		{"wechatpay", wechatpaybill.NewWriter, cn, true},
		{"stripe", func(w io.Writer) billtest.Writer { return stripebill.NewWriter(w, true) }, intl, false},
		{"stripe", func(w io.Writer) billtest.Writer { return stripebill.NewWriter(w, false) }, intl, false},
		{"paypal", func(w io.Writer) billtest.Writer { return paypalbill.NewWriter(w, "ACCOUNT1", from, to) }, intl, true},
	} {
		rd, err := platforms.BillOf(c.platform).Format.Open(bytes.NewReader(billtest.Bytes(c.start, c.rows)))
		if err != nil {
			t.Fatalf("%s: %v", c.platform, err)
		}
		for i, want := range c.rows {
			got, err := rd.Next()
			if err != nil {
				t.Fatalf("%s row %d: %v", c.platform, i, err)
			}
			kind := map[billtest.Kind]bill.Kind{billtest.Payment: bill.Payment, billtest.Refund: bill.Refund, billtest.Payout: bill.Other}[want.Kind]
			refund := want.Refund
			if c.platform == "stripe" && want.Kind == billtest.Refund && got.Refund == "" {
				refund = "" // the Dashboard export names the charge only
			}
			if got.Kind != kind || got.Amount != want.Amount || got.Currency != want.Currency || got.Refund != refund ||
				(want.Kind != billtest.Payout && got.Order != want.Order) || !got.Time.Equal(want.Time.Truncate(time.Minute)) && !got.Time.Equal(want.Time) {
				t.Errorf("%s row %d: %+v, want %+v", c.platform, i, got, want)
			}
			if c.platform == "wechatpay" && got.Merchant != want.Merchant {
				t.Errorf("wechatpay row %d: merchant %q", i, got.Merchant)
			}
		}
		if _, err := rd.Next(); err != io.EOF {
			t.Fatalf("%s: end %v", c.platform, err)
		}
		if rd.Summary().Checked != c.checked {
			t.Errorf("%s: checked %v", c.platform, rd.Summary().Checked)
		}
	}
}
