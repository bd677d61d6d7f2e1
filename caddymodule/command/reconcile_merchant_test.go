package command

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
)

// TestReconcileCLIPendingAndMerchant: the table shows what is pending the
// next bill (a payment at 23:58 Beijing time its day's bill does not
// show), with why; an Alipay bill needs no --merchant while the gateway
// can tell the app from what it recorded, and when it cannot, the error
// names the CLI's flag, not the API's parameter.
func TestReconcileCLIPendingAndMerchant(t *testing.T) {
	const appA, appB = "2021004000000001", "2021004000000002"
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(string, int, *http.Request) (int, string, time.Duration) { return 200, "success", 0 })
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			verify off
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	cst := time.FixedZone("CST", 8*3600)
	day := time.Date(2026, 10, 3, 0, 0, 0, 0, cst)
	trade := func(i int) string { return fmt.Sprintf("2026100322001458860%09d", i) }
	send := func(app string, i int, at time.Time) billtest.Row {
		p := platformtest.AlipayNotify(app, fmt.Sprintf("M%d", i), trade(i), "TRADE_SUCCESS", "10.00")
		p.Set("gmt_payment", at.Format(time.DateTime))
		if r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded", p.Encode(), nil); r.Status != 200 {
			t.Fatalf("notify: %d %s", r.Status, r.Body)
		}
		return billtest.Row{Kind: billtest.Payment, Order: trade(i), MerchantOrder: fmt.Sprintf("M%d", i), Amount: "10.00", Currency: "CNY", Time: at}
	}
	paid := send(appA, 1, day.Add(10*time.Hour))
	send(appA, 2, day.Add(24*time.Hour-2*time.Minute))
	bill := filepath.Join(t.TempDir(), "2088102177296610_20261003_业务明细.csv")
	b := billtest.Bytes(func(w io.Writer) billtest.Writer {
		return alipaybill.NewWriter(w, "20881021772966100156", day, day.Add(24*time.Hour))
	}, []billtest.Row{paid})
	if err := os.WriteFile(bill, b, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"reconcile", "--platform", "alipay", "--bill", bill, "--address", g.Admin}
	out, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("a pending payment is no difference yet: %v\n%s", err, out)
	}
	for _, want := range []string{"pending next bill   1      CNY 10.00", "Pending the next bill — ran in the last 15 minutes before the bill's end (2026-10-04 00:00 +08:00)",
		"alipay:" + appA + ":" + trade(2) + ":paid", "answered", "app_id " + appA + ": the app_id whose notifications name the bill's seller account"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}

	send(appB, 3, day.Add(11*time.Hour)) // another app of the same seller
	_, err = runCLI(t, args...)
	if err == nil || !strings.Contains(err.Error(), "say which with --merchant <app_id>") || strings.Contains(err.Error(), "merchant=") {
		t.Fatalf("two apps of one seller: %v", err)
	}
	if out, err := runCLI(t, append(args, "--merchant", appA)...); err != nil || !strings.Contains(out, "merchant "+appA) {
		t.Fatalf("--merchant %s: %v\n%s", appA, err, out)
	}
}
