package paypal

import (
	"bytes"
	"io"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying/bill"
)

// PayPal's Settlement Report (STL-yyyymmdd.….CSV, by SFTP or the website),
// the report PayPal documents for reconciling settled funds
// (developer.paypal.com/docs/reports/sftp-reports/settlement-report/):
// "Money amount fields are unsigned, with no currency symbol, decimal
// separator, or other punctuation. Amounts should be interpreted by the
// debit or credit column … 100,00 yen and $100.00 USD are both represented
// as 10000"; UTF-8 (older files UTF-16, with a BOM); varchar values quoted.
//
// Every row starts with its record type: RH report header (generation
// date, reporting window, account id, version), FH file header, SH section
// header (start, end, account id), CH the column names, SB one transaction,
// SF section footer (totals), SC section record count, RF report footer,
// RC report record count, FF file footer. The SB columns (CH) include
// Transaction ID, Invoice ID, PayPal Reference ID, PayPal Reference ID Type,
// Transaction Event Code, Transaction Initiation Date, Transaction
// Completion Date, Transaction  Debit or Credit (two spaces, sic),
// Gross Transaction Amount, Gross Transaction Currency, Fee …, Custom Field.
// Cross-checked with magento/magento2 app/code/Magento/Paypal/Model/Report/Settlement.php
// (column map; amounts divided by 100), wikimedia/wikimedia-fundraising-tools
// audit/paypal (a T1107 refund row: "DR",15000,"JPY", its PayPal
// Reference ID the refunded transaction, type TXN; dates
// 2017/03/22 09:34:59 -0700) and Parse::PayPal::TxDetailReport (RC holds the
// number of SB rows). The Transaction Detail Report (TRR) shares the
// layout and reads here too.
//
// T-codes (developer.paypal.com/docs/transaction-search/transaction-event-codes):
// T00nn is a payment (CR to the merchant: money in), T1107 a payment refund
// initiated by the merchant (DR). Every other code is Other.
//
// The record counts make the report prove itself whole: SC must match the
// section's SB rows, RC the report's, and the file must end with FF after RC.

type settlementReport struct {
	bill.Base
	f                           [][]byte // the fields of the record read, reused
	cols                        bill.Columns
	width                       int
	iTxn, iInvoice, iRef, iRefT int
	iCode, iInit, iDone, iDrCr  int
	iGross, iCur, iStatus       int
	inSection                   int  // SB rows in the current section
	total                       int  // SB rows in the report
	counted, footed             bool // RC, FF read
}

// No layout with a zone abbreviation: Go would read an unknown one ("PDT") as UTC.
var paypalTimes = []string{"2006/01/02 15:04:05 -0700", time.RFC3339}

// Bill is what reconciliation with PayPal's settlement report allows
// for: a section's end is its last second, and its rows name the
// transaction (the event's resource), not the event.
var Bill = &bill.Traits{Format: billFormat, EndsInclusive: true, RefPaths: []string{"resource.id"}}

// billFormat is a PayPal settlement report.
var billFormat = bill.NewFormat("paypal", openPayPal)

func openPayPal(b *bill.Base) (bill.Parser, error) {
	p := &settlementReport{Base: *b}
	p.Sum.Layout = "paypal settlement report"
	f, line, err := p.Record(p.f)
	if err == io.EOF {
		return nil, p.Whole(bill.ErrIncomplete, "the report is empty")
	}
	if err != nil {
		return nil, p.Read(err)
	}
	p.f = f
	if string(f[0]) != "RH" {
		msg := "not a PayPal settlement report: the first row is not its RH report header"
		if bytes.Contains(bytes.Join(f, []byte(",")), []byte("Transaction ID")) {
			msg += " (the website's Activity download has no record counts to prove it whole: " +
				"use the Settlement Report, STL-yyyymmdd….CSV)"
		}
		return nil, p.BadAt(line, "%s", msg)
	}
	if err := p.control(f, line); err != nil {
		return nil, err
	}
	return p, nil
}

