package stripe

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billcheck"
	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/paypal/paypalbill"
)

// Stripe exports written by hand to the documented columns (see
// bill.go); the values are ours.

func TestStripeDocumentedLayouts(t *testing.T) {
	created := time.Date(2026, 10, 3, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		bill   string
		layout string
		want   []bill.Row
	}{
		{"Dashboard export: a charge, its partial refund naming the charge, a payout",
			stripeDashboard + "\n" +
				"txn_1,charge,ch_1,97.00,3.07,93.93,eur,2026-10-03 09:00,2026-10-10 00:00,\"Order M1, premium\",97.00,eur,,,\n" +
				"txn_2,refund,ch_1,-40.00,0.00,-40.00,eur,2026-10-03 10:30,2026-10-03 10:30,REFUND FOR CHARGE (Order M1),-40.00,eur,,,\n" +
				"txn_3,payout,po_1,-93.93,0.00,-93.93,eur,2026-10-04 00:00,2026-10-04 00:00,STRIPE PAYOUT,,,,,\n",
			"stripe balance history export",
			[]bill.Row{
				{Line: 2, Kind: bill.Payment, Order: "ch_1", ID: "txn_1", Amount: "97.00", Minor: 9700, Currency: "EUR", Time: created, Type: "charge"},
				{Line: 3, Kind: bill.Refund, Order: "ch_1", ID: "txn_2", Amount: "40.00", Minor: 4000, Currency: "EUR", Time: created.Add(90 * time.Minute), Type: "refund"},
				{Line: 4, Kind: bill.Other, Order: "po_1", ID: "txn_3", Amount: "93.93", Minor: 9393, Currency: "EUR", Time: created.Add(15 * time.Hour), Type: "payout"},
			}},
		{"itemized report: the refund's source is re_…, the charge in charge_id; JPY in yen",
			"balance_transaction_id,created_utc,currency,gross,fee,net,reporting_category,source_id,description,charge_id,payment_intent_id\n" +
				"txn_1,2026-10-03 09:00:00,jpy,1000,36,964,charge,ch_1,\"two\nlines\",ch_1,pi_1\n" +
				"txn_2,2026-10-03T10:30:00Z,jpy,-400,0,-400,refund,re_1,,ch_1,pi_1\n" +
				"txn_3,2026-10-03 11:00:00,usd,12.50,0.66,11.84,charge,py_1,,,\n",
			"stripe itemized balance report",
			[]bill.Row{
				{Line: 2, Kind: bill.Payment, Order: "ch_1", ID: "txn_1", PaymentIntent: "pi_1", Amount: "1000", Minor: 1000, Currency: "JPY", Time: created, Type: "charge"},
				{Line: 4, Kind: bill.Refund, Order: "ch_1", Refund: "re_1", ID: "txn_2", PaymentIntent: "pi_1", Amount: "400", Minor: 400, Currency: "JPY", Time: created.Add(90 * time.Minute), Type: "refund"},
				{Line: 5, Kind: bill.Payment, Order: "py_1", ID: "txn_3", Amount: "12.50", Minor: 1250, Currency: "USD", Time: created.Add(2 * time.Hour), Type: "charge"},
			}},
		{"CRLF and a Status column", "id,Type,Source,Amount,Currency,Created (UTC),Status\r\n" +
			"txn_1,payment_refund,pyr_1,-5.00,usd,2026-10-03 09:00,available\r\n", "stripe balance history export",
			[]bill.Row{{Line: 2, Kind: bill.Refund, Refund: "pyr_1", ID: "txn_1", Amount: "5.00", Minor: 500, Currency: "USD", Time: created, Type: "payment_refund", Status: "available"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sum := billcheck.Rows(t, billFormat, []byte(c.bill), c.want)
			if sum.Layout != c.layout || sum.Checked {
				t.Errorf("layout %q checked %v: want %q, and never checked (no trailer)", sum.Layout, sum.Checked, c.layout)
			}
		})
	}
}

func TestStripeMalformed(t *testing.T) {
	head := "id,Type,Source,Amount,Fee,Net,Currency,Created (UTC),Description\n"
	for _, c := range []struct {
		name, bill string
		kind       error
		line       int
		contains   string
	}{
		{"an exponent is not an amount", head + "txn_1,charge,ch_1,1e3,0,1e3,usd,2026-10-03 09:00,x\n", bill.ErrMalformed, 2, "not a USD amount"},
		{"yen with a fraction", head + "txn_1,charge,ch_1,10.50,0,10.50,jpy,2026-10-03 09:00,x\n", bill.ErrMalformed, 2, "not a JPY amount"},
		{"a negative charge", head + "txn_1,charge,ch_1,-10.00,0,-10.00,usd,2026-10-03 09:00,x\n", bill.ErrMalformed, 2, "negative amount"},
		{"an unquoted comma in the description", head + "txn_1,charge,ch_1,10.00,0,10.00,usd,2026-10-03 09:00,a,b\n", bill.ErrMalformed, 2, "10 values where the header has 9"},
		{"a currency that is not a code", head + "txn_1,charge,ch_1,10.00,0,10.00,dollars,2026-10-03 09:00,x\n", bill.ErrMalformed, 2, "ISO 4217"},
		{"a bad time", head + "txn_1,charge,ch_1,10.00,0,10.00,usd,03/10/2026,x\n", bill.ErrMalformed, 2, "not a time"},
		{"a charge without a source", head + "txn_1,charge,,10.00,0,10.00,usd,2026-10-03 09:00,x\n", bill.ErrMalformed, 2, "without a source"},
		{"the export cut in the last row", head + "txn_1,charge,ch_1,10.00,0,10.00,usd,2026-10-03 09:00,Renew", bill.ErrIncomplete, 2, "ends in the middle"},
		{"the export cut in a quoted value", head + "txn_1,charge,ch_1,10.00,0,10.00,usd,2026-10-03 09:00,\"Renew", bill.ErrIncomplete, 2, "never closed"},
		{"a bare quote", head + "txn_1,charge,ch_1,10.00,0,10.00,usd,2026-10-03 09:00,5\" disk\n", bill.ErrMalformed, 2, "inside an unquoted value"},
		{"no amount column", "id,Type,Source,Currency\n", bill.ErrMalformed, 1, "no amount column"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := billcheck.ReadAll(billFormat, []byte(c.bill))
			billcheck.LineError(t, err, c.kind, c.line, c.contains)
		})
	}
}

