// Package billtest is what writing a payment platform's bill takes, for
// tests and for sample bills: a bill's rows (Row), a Writer of them, and
// a day's Sample. Each platform's writer lives in its folder, beside the
// parser of the layout it writes (platforms/<name>/<name>bill). A Writer
// streams: Row writes one detail line, Close the bill's end (totals the
// rows add up to), so a benchmark can stream a million rows in constant
// memory.
//
// It is test support: tests import it, and examples/bills writes the
// platforms' Samples (internal/billsample).
package billtest

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Kind is what a row records.
type Kind int

const (
	Payment Kind = iota
	Refund
	// Payout is a row that is neither (a Stripe payout, a PayPal
	// withdrawal, WeChat Pay's REVOKED): reconciliation skips it.
	Payout
)

// Row is one detail line.
type Row struct {
	Kind Kind
	// Order is the platform's id of the payment: Alipay trade_no, WeChat
	// Pay transaction_id, Stripe's charge, PayPal's transaction (capture)
	// id. A refund row names the payment it refunds.
	Order         string
	MerchantOrder string
	// Refund is the refund's id as its notification names it (Alipay
	// out_biz_no, WeChat Pay out_refund_no, Stripe re_…, PayPal the
	// refund's transaction id).
	Refund string
	// Merchant is WeChat Pay's 商户号; SubMerchant its 特约商户号 (a service
	// provider's sub-merchant; empty: "0", an ordinary merchant).
	Merchant, SubMerchant string
	PaymentIntent         string
	// Amount is positive, in major units ("12.30"; JPY "500").
	Amount   string
	Currency string
	Time     time.Time
}

// Writer writes one bill.
type Writer interface {
	Row(r Row) error
	Close() error
}

// Cents reads an amount of at most two decimals as hundredths.
func Cents(amount string) int64 {
	whole, frac, _ := strings.Cut(amount, ".")
	frac = (frac + "00")[:2]
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("billtest: amount %q", amount))
	}
	return n
}

// Yuan writes hundredths as an amount with two decimals.
func Yuan(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
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

// Sample is a platform's sample bill of a day: in the clock the platform
// closes its bills by, in its currency, with ids in its forms.
type Sample struct {
	// Name is the platform's, as a route names it.
	Name string
	// Zone is the clock of the bill's day.
	Zone     *time.Location
	Currency string
	// Account is the merchant's account a bill names unless told
	// another (empty: the bill names none).
	Account string
	// PaymentID is the i-th payment's id (from 1) of a day's default
	// sample; RefundID its refund's.
	PaymentID func(day time.Time, i int) string
	RefundID  func(i int) string
	// Files are the bill of rows for day and account, as the platform's
	// download gives it: each file's name and bytes.
	Files func(day time.Time, account string, rows []Row) []File
}

// File is one file of a sample bill.
type File struct {
	Name string
	Data []byte
}