// normal folds a column name: "Transaction  Debit or Credit" has two
// spaces in the specification and one in some files.
func normal(b []byte) string {
	return strings.Join(strings.Fields(string(b)), " ")
}

func (p *settlementReport) Next() (bill.Row, error) {
	for {
		f, line, err := p.Record(p.f)
		if err == io.EOF {
			return bill.Row{}, p.end()
		}
		if err != nil {
			return bill.Row{}, p.Read(err)
		}
		p.f = f
		if len(f) == 1 && len(bytes.TrimSpace(f[0])) == 0 {
			continue
		}
		if p.footed {
			if string(f[0]) != "RH" {
				return bill.Row{}, p.BadAt(line, "a %s row after the file footer (FF)", bill.Clip(f[0]))
			}
			p.footed, p.counted = false, false // the next part of a report split over files
		}
		if string(f[0]) == "SB" {
			return p.row(f, line)
		}
		if err := p.control(f, line); err != nil {
			return bill.Row{}, err
		}
	}
}

// control reads every row but SB.
func (p *settlementReport) control(f [][]byte, line int) error {
	arg := func(i int) string { return strings.TrimSpace(string(bill.At(f, i))) }
	switch string(f[0]) {
	case "RH":
		if p.Sum.Account == "" {
			p.Sum.Account = arg(3)
		}
	case "FH", "SF", "RF":
	case "SH":
		p.inSection = 0
		if acct := arg(3); acct != "" {
			p.Sum.Account = acct
		}
		from, err1 := bill.ParseClock([]byte(arg(1)), time.UTC, paypalTimes...)
		to, err2 := bill.ParseClock([]byte(arg(2)), time.UTC, paypalTimes...)
		if err1 == nil && err2 == nil {
			from, to = from.UTC(), to.UTC()
			if p.Sum.From.IsZero() || from.Before(p.Sum.From) {
				p.Sum.From = from
			}
			if to.After(p.Sum.To) {
				p.Sum.To = to
			}
		}
	case "CH":
		p.cols = bill.Columns{}
		for i, n := range f {
			p.cols[normal(n)] = i
		}
		p.width = len(f)
		if miss := p.cols.Missing([]string{"Transaction ID"}, []string{"Transaction Event Code"},
			[]string{"Transaction Debit or Credit"}, []string{"Gross Transaction Amount"},
			[]string{"Gross Transaction Currency"}); len(miss) > 0 {
			return p.BadAt(line, "the column header (CH) has no %s column", strings.Join(miss, ", "))
		}
		c := p.cols
		p.iTxn, p.iCode = c["Transaction ID"], c["Transaction Event Code"]
		p.iDrCr, p.iGross, p.iCur = c["Transaction Debit or Credit"], c["Gross Transaction Amount"], c["Gross Transaction Currency"]
		p.iInvoice, p.iRef, p.iRefT = c.Index("Invoice ID"), c.Index("PayPal Reference ID"), c.Index("PayPal Reference ID Type")
		p.iInit, p.iDone = c.Index("Transaction Initiation Date"), c.Index("Transaction Completion Date")
		p.iStatus = c.Index("Transactional Status")
	case "SC":
		n, ok := bill.Digits([]byte(arg(1)))
		if !ok || arg(1) == "" {
			return p.BadAt(line, "SC count %s is not a number", bill.Clip(bill.At(f, 1)))
		}
		if n != p.inSection {
			return p.Disagree(line, "the section record count (SC) says %d rows, the section has %d: the report is incomplete or altered", n, p.inSection)
		}
	case "RC":
		n, ok := bill.Digits([]byte(arg(1)))
		if !ok || arg(1) == "" {
			return p.BadAt(line, "RC count %s is not a number", bill.Clip(bill.At(f, 1)))
		}
		if n != p.total {
			return p.Disagree(line, "the report record count (RC) says %d rows, the report has %d: it is incomplete or altered", n, p.total)
		}
		p.counted = true
	case "FF":
		p.footed = true
	default:
		return p.BadAt(line, "unknown record type %s (RH, FH, SH, CH, SB, SF, SC, RF, RC, FF)", bill.Clip(f[0]))
	}
	return nil
}

