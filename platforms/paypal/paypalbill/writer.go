// Package paypalbill writes PayPal's settlement report (STL: record types
// and their counts, the layout the platform's bill.go reads) for tests and
// sample bills. It is test support: no binary links it.
package paypalbill

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
)

// billWriter is one bill being written.
type billWriter struct {
	w    *bufio.Writer
	rows int
}

const billCH = `"CH","Transaction ID","Invoice ID","PayPal Reference ID","PayPal Reference ID Type",` +
	`"Transaction Event Code","Transaction Initiation Date","Transaction Completion Date",` +
	`"Transaction  Debit or Credit","Gross Transaction Amount","Gross Transaction Currency",` +
	`"Fee Debit or Credit","Fee Amount","Fee Currency","Custom Field","Consumer ID","Payment Tracking ID","Store ID"`

// sectionClock is the clock of the report's section and rows (UTC−7).
var sectionClock = time.FixedZone("", -7*3600)

// NewWriter starts PayPal's settlement report for account and the
// section [from, to): RH, FH, SH, CH, then SB rows; Close writes SF, SC,
// RF, RC and FF with the counts.
func NewWriter(w io.Writer, account string, from, to time.Time) billtest.Writer {
	p := &billWriter{w: bufio.NewWriterSize(w, 64<<10)}
	const layout = "2006/01/02 15:04:05 -0700"
	fmt.Fprintf(p.w, "\"RH\",%s,\"A\",%q,009\n\"FH\",01\n\"SH\",%s,%s,%q,\"\"\n%s\n", time.Now().In(sectionClock).Format(layout), account,
		from.In(sectionClock).Format(layout), to.Add(-time.Second).In(sectionClock).Format(layout), account, billCH)
	return p
}

func (p *billWriter) Row(r billtest.Row) error {
	p.rows++
	txn, ref, refType, code, drcr := r.Order, "", "", "T0006", "CR"
	switch r.Kind {
	case billtest.Refund:
		txn, ref, refType, code, drcr = r.Refund, r.Order, "TXN", "T1107", "DR"
	case billtest.Payout:
		code, drcr = "T0400", "DR"
	}
	at := r.Time.In(sectionClock).Format("2006/01/02 15:04:05 -0700")
	c := billtest.Cents(r.Amount)
	fmt.Fprintf(p.w, `"SB","%s","%s","%s","%s","%s",%s,%s,"%s",%d,"%s","DR",%d,"%s","","buyer@example.com","",""`+"\n",
		txn, r.MerchantOrder, ref, refType, code, at, at, drcr, c, strings.ToUpper(r.Currency), c/30, strings.ToUpper(r.Currency))
	return nil
}

func (p *billWriter) Close() error {
	fmt.Fprintf(p.w, "\"SF\",\"USD\",0,0,0,0\n\"SC\",%d\n\"RF\",\"USD\",0,0,0,0\n\"RC\",%d\n\"FF\",%d\n", p.rows, p.rows, p.rows+9)
	return p.w.Flush()
}

// Sample is a day of the settlement report, the day in its section's
// clock.
var Sample = billtest.Sample{
	Name: "paypal", Zone: sectionClock, Currency: "USD", Account: "SAMPLEACCOUNT01",
	PaymentID: func(_ time.Time, i int) string { return fmt.Sprintf("9SAMPLE%010d", i) },
	RefundID:  func(i int) string { return fmt.Sprintf("8REFUND%010d", i) },
	Files: func(day time.Time, account string, rows []billtest.Row) []billtest.File {
		return []billtest.File{{Name: "STL-" + day.Format("20060102") + ".01.009.CSV",
			Data: billtest.Bytes(func(w io.Writer) billtest.Writer { return NewWriter(w, account, day, day.AddDate(0, 0, 1)) }, rows)}}
	},
}
