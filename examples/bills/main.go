// Command bills writes a day's sample bills in the payment platforms'
// documented layouts — Alipay's 业务明细 CSV (GBK, and the zip around it),
// WeChat Pay's ALL trade bill, Stripe's itemized balance report, PayPal's
// settlement report: each platform module's own sample (its
// SampleBill) — for trying `idemgate idempotency reconcile` against a
// local gateway. From the repository root:
//
//	go run ./examples/bills -platform alipay -out bills 2026120322001458860000000001=9.90 …
//
// docs/reconcile.md walks through it; `go run ./examples/bills -h` has no
// more to say than the flags there: -platform, -day, -out, -account, and
// rows <id>=<amount>[@HH:MM:SS] or <id>/<refund>=<amount>.
package main

import (
	"fmt"
	"os"

	"github.com/idemgate/idemgate/internal/billsample"
)

func main() {
	if err := billsample.Samples(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bills:", err)
		os.Exit(2)
	}
}
