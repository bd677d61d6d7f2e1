// Package billsample is `go run ./examples/bills`: a day's sample bills in
// the platforms' documented layouts, each the Sample of its platform's
// bill writer (platforms/<name>/<name>bill), for trying reconciliation
// against a local gateway.
package billsample

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/platforms/paypal/paypalbill"
	"github.com/idemgate/idemgate/platforms/stripe/stripebill"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
)

// all are the platforms' samples, in the order of their names.
var all = []billtest.Sample{alipaybill.Sample, paypalbill.Sample, stripebill.Sample, wechatpaybill.Sample}

// Samples writes a day's sample bills in the platforms' documented
// layouts, for trying reconciliation against a local gateway
// (docs/reconcile.md walks through it). Its arguments:
//
//	-platform <name>|all  (default all: every platform with a sample bill)
//	-day YYYY-MM-DD    the bill's day in the platform's clock (default today there)
//	-out DIR           where the files go (default .)
//	-account A         the merchant's account the bill names: Alipay's
//	                   #账号 (the seller_id + "0156"), WeChat Pay's 商户号,
//	                   PayPal's account (default the test signer's)
//	rows...            <id>=<amount>[@HH:MM:SS] a payment of the platform's
//	                   id (trade_no, transaction_id, ch_…, a capture id);
//	                   <id>/<refund>=<amount>[@…] a refund of it (out_biz_no,
//	                   out_refund_no, re_…, the refund's transaction id).
//	                   Default: three payments and a refund.
//
// It prints each file it wrote, one a line.
func Samples(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bills", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	platform := fs.String("platform", "all", "")
	dayFlag := fs.String("day", "", "")
	out := fs.String("out", ".", "")
	account := fs.String("account", "", "")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%v (usage: go run ./examples/bills [-platform p] [-day YYYY-MM-DD] [-out DIR] [-account A] [id=amount[@HH:MM:SS] | id/refund=amount …])", err)
	}
	samples := all
	if *platform != "all" {
		i := slices.IndexFunc(all, func(s billtest.Sample) bool { return s.Name == *platform })
		if i < 0 {
			var names []string
			for _, s := range all {
				names = append(names, s.Name)
			}
			return fmt.Errorf("-platform must be %s or all, not %q", strings.Join(names, ", "), *platform)
		}
		samples = all[i : i+1]
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, s := range samples {
		day := time.Now().In(s.Zone)
		day = time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, s.Zone)
		if *dayFlag != "" {
			d, err := time.ParseInLocation(time.DateOnly, *dayFlag, s.Zone)
			if err != nil {
				return fmt.Errorf("-day: %v", err)
			}
			day = d
		}
		rows, err := sampleRows(s, day, fs.Args())
		if err != nil {
			return err
		}
		acct := s.Account
		if *account != "" {
			acct = *account
		}
		for _, f := range s.Files(day, acct, rows) {
			path := filepath.Join(*out, f.Name)
			if err := os.WriteFile(path, f.Data, 0o644); err != nil {
				return err
			}
			fmt.Fprintln(stdout, path)
		}
	}
	return nil
}

// sampleRows reads the rows' arguments, or makes the default sample.
func sampleRows(s billtest.Sample, day time.Time, args []string) ([]billtest.Row, error) {
	if len(args) == 0 {
		for i := 1; i <= 3; i++ {
			args = append(args, fmt.Sprintf("%s=%d.00", s.PaymentID(day, i), 10*i))
		}
		args = append(args, s.PaymentID(day, 1)+"/"+s.RefundID(1)+"=2.50")
	}
	var rows []billtest.Row
	for i, a := range args {
		spec, amount, ok := strings.Cut(a, "=")
		if !ok || spec == "" {
			return nil, fmt.Errorf("row %q: want <id>=<amount>[@HH:MM:SS] or <id>/<refund>=<amount>", a)
		}
		at := day.Add(10*time.Hour + time.Duration(i)*7*time.Minute)
		if amt, clock, ok := strings.Cut(amount, "@"); ok {
			c, err := time.Parse(time.TimeOnly, clock)
			if err != nil {
				return nil, fmt.Errorf("row %q: the time is HH:MM:SS in the bill's clock", a)
			}
			amount, at = amt, day.Add(time.Duration(c.Hour())*time.Hour+time.Duration(c.Minute())*time.Minute+time.Duration(c.Second())*time.Second)
		}
		if !validAmount(amount) {
			return nil, fmt.Errorf("row %q: the amount is major units with two decimals (9.90)", a)
		}
		r := billtest.Row{Kind: billtest.Payment, Order: spec, Amount: amount, Currency: s.Currency, Time: at}
		if order, refund, ok := strings.Cut(spec, "/"); ok {
			r.Kind, r.Order, r.Refund = billtest.Refund, order, refund
		}
		r.MerchantOrder = "o-" + r.Order // as `idemgate idempotency send` names the order
		rows = append(rows, r)
	}
	return rows, nil
}

func validAmount(s string) bool {
	whole, frac, ok := strings.Cut(s, ".")
	if !ok || whole == "" || len(frac) != 2 {
		return false
	}
	for _, c := range whole + frac {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
