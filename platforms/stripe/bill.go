package stripe

import (
	"bytes"
	"io"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying/bill"
)

// Stripe's balance-transaction exports. Two layouts carry the same rows,
// one per balance transaction, and both write amounts in MAJOR units of
// the currency ("97.00"; JPY "1000"), unlike the API's minor units:
//
//   - The Dashboard's balance history export (Balance → Export):
//     id,Type,Source,Amount,Fee,Net,Currency,Created (UTC),Available On (UTC),Description,
//     Customer Facing Amount,Customer Facing Currency,Transfer,Transfer Date (UTC)…
//     (columns vary with the export's settings). Public captures show a
//     refund row with the charge as its Source and a negative Amount:
//     txn_18bB5g…,refund,ch_18BnYG…,-249.00,-7.52,-241.48,usd,2016-07-25 15:34,…
//   - The Reporting API's itemized balance reports
//     (balance_change_from_activity.itemized.N, docs.stripe.com/reports/report-types#balance):
//     balance_transaction_id,created_utc,…,currency,gross,fee,net,reporting_category,source_id,…,
//     charge_id,payment_intent_id,… — "gross: Gross amount of the transaction.
//     Expressed in major units of the currency (e.g. dollars for USD, yen for JPY)".
//
// Columns are found by name, case-insensitively. Currencies are lower-case
// in both; rows report them upper-case. Neither export has a trailer, so
// the bill cannot prove itself whole: Summary.Checked stays false, and a
// last line without its line end (a download cut mid-row) is an error.

type balanceExport struct {
	bill.Base
	f                            [][]byte // the fields of the record read, reused
	width                        int
	iID, iType, iSource, iAmount int
	iCur, iCreated, iStatus      int
	iCharge, iIntent             int
}

// Stripe's types (docs.stripe.com/reports/balance-transaction-types) and
// reporting categories for money in and money back.
var (
	stripePayments = map[string]bool{"charge": true, "payment": true}
	stripeRefunds  = map[string]bool{"refund": true, "payment_refund": true}
)

// Bill is what reconciliation with Stripe's export allows for: its rows
// name the objects behind an event (stripeRefPaths), not the event.
var Bill = &bill.Traits{Format: billFormat, RefPaths: stripeRefPaths}

// billFormat is a Stripe balance-transaction export.
var billFormat = bill.NewFormat("stripe", openStripe)

func openStripe(b *bill.Base) (bill.Parser, error) {
	s := &balanceExport{Base: *b}
	f, _, err := s.Record(s.f)
	if err == io.EOF {
		return nil, s.Whole(bill.ErrIncomplete, "the export is empty")
	}
	if err != nil {
		return nil, s.Read(err)
	}
	if !s.EOL() {
		return nil, s.Whole(bill.ErrIncomplete, "the export ends inside its header line")
	}
	cols := bill.Columns{}
	for i, n := range f {
		cols[strings.ToLower(strings.TrimSpace(string(n)))] = i
	}
	s.width = len(f)
	if miss := cols.Missing([]string{"id", "balance_transaction_id"}, []string{"type", "reporting_category"},
		[]string{"source", "source_id"}, []string{"amount", "gross"}, []string{"currency"}); len(miss) > 0 {
		return nil, s.BadAt(1, "not a Stripe balance-transaction export: no %s column", strings.Join(miss, ", "))
	}
	s.iID = cols.Index("id", "balance_transaction_id")
	s.iType = cols.Index("type", "reporting_category")
	s.iSource = cols.Index("source", "source_id")
	s.iAmount = cols.Index("amount", "gross")
	s.iCur = cols.Index("currency")
	s.iCreated = cols.Index("created (utc)", "created_utc", "created")
	s.iStatus = cols.Index("status")
	s.iCharge = cols.Index("charge_id")
	s.iIntent = cols.Index("payment_intent_id")
	s.Sum.Layout = "stripe balance history export"
	if cols.Index("balance_transaction_id") >= 0 {
		s.Sum.Layout = "stripe itemized balance report"
	}
	return s, nil
}

var stripeTimes = []string{"2006-01-02 15:04", time.RFC3339, "2006-01-02T15:04:05", "2006-01-02"}

func (s *balanceExport) Next() (bill.Row, error) {
	for {
		f, line, err := s.Record(s.f)
		if err == io.EOF {
			return bill.Row{}, io.EOF
		}
		if err != nil {
			return bill.Row{}, s.Read(err)
		}
		s.f = f
		if len(f) == 1 && len(bytes.TrimSpace(f[0])) == 0 {
			continue
		}
		if len(f) != s.width {
			return bill.Row{}, s.BadAt(line, "%d values where the header has %d columns", len(f), s.width)
		}
		row, err := s.row(f, line)
		if err == nil && !s.EOL() {
			return bill.Row{}, s.BadAt(line, "the export ends in the middle of this row")
		}
		return row, err
	}
}

func (s *balanceExport) row(f [][]byte, line int) (bill.Row, error) {
	row := bill.Row{Line: line, ID: string(f[s.iID]), Currency: s.Intern(bill.Trim(f[s.iCur]), true)}
	typ := s.Intern(bill.Trim(f[s.iType]), false)
	row.Type = typ
	row.Status = s.Intern(bill.At(f, s.iStatus), false)
	row.PaymentIntent = string(bill.At(f, s.iIntent))
	source := string(bill.Trim(f[s.iSource]))
	charge := string(bill.Trim(bill.At(f, s.iCharge)))
	switch {
	case stripePayments[typ]:
		row.Kind, row.Order = bill.Payment, source
	case stripeRefunds[typ]:
		row.Kind = bill.Refund
		if strings.HasPrefix(source, "re_") || strings.HasPrefix(source, "pyr_") {
			row.Refund, row.Order = source, charge
		} else {
			row.Order = source // the Dashboard export names the charge
		}
	default:
		row.Order = source
	}
	if charge != "" && row.Kind != bill.Refund {
		row.Order = charge
	}
	if !bill.IsCurrency(row.Currency) {
		return bill.Row{}, s.BadAt(line, "currency %s is not an ISO 4217 code", bill.Clip(f[s.iCur]))
	}
	exp := bill.Exponent(row.Currency)
	v, err := bill.ParseFixed(bill.Trim(f[s.iAmount]), exp)
	if err != nil {
		return bill.Row{}, s.BadAt(line, "amount %s is not a %s amount in major units", bill.Clip(f[s.iAmount]), row.Currency)
	}
	if row.Kind == bill.Payment && v < 0 {
		return bill.Row{}, s.BadAt(line, "a %s row with a negative amount %s", typ, bill.Clip(f[s.iAmount]))
	}
	row.Amount, row.Minor, _ = bill.AmountOf(v, exp, row.Currency)
	if (row.Kind == bill.Payment || row.Kind == bill.Refund) && row.Order == "" && row.Refund == "" {
		return bill.Row{}, s.BadAt(line, "a %s row without a source", typ)
	}
	if c := bill.Trim(bill.At(f, s.iCreated)); len(c) > 0 {
		if row.Time, err = bill.ParseClock(c, time.UTC, stripeTimes...); err != nil {
			return bill.Row{}, s.BadAt(line, "created %s is not a time", bill.Clip(c))
		}
	}
	return row, nil
}
