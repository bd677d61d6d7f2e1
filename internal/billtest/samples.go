package billtest

import (
	"archive/zip"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Samples is `go run ./examples/bills`: it writes a day's sample bills in
// the platforms' documented layouts, for trying reconciliation against a
// local gateway (docs/reconcile.md walks through it). Its arguments:
//
//	-platform alipay|wechatpay|stripe|paypal|all   (default all)
//	-day YYYY-MM-DD    the bill's day in the platform's clock (default today there)
//	-out DIR           where the files go (default .)
//	-account A         Alipay's #账号: the seller_id + "0156" (default the test signer's)
//	-mchid M           WeChat Pay's 商户号 (default the test signer's)
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
	account := fs.String("account", "20881021772966100156", "")
	mchid := fs.String("mchid", "1230000109", "")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%v (usage: go run ./examples/bills [-platform p] [-day YYYY-MM-DD] [-out DIR] [id=amount[@HH:MM:SS] | id/refund=amount …])", err)
	}
	platforms := []string{"alipay", "wechatpay", "stripe", "paypal"}
	if *platform != "all" {
		platforms = []string{*platform}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, p := range platforms {
		zone, ok := sampleZones[p]
		if !ok {
			return fmt.Errorf("-platform must be alipay, wechatpay, stripe, paypal or all, not %q", p)
		}
		day := time.Now().In(zone)
		day = time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, zone)
		if *dayFlag != "" {
			d, err := time.ParseInLocation(time.DateOnly, *dayFlag, zone)
			if err != nil {
				return fmt.Errorf("-day: %v", err)
			}
			day = d
		}
		rows, err := sampleRows(p, day, fs.Args())
		if err != nil {
			return err
		}
		ymd := day.Format("20060102")
		var name string
		var start func(io.Writer) Writer
		switch p {
		case "alipay":
			name = *account + "_" + ymd + "_业务明细.csv"
			start = func(w io.Writer) Writer { return NewAlipay(w, *account, day, day.AddDate(0, 0, 1)) }
		case "wechatpay":
			name = "wechatpay_tradebill_" + ymd + "_ALL.csv"
			for i := range rows {
				rows[i].Merchant = *mchid
			}
			start = NewWeChatPay
		case "stripe":
			name = "stripe_balance_change_from_activity_itemized_" + ymd + ".csv"
			start = func(w io.Writer) Writer { return NewStripe(w, true) }
		case "paypal":
			name = "STL-" + ymd + ".01.009.CSV"
			start = func(w io.Writer) Writer { return NewPayPal(w, "SAMPLEACCOUNT01", day, day.AddDate(0, 0, 1)) }
		}
		b := Bytes(start, rows)
		path := filepath.Join(*out, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stdout, path)
		if p == "alipay" {
			// The download is a zip around it (its …_业务明细(汇总).csv, a
			// summary reconciliation does not read, is left out here).
			zpath := filepath.Join(*out, *account+"_"+ymd+".csv.zip")
			if err := writeZip(zpath, name, b); err != nil {
				return err
			}
			fmt.Fprintln(stdout, zpath)
		}
	}
	return nil
}

// sampleZones are the clocks of the platforms' bill days: Beijing for
// Alipay and WeChat Pay, UTC for Stripe's reports, PayPal's section clock.
var sampleZones = map[string]*time.Location{
	"alipay": beijing, "wechatpay": beijing, "stripe": time.UTC, "paypal": time.FixedZone("", -7*3600),
}

// sampleRows reads the rows' arguments, or makes the default sample.
func sampleRows(platform string, day time.Time, args []string) ([]Row, error) {
	currency := "CNY"
	if platform == "stripe" || platform == "paypal" {
		currency = "USD"
	}
	if len(args) == 0 {
		for i := 1; i <= 3; i++ {
			args = append(args, fmt.Sprintf("%s=%d.00", sampleID(platform, day, i), 10*i))
		}
		args = append(args, sampleID(platform, day, 1)+"/"+sampleRefund(platform, 1)+"=2.50")
	}
	var rows []Row
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
		r := Row{Kind: Payment, Order: spec, Amount: amount, Currency: currency, Time: at}
		if order, refund, ok := strings.Cut(spec, "/"); ok {
			r.Kind, r.Order, r.Refund = Refund, order, refund
		}
		r.MerchantOrder = "o-" + r.Order // as `idemgate idempotency send` names the order
		if platform == "stripe" {
			r.PaymentIntent = "pi_" + strings.TrimPrefix(r.Order, "ch_")
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func sampleID(platform string, day time.Time, i int) string {
	switch platform {
	case "stripe":
		return fmt.Sprintf("ch_sample%d", i)
	case "paypal":
		return fmt.Sprintf("9SAMPLE%010d", i)
	case "wechatpay":
		return fmt.Sprintf("42000009%s%012d", day.Format("20060102"), i)
	}
	return fmt.Sprintf("%s22001458860%09d", day.Format("20060102"), i)
}

func sampleRefund(platform string, i int) string {
	switch platform {
	case "stripe":
		return fmt.Sprintf("re_sample%d", i)
	case "paypal":
		return fmt.Sprintf("8REFUND%010d", i)
	}
	return fmt.Sprintf("R%d", i)
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

func writeZip(path, name string, b []byte) error {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: time.Now()})
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return errors.Join(err, zw.Close())
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
