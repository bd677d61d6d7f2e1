package stripe

import (
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/billcheck"
	"github.com/idemgate/idemgate/keying/bill"
)

// stripeGen writes a Stripe balance-transaction export of generated rows
// (billcheck.EventAt), for the tests, the fuzz seeds and the benchmark.

type stripeGen struct {
	itemized bool // the Reporting API's itemized report, else the Dashboard export
	currency string
}

const (
	stripeDashboard = "id,Type,Source,Amount,Fee,Net,Currency,Created (UTC),Available On (UTC),Description," +
		"Customer Facing Amount,Customer Facing Currency,Transfer,Transfer Date (UTC),Transfer Group"
	stripeItemized = "balance_transaction_id,created_utc,created,available_on_utc,available_on,currency,gross,fee,net," +
		"reporting_category,source_id,description,customer_facing_amount,customer_facing_currency,charge_id,payment_intent_id"
)

func (g *stripeGen) cur() string {
	if g.currency == "" {
		return "usd"
	}
	return g.currency
}

func (g *stripeGen) Head(b []byte) []byte {
	if g.itemized {
		return append(b, stripeItemized+"\n"...)
	}
	return append(b, stripeDashboard+"\n"...)
}

// major writes minor units in the export's major units.
func (g *stripeGen) major(b []byte, v int64) []byte {
	if bill.Exponent(strings.ToUpper(g.cur())) == 0 {
		return strconv.AppendInt(b, v, 10)
	}
	return billcheck.Cents(b, v)
}

func (g *stripeGen) Row(b []byte, i int) []byte {
	e := billcheck.EventAt(i, true)
	utc := e.At.UTC()
	typ, src, sign := "charge", "ch_3Nb"+strconv.Itoa(e.Order), int64(1)
	switch e.Kind {
	case bill.Refund:
		typ, sign = "refund", -1
		if g.itemized {
			src = "re_3Nb" + strconv.Itoa(i)
		}
	case bill.Other:
		typ, src, sign = "payout", "po_1Mb"+strconv.Itoa(i), -1
	}
	amt := sign * e.Fen
	b = append(b, "txn_1Mb"...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, ',')
	if g.itemized {
		b = utc.AppendFormat(b, "2006-01-02 15:04:05,2006-01-02 15:04:05,")
		b = utc.AppendFormat(b, "2006-01-02 15:04:05,2006-01-02 15:04:05,")
		b = append(b, g.cur()...)
		b = append(b, ',')
		b = g.major(b, amt)
		b = append(b, ",0,"...)
		b = g.major(b, amt)
		b = append(b, ',')
		b = append(b, typ...)
		b = append(b, ',')
		b = append(b, src...)
		b = append(b, `,"Order M`...)
		b = strconv.AppendInt(b, int64(e.Order), 10)
		b = append(b, `, renewal",`...)
		b = g.major(b, amt)
		b = append(b, ',')
		b = append(b, g.cur()...)
		if e.Kind != bill.Other {
			b = append(b, ",ch_3Nb"...)
			b = strconv.AppendInt(b, int64(e.Order), 10)
			b = append(b, ",pi_3Nb"...)
			b = strconv.AppendInt(b, int64(e.Order), 10)
		} else {
			b = append(b, ",,"...)
		}
		return append(b, '\n')
	}
	b = append(b, typ...)
	b = append(b, ',')
	b = append(b, src...)
	b = append(b, ',')
	b = g.major(b, amt)
	b = append(b, ",0,"...)
	b = g.major(b, amt)
	b = append(b, ',')
	b = append(b, g.cur()...)
	b = append(b, ',')
	b = utc.AppendFormat(b, "2006-01-02 15:04,2006-01-02 15:04,")
	b = append(b, `"Order M`...)
	b = strconv.AppendInt(b, int64(e.Order), 10)
	b = append(b, `, renewal",`...)
	b = g.major(b, amt)
	b = append(b, ',')
	b = append(b, g.cur()...)
	return append(b, ",,,\n"...)
}

func (g *stripeGen) Tail(b []byte, n int) []byte { return b }

func (g *stripeGen) want(i int) bill.Row {
	e := billcheck.EventAt(i, true)
	cur := strings.ToUpper(g.cur())
	at := e.At.UTC()
	if !g.itemized {
		at = at.Truncate(time.Minute)
	}
	r := bill.Row{Line: 2 + i, Kind: e.Kind, Order: "ch_3Nb" + strconv.Itoa(e.Order), ID: "txn_1Mb" + strconv.Itoa(i),
		Amount: string(g.major(nil, e.Fen)), Minor: e.Fen, Currency: cur, Time: at, Type: "charge"}
	if g.itemized && e.Kind != bill.Other {
		r.PaymentIntent = "pi_3Nb" + strconv.Itoa(e.Order)
	}
	switch e.Kind {
	case bill.Refund:
		r.Type = "refund"
		if g.itemized {
			r.Refund = "re_3Nb" + strconv.Itoa(i)
		}
	case bill.Other:
		r.Type, r.Order = "payout", "po_1Mb"+strconv.Itoa(i)
	}
	return r
}