func (p *settlementReport) row(f [][]byte, line int) (bill.Row, error) {
	if p.cols == nil {
		return bill.Row{}, p.BadAt(line, "a transaction (SB) before the column header (CH)")
	}
	if len(f) != p.width {
		return bill.Row{}, p.BadAt(line, "%d values where the column header has %d", len(f), p.width)
	}
	p.inSection++
	p.total++
	row := bill.Row{Line: line, ID: string(bill.Trim(f[p.iTxn])), Currency: p.Intern(bill.Trim(f[p.iCur]), true)}
	code := p.Intern(bill.Trim(f[p.iCode]), false)
	credit := p.Intern(bill.Trim(f[p.iDrCr]), false)
	row.Type = code
	row.Status = p.Intern(bill.Trim(bill.At(f, p.iStatus)), false)
	row.MerchantOrder = string(bill.Trim(bill.At(f, p.iInvoice)))
	switch {
	case strings.HasPrefix(code, "T00") && credit == "CR":
		row.Kind, row.Order = bill.Payment, row.ID
	case code == "T1107" && credit == "DR":
		row.Kind, row.Refund = bill.Refund, row.ID
		if string(bill.Trim(bill.At(f, p.iRefT))) == "TXN" {
			row.Order = string(bill.Trim(bill.At(f, p.iRef)))
		}
	default:
		row.Order = row.ID
	}
	if credit != "CR" && credit != "DR" {
		return bill.Row{}, p.BadAt(line, "Transaction Debit or Credit %s is neither CR nor DR", bill.Clip(f[p.iDrCr]))
	}
	if row.ID == "" {
		return bill.Row{}, p.BadAt(line, "no Transaction ID")
	}
	if !bill.IsCurrency(row.Currency) {
		return bill.Row{}, p.BadAt(line, "Gross Transaction Currency %s is not an ISO 4217 code", bill.Clip(f[p.iCur]))
	}
	gross := bill.Trim(f[p.iGross])
	if bytes.ContainsAny(gross, ".,-") {
		return bill.Row{}, p.BadAt(line, "Gross Transaction Amount %s has punctuation: the report writes hundredths as a plain number", bill.Clip(gross))
	}
	v, err := bill.ParseFixed(gross, 0)
	if err != nil {
		return bill.Row{}, p.BadAt(line, "Gross Transaction Amount %s is not a number", bill.Clip(gross))
	}
	if row.Amount, row.Minor, err = bill.AmountOf(v, 2, row.Currency); err != nil {
		return bill.Row{}, p.BadAt(line, "Gross Transaction Amount %s has cents a %s amount cannot have", bill.Clip(gross), row.Currency)
	}
	when := bill.Trim(bill.At(f, p.iDone))
	if len(when) == 0 {
		when = bill.Trim(bill.At(f, p.iInit))
	}
	if len(when) > 0 {
		if row.Time, err = bill.ParseClock(when, time.UTC, paypalTimes...); err != nil {
			return bill.Row{}, p.BadAt(line, "date %s is not yyyy/mm/dd hh:mm:ss ±hhmm", bill.Clip(when))
		}
		row.Time = row.Time.UTC()
	}
	return row, nil
}

// end is io.EOF for a report that counted its rows and closed its file.
func (p *settlementReport) end() error {
	switch {
	case !p.footed:
		return p.Whole(bill.ErrIncomplete, "no file footer (FF) after %d rows: the report is truncated", p.total)
	case !p.counted:
		return p.Whole(bill.ErrIncomplete, "no report record count (RC): this file is one part of a report split over files; pass all parts in order")
	}
	p.Sum.Checked = true
	return io.EOF
}
