package bill

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Generators for Stripe's and PayPal's exports (see gen_test.go).

// --- Stripe ---

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

func (g *stripeGen) head(b []byte) []byte {
	if g.itemized {
		return append(b, stripeItemized+"\n"...)
	}
	return append(b, stripeDashboard+"\n"...)
}

// major writes minor units in the export's major units.
func (g *stripeGen) major(b []byte, v int64) []byte {
	if exponent(strings.ToUpper(g.cur())) == 0 {
		return strconv.AppendInt(b, v, 10)
	}
	return cents(b, v)
}

func (g *stripeGen) row(b []byte, i int) []byte {
	e := eventAt(i, true)
	utc := e.at.UTC()
	typ, src, sign := "charge", "ch_3Nb"+strconv.Itoa(e.order), int64(1)
	switch e.kind {
	case Refund:
		typ, sign = "refund", -1
		if g.itemized {
			src = "re_3Nb" + strconv.Itoa(i)
		}
	case Other:
		typ, src, sign = "payout", "po_1Mb"+strconv.Itoa(i), -1
	}
	amt := sign * e.fen
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
		b = strconv.AppendInt(b, int64(e.order), 10)
		b = append(b, `, renewal",`...)
		b = g.major(b, amt)
		b = append(b, ',')
		b = append(b, g.cur()...)
		if e.kind != Other {
			b = append(b, ",ch_3Nb"...)
			b = strconv.AppendInt(b, int64(e.order), 10)
			b = append(b, ",pi_3Nb"...)
			b = strconv.AppendInt(b, int64(e.order), 10)
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
	b = strconv.AppendInt(b, int64(e.order), 10)
	b = append(b, `, renewal",`...)
	b = g.major(b, amt)
	b = append(b, ',')
	b = append(b, g.cur()...)
	return append(b, ",,,\n"...)
}

func (g *stripeGen) tail(b []byte, n int) []byte { return b }

func (g *stripeGen) want(i int) Row {
	e := eventAt(i, true)
	cur := strings.ToUpper(g.cur())
	at := e.at.UTC()
	if !g.itemized {
		at = at.Truncate(time.Minute)
	}
	r := Row{Line: 2 + i, Kind: e.kind, Order: "ch_3Nb" + strconv.Itoa(e.order), ID: "txn_1Mb" + strconv.Itoa(i),
		Amount: string(g.major(nil, e.fen)), Minor: e.fen, Currency: cur, Time: at, Type: "charge"}
	if g.itemized && e.kind != Other {
		r.PaymentIntent = "pi_3Nb" + strconv.Itoa(e.order)
	}
	switch e.kind {
	case Refund:
		r.Type = "refund"
		if g.itemized {
			r.Refund = "re_3Nb" + strconv.Itoa(i)
		}
	case Other:
		r.Type, r.Order = "payout", "po_1Mb"+strconv.Itoa(i)
	}
	return r
}

// --- PayPal settlement report ---

type paypalGen struct {
	rows int
	// Split the report over parts of this many rows (0: one file).
	perFile int
	noRC    bool
}

const paypalCH = `"CH","Transaction ID","Invoice ID","PayPal Reference ID","PayPal Reference ID Type",` +
	`"Transaction Event Code","Transaction Initiation Date","Transaction Completion Date",` +
	`"Transaction  Debit or Credit","Gross Transaction Amount","Gross Transaction Currency",` +
	`"Fee Debit or Credit","Fee Amount","Fee Currency","Custom Field","Consumer ID","Payment Tracking ID","Store ID"`

func (g *paypalGen) head(b []byte) []byte { return g.fileHead(b, 1) }

func (g *paypalGen) fileHead(b []byte, seq int) []byte {
	b = append(b, `"RH",2026/10/04 05:00:00 -0700,"A","4X5Y6ZACCOUNT",009`+"\n"...)
	b = append(b, fmt.Sprintf(`"FH",%02d`+"\n", seq)...)
	b = append(b, `"SH",2026/10/02 09:00:00 -0700,2026/10/03 08:59:59 -0700,"4X5Y6ZACCOUNT",""`+"\n"...)
	return append(b, paypalCH+"\n"...)
}

func paypalTxn(prefix string, n int) string { return fmt.Sprintf("%s%015d", prefix, n) }

func (g *paypalGen) row(b []byte, i int) []byte {
	if g.perFile > 0 && i > 0 && i%g.perFile == 0 {
		b = append(b, fmt.Sprintf(`"SF","USD",0,0,0,0`+"\n"+`"SC",%d`+"\n"+`"FF",%d`+"\n", g.perFile, g.perFile+7)...)
		b = g.fileHead(b, i/g.perFile+1)
	}
	g.rows++
	e := eventAt(i, true)
	at := e.at.In(time.FixedZone("", -7*3600)).Format("2006/01/02 15:04:05 -0700")
	txn, ref, refType, code, drcr := paypalTxn("9P", e.order), "", "", "T0006", "CR"
	switch e.kind {
	case Refund:
		txn, ref, refType, code, drcr = paypalTxn("7R", i), paypalTxn("9P", e.order), "TXN", "T1107", "DR"
	case Other:
		txn, code, drcr = paypalTxn("5W", i), "T0400", "DR"
	}
	return append(b, fmt.Sprintf(`"SB","%s","M%d","%s","%s","%s",%s,%s,"%s",%d,"USD","DR",%d,"USD","","buyer@example.com","",""`+"\n",
		txn, e.order, ref, refType, code, at, at, drcr, e.fen, e.fen/30)...)
}

func (g *paypalGen) tail(b []byte, n int) []byte {
	inFile := n
	if g.perFile > 0 && n > 0 {
		inFile = n - (n-1)/g.perFile*g.perFile
	}
	b = append(b, fmt.Sprintf(`"SF","USD",0,0,0,0`+"\n"+`"SC",%d`+"\n"+`"RF","USD",0,0,0,0`+"\n", inFile)...)
	if !g.noRC {
		b = append(b, fmt.Sprintf(`"RC",%d`+"\n", n)...)
	}
	return append(b, fmt.Sprintf(`"FF",%d`+"\n", inFile+9)...)
}

func (g *paypalGen) want(i int) Row {
	e := eventAt(i, true)
	r := Row{Kind: e.kind, Order: paypalTxn("9P", e.order), MerchantOrder: "M" + strconv.Itoa(e.order),
		ID: paypalTxn("9P", e.order), Amount: string(cents(nil, e.fen)), Minor: e.fen, Currency: "USD",
		Time: e.at.UTC(), Type: "T0006"}
	switch e.kind {
	case Refund:
		r.ID, r.Refund, r.Type = paypalTxn("7R", i), paypalTxn("7R", i), "T1107"
	case Other:
		r.ID, r.Order, r.Type = paypalTxn("5W", i), paypalTxn("5W", i), "T0400"
	}
	return r
}
