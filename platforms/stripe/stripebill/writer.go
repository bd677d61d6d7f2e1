// Package stripebill writes Stripe's itemized balance report and the
// Dashboard's balance history export (the layouts the platform's bill.go
// reads) for tests and sample bills. It is test support: no binary links
// it.
package stripebill

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
	w        *bufio.Writer
	itemized bool
	n        int
}

const (
	billDashboard = "id,Type,Source,Amount,Fee,Net,Currency,Created (UTC),Available On (UTC),Description," +
		"Customer Facing Amount,Customer Facing Currency,Transfer,Transfer Date (UTC),Transfer Group"
	billItemized = "balance_transaction_id,created_utc,created,available_on_utc,available_on,currency,gross,fee,net," +
		"reporting_category,source_id,description,customer_facing_amount,customer_facing_currency,charge_id,payment_intent_id"
)

// NewWriter starts Stripe's itemized balance report
// (balance_change_from_activity.itemized: source_id, charge_id,
// payment_intent_id; a refund's source is the refund) or, with itemized
// false, the Dashboard's balance history export (a refund's Source is the
// charge).
func NewWriter(w io.Writer, itemized bool) billtest.Writer {
	s := &billWriter{w: bufio.NewWriterSize(w, 64<<10), itemized: itemized}
	if itemized {
		s.w.WriteString(billItemized + "\n")
	} else {
		s.w.WriteString(billDashboard + "\n")
	}
	return s
}

func (s *billWriter) Row(r billtest.Row) error {
	s.n++
	cur := strings.ToLower(r.Currency)
	typ, src, amt := "charge", r.Order, r.Amount
	switch r.Kind {
	case billtest.Refund:
		typ, amt = "refund", "-"+r.Amount
		if s.itemized {
			src = r.Refund
		}
	case billtest.Payout:
		typ, amt = "payout", "-"+r.Amount
	}
	at := r.Time.UTC()
	if s.itemized {
		charge, pi := r.Order, r.PaymentIntent
		if r.Kind == billtest.Payout {
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

func (s *billWriter) Close() error { return s.w.Flush() }

// Sample is a day's itemized balance report (days in UTC, as Stripe's
// reports close them), each charge of the PaymentIntent named after it.
var Sample = billtest.Sample{
	Name: "stripe", Zone: time.UTC, Currency: "USD",
	PaymentID: func(_ time.Time, i int) string { return fmt.Sprintf("ch_sample%d", i) },
	RefundID:  func(i int) string { return fmt.Sprintf("re_sample%d", i) },
	Files: func(day time.Time, _ string, rows []billtest.Row) []billtest.File {
		for i := range rows {
			rows[i].PaymentIntent = "pi_" + strings.TrimPrefix(rows[i].Order, "ch_")
		}
		return []billtest.File{{Name: "stripe_balance_change_from_activity_itemized_" + day.Format("20060102") + ".csv",
			Data: billtest.Bytes(func(w io.Writer) billtest.Writer { return NewWriter(w, true) }, rows)}}
	},
}
