package billtest

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"
)

// --- Stripe ---

type stripe struct {
	w        *bufio.Writer
	itemized bool
	n        int
}

const (
	stripeDashboard = "id,Type,Source,Amount,Fee,Net,Currency,Created (UTC),Available On (UTC),Description," +
		"Customer Facing Amount,Customer Facing Currency,Transfer,Transfer Date (UTC),Transfer Group"
	stripeItemized = "balance_transaction_id,created_utc,created,available_on_utc,available_on,currency,gross,fee,net," +
		"reporting_category,source_id,description,customer_facing_amount,customer_facing_currency,charge_id,payment_intent_id"
)

// NewStripe starts Stripe's itemized balance report
// (balance_change_from_activity.itemized: source_id, charge_id,
// payment_intent_id; a refund's source is the refund) or, with itemized
// false, the Dashboard's balance history export (a refund's Source is the
// charge).
func NewStripe(w io.Writer, itemized bool) Writer {
	s := &stripe{w: bufio.NewWriterSize(w, 64<<10), itemized: itemized}
	if itemized {
		s.w.WriteString(stripeItemized + "\n")
	} else {
		s.w.WriteString(stripeDashboard + "\n")
	}
	return s
}

func (s *stripe) Row(r Row) error {
	s.n++
	cur := strings.ToLower(r.Currency)
	typ, src, amt := "charge", r.Order, r.Amount
	switch r.Kind {
	case Refund:
		typ, amt = "refund", "-"+r.Amount
		if s.itemized {
			src = r.Refund
		}
	case Payout:
		typ, amt = "payout", "-"+r.Amount
	}
	at := r.Time.UTC()
	if s.itemized {
		charge, pi := r.Order, r.PaymentIntent
		if r.Kind == Payout {
			charge, pi = "", ""
		}
		fmt.Fprintf(s.w, "txn_%d,%s,%s,%s,%s,%s,%s,0,%s,%s,%s,\"Order %s, renewal\",%s,%s,%s,%s\n", s.n,
			at.Format(time.DateTime), at.Format(time.DateTime), at.Format(time.DateTime), at.Format(time.DateTime),
			cur, amt, amt, typ, src, r.MerchantOrder, amt, cur, charge, pi)
		return nil
	}
	fmt.Fprintf(s.w, "txn_%d,%s,%s,%s,0,%s,%s,%s,%s,\"Order %s, renewal\",%s,%s,,,\n", s.n, typ, src, amt, amt, cur,
		at.Format("2006-01-02 15:04"), at.Format("2006-01-02 15:04"), r.MerchantOrder, amt, cur)
	return nil
}

func (s *stripe) Close() error { return s.w.Flush() }

// --- PayPal settlement report ---

type paypal struct {
	w    *bufio.Writer
	rows int
}

const paypalCH = `"CH","Transaction ID","Invoice ID","PayPal Reference ID","PayPal Reference ID Type",` +
	`"Transaction Event Code","Transaction Initiation Date","Transaction Completion Date",` +
	`"Transaction  Debit or Credit","Gross Transaction Amount","Gross Transaction Currency",` +
	`"Fee Debit or Credit","Fee Amount","Fee Currency","Custom Field","Consumer ID","Payment Tracking ID","Store ID"`

// NewPayPal starts PayPal's settlement report (STL) for account and the
// section [from, to): RH, FH, SH, CH, then SB rows; Close writes SF, SC,
// RF, RC and FF with the counts.
func NewPayPal(w io.Writer, account string, from, to time.Time) Writer {
	p := &paypal{w: bufio.NewWriterSize(w, 64<<10)}
	z := time.FixedZone("", -7*3600)
	const layout = "2006/01/02 15:04:05 -0700"
	fmt.Fprintf(p.w, "\"RH\",%s,\"A\",%q,009\n\"FH\",01\n\"SH\",%s,%s,%q,\"\"\n%s\n", time.Now().In(z).Format(layout), account,
		from.In(z).Format(layout), to.Add(-time.Second).In(z).Format(layout), account, paypalCH)
	return p
}

func (p *paypal) Row(r Row) error {
	p.rows++
	txn, ref, refType, code, drcr := r.Order, "", "", "T0006", "CR"
	switch r.Kind {
	case Refund:
		txn, ref, refType, code, drcr = r.Refund, r.Order, "TXN", "T1107", "DR"
	case Payout:
		code, drcr = "T0400", "DR"
	}
	at := r.Time.In(time.FixedZone("", -7*3600)).Format("2006/01/02 15:04:05 -0700")
	c := cents(r.Amount)
	fmt.Fprintf(p.w, `"SB","%s","%s","%s","%s","%s",%s,%s,"%s",%d,"%s","DR",%d,"%s","","buyer@example.com","",""`+"\n",
		txn, r.MerchantOrder, ref, refType, code, at, at, drcr, c, strings.ToUpper(r.Currency), c/30, strings.ToUpper(r.Currency))
	return nil
}

func (p *paypal) Close() error {
	fmt.Fprintf(p.w, "\"SF\",\"USD\",0,0,0,0\n\"SC\",%d\n\"RF\",\"USD\",0,0,0,0\n\"RC\",%d\n\"FF\",%d\n", p.rows, p.rows, p.rows+9)
	return p.w.Flush()
}

// Bytes writes rows as one bill with w.
func Bytes(start func(io.Writer) Writer, rows []Row) []byte {
	var b strings.Builder
	w := start(&b)
	for _, r := range rows {
		if err := w.Row(r); err != nil {
			panic(err)
		}
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return []byte(b.String())
}
