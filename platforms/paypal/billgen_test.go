package paypal

import (
	"fmt"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/internal/billcheck"
	"github.com/idemgate/idemgate/keying/bill"
)

// paypalGen writes a PayPal settlement report of generated rows
// (billcheck.EventAt), for the tests, the fuzz seeds and the benchmark.

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

func (g *paypalGen) Head(b []byte) []byte { return g.fileHead(b, 1) }

func (g *paypalGen) fileHead(b []byte, seq int) []byte {
	b = append(b, `"RH",2026/10/04 05:00:00 -0700,"A","4X5Y6ZACCOUNT",009`+"\n"...)
	b = append(b, fmt.Sprintf(`"FH",%02d`+"\n", seq)...)
	b = append(b, `"SH",2026/10/02 09:00:00 -0700,2026/10/03 08:59:59 -0700,"4X5Y6ZACCOUNT",""`+"\n"...)
	return append(b, paypalCH+"\n"...)
}

func paypalTxn(prefix string, n int) string { return fmt.Sprintf("%s%015d", prefix, n) }

func (g *paypalGen) Row(b []byte, i int) []byte {
	if g.perFile > 0 && i > 0 && i%g.perFile == 0 {
		b = append(b, fmt.Sprintf(`"SF","USD",0,0,0,0`+"\n"+`"SC",%d`+"\n"+`"FF",%d`+"\n", g.perFile, g.perFile+7)...)
		b = g.fileHead(b, i/g.perFile+1)
	}
	g.rows++
	e := billcheck.EventAt(i, true)
	at := e.At.In(time.FixedZone("", -7*3600)).Format("2006/01/02 15:04:05 -0700")
	txn, ref, refType, code, drcr := paypalTxn("9P", e.Order), "", "", "T0006", "CR"
	switch e.Kind {
	case bill.Refund:
		txn, ref, refType, code, drcr = paypalTxn("7R", i), paypalTxn("9P", e.Order), "TXN", "T1107", "DR"
	case bill.Other:
		txn, code, drcr = paypalTxn("5W", i), "T0400", "DR"
	}
	return append(b, fmt.Sprintf(`"SB","%s","M%d","%s","%s","%s",%s,%s,"%s",%d,"USD","DR",%d,"USD","","buyer@example.com","",""`+"\n",
		txn, e.Order, ref, refType, code, at, at, drcr, e.Fen, e.Fen/30)...)
}

func (g *paypalGen) Tail(b []byte, n int) []byte {
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

func (g *paypalGen) want(i int) bill.Row {
	e := billcheck.EventAt(i, true)
	r := bill.Row{Kind: e.Kind, Order: paypalTxn("9P", e.Order), MerchantOrder: "M" + strconv.Itoa(e.Order),
		ID: paypalTxn("9P", e.Order), Amount: string(billcheck.Cents(nil, e.Fen)), Minor: e.Fen, Currency: "USD",
		Time: e.At.UTC(), Type: "T0006"}
	switch e.Kind {
	case bill.Refund:
		r.ID, r.Refund, r.Type = paypalTxn("7R", i), paypalTxn("7R", i), "T1107"
	case bill.Other:
		r.ID, r.Order, r.Type = paypalTxn("5W", i), paypalTxn("5W", i), "T0400"
	}
	return r
}