// TestStripeHeaderCase: the Reporting API writes lower-case names, the
// Dashboard capitalised ones; neither matters.
func TestStripeHeaderCase(t *testing.T) {
	data := strings.ToUpper("ID,TYPE,SOURCE,AMOUNT,CURRENCY") + "\ntxn_1,charge,ch_1,1.00,usd\n"
	rows, _, err := billcheck.ReadAll(billFormat, []byte(data))
	if err != nil || len(rows) != 1 || rows[0].Minor != 100 {
		t.Fatalf("rows %+v, error %v", rows, err)
	}
}

// billCases are the generated bills the runners every layout passes read.
// The export has no trailer: not Checked.
var billCases = []billcheck.Case{
	{Name: "stripe dashboard", Format: billFormat, Gen: func() billcheck.Generator { return &stripeGen{} },
		Want: (&stripeGen{}).want, Layout: "stripe balance history export", Others: true},
	{Name: "stripe itemized", Format: billFormat, Gen: func() billcheck.Generator { return &stripeGen{itemized: true} },
		Want: (&stripeGen{itemized: true}).want, Layout: "stripe itemized balance report", Others: true},
	{Name: "stripe itemized JPY", Format: billFormat, Gen: func() billcheck.Generator { return &stripeGen{itemized: true, currency: "jpy"} },
		Want: (&stripeGen{itemized: true, currency: "jpy"}).want, Layout: "stripe itemized balance report", Others: true},
}

// TestBillGenerated reads a few hundred generated rows of each export,
// charges, partial refunds and payouts, and compares each row with what
// was written.
func TestBillGenerated(t *testing.T) { billcheck.Generated(t, billCases) }

// TestBillTruncatedAnywhere cuts each export at every byte: every cut but
// one at a line end (which an export without a trailer cannot show)
// fails.
func TestBillTruncatedAnywhere(t *testing.T) { billcheck.TruncatedAnywhere(t, billCases) }

func TestBillOpenErrors(t *testing.T) {
	from := time.Date(2026, 10, 3, 0, 0, 0, 0, time.UTC)
	paypal := billtest.Bytes(func(w io.Writer) billtest.Writer {
		return paypalbill.NewWriter(w, "4X5Y6ZACCOUNT", from, from.AddDate(0, 0, 1))
	},
		[]billtest.Row{
			{Kind: billtest.Payment, Order: "9PX00000000000001", MerchantOrder: "M1", Amount: "25.00", Currency: "USD", Time: from},
			{Kind: billtest.Payment, Order: "9PX00000000000002", MerchantOrder: "M2", Amount: "10.00", Currency: "USD", Time: from},
		})
	billcheck.OpenErrors(t, billFormat, []billcheck.OpenError{
		{Name: "empty stripe", Kind: bill.ErrIncomplete, Contains: "empty"},
		{Name: "a PayPal report read as Stripe's", Data: paypal, Kind: bill.ErrMalformed, Contains: "not a Stripe balance-transaction export"},
	})
}

// TestBillLineTooLong: a line past keying/bill's bound of 64 KiB is an
// error on that line, not a read of the whole file.
func TestBillLineTooLong(t *testing.T) {
	data := append(billcheck.Bytes(&stripeGen{}, 2), bytes.Repeat([]byte("x"), 64<<10+10)...)
	_, _, err := billcheck.ReadAll(billFormat, data)
	billcheck.LineError(t, err, bill.ErrMalformed, 4, "longer than 64 KiB")
}

func FuzzStripeBill(f *testing.F) {
	billcheck.Fuzz(f, billFormat, false, billcheck.Bytes(&stripeGen{}, 6), billcheck.Bytes(&stripeGen{itemized: true, currency: "jpy"}, 6),
		[]byte("id,Type,Source,Amount,Currency\ntxn_1,charge,ch_1,\"1.00\",usd\n"))
}

// BenchmarkBillMillionRows parses a generated export of 1M rows (see
// billcheck.MillionRows for the figures it reports).
func BenchmarkBillMillionRows(b *testing.B) { billcheck.MillionRows(b, millionBill()) }

// BenchmarkBillGenerate measures the generator the tests use.
func BenchmarkBillGenerate(b *testing.B) { billcheck.Generate(b, millionBill()) }

func millionBill() []billcheck.Case {
	c := billCases[1] // the itemized report
	c.Name = "stripe"
	return []billcheck.Case{c}
}
