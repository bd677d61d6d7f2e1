package bill

import (
	"bytes"
	"io"
	"strings"
	"time"
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

type stripe struct {
	base
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

func openStripe(b *base) (parser, error) {
	s := &stripe{base: *b}
	f, _, err := s.l.record(s.f)
	if err == io.EOF {
		return nil, s.whole(ErrIncomplete, "the export is empty")
	}
	if err != nil {
		return nil, s.read(err)
	}
	if !s.l.eol {
		return nil, s.whole(ErrIncomplete, "the export ends inside its header line")
	}
	cols := columns{}
	for i, n := range f {
		cols[strings.ToLower(strings.TrimSpace(string(n)))] = i
	}
	s.width = len(f)
	if miss := cols.missing([]string{"id", "balance_transaction_id"}, []string{"type", "reporting_category"},
		[]string{"source", "source_id"}, []string{"amount", "gross"}, []string{"currency"}); len(miss) > 0 {
		return nil, s.badAt(1, "not a Stripe balance-transaction export: no %s column", strings.Join(miss, ", "))
	}
	s.iID = cols.index("id", "balance_transaction_id")
	s.iType = cols.index("type", "reporting_category")
	s.iSource = cols.index("source", "source_id")
	s.iAmount = cols.index("amount", "gross")
	s.iCur = cols.index("currency")
	s.iCreated = cols.index("created (utc)", "created_utc", "created")
	s.iStatus = cols.index("status")
	s.iCharge = cols.index("charge_id")
	s.iIntent = cols.index("payment_intent_id")
	s.sum.Layout = "stripe balance history export"
	if cols.index("balance_transaction_id") >= 0 {
		s.sum.Layout = "stripe itemized balance report"
	}
	return s, nil
}

var stripeTimes = []string{"2006-01-02 15:04", time.RFC3339, "2006-01-02T15:04:05", "2006-01-02"}

func (s *stripe) next() (Row, error) {
	for {
		f, line, err := s.l.record(s.f)
		if err == io.EOF {
			return Row{}, io.EOF
		}
		if err != nil {
			return Row{}, s.read(err)
		}
		s.f = f
		if len(f) == 1 && len(bytes.TrimSpace(f[0])) == 0 {
			continue
		}
		if len(f) != s.width {
			return Row{}, s.badAt(line, "%d values where the header has %d columns", len(f), s.width)
		}
		row, err := s.row(f, line)
		if err == nil && !s.l.eol {
			return Row{}, s.badAt(line, "the export ends in the middle of this row")
		}
		return row, err
	}
}

func (s *stripe) row(f [][]byte, line int) (Row, error) {
	row := Row{Line: line, ID: string(f[s.iID]), Currency: s.intern(trim(f[s.iCur]), true)}
	typ := s.intern(trim(f[s.iType]), false)
	row.Type = typ
	row.Status = s.intern(at(f, s.iStatus), false)
	row.PaymentIntent = string(at(f, s.iIntent))
	source := string(trim(f[s.iSource]))
	charge := string(trim(at(f, s.iCharge)))
	switch {
	case stripePayments[typ]:
		row.Kind, row.Order = Payment, source
	case stripeRefunds[typ]:
		row.Kind = Refund
		if strings.HasPrefix(source, "re_") || strings.HasPrefix(source, "pyr_") {
			row.Refund, row.Order = source, charge
		} else {
			row.Order = source // the Dashboard export names the charge
		}
	default:
		row.Order = source
	}
	if charge != "" && row.Kind != Refund {
		row.Order = charge
	}
	if !isCurrency(row.Currency) {
		return Row{}, s.badAt(line, "currency %s is not an ISO 4217 code", clip(f[s.iCur]))
	}
	exp := exponent(row.Currency)
	v, err := parseFixed(trim(f[s.iAmount]), exp)
	if err != nil {
		return Row{}, s.badAt(line, "amount %s is not a %s amount in major units", clip(f[s.iAmount]), row.Currency)
	}
	if row.Kind == Payment && v < 0 {
		return Row{}, s.badAt(line, "a %s row with a negative amount %s", typ, clip(f[s.iAmount]))
	}
	row.Amount, row.Minor, _ = amountOf(v, exp, row.Currency)
	if (row.Kind == Payment || row.Kind == Refund) && row.Order == "" && row.Refund == "" {
		return Row{}, s.badAt(line, "a %s row without a source", typ)
	}
	if c := trim(at(f, s.iCreated)); len(c) > 0 {
		if row.Time, err = parseClock(c, time.UTC, stripeTimes...); err != nil {
			return Row{}, s.badAt(line, "created %s is not a time", clip(c))
		}
	}
	return row, nil
}
