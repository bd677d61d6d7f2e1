package command

import (
	"encoding/json"
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
	"github.com/idemgate/idemgate/reconcile"
)

// TestReconcileCLI: `reconcile` streams a bill file to the gateway and
// prints the report as a table (with the redeliver command of what
// failed) or as the API's JSON; it exits non-zero when the bill and what
// ran differ, zero when all matched, and passes a malformed bill's error
// on, naming the line.
func TestReconcileCLI(t *testing.T) {
	const app = "2021004123456789"
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "M2" {
			return 500, "db down", 0
		}
		return 200, "success", 0
	})
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			verify off
			app_id `+app+`
			store embedded `+filepath.Join(t.TempDir(), "keys.db")+`
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	now := time.Now().Truncate(time.Second)
	trade := func(i int) string { return fmt.Sprintf("2026100322001458860%09d", i) }
	var rows []billtest.Row
	for i := 1; i <= 3; i++ {
		amount := fmt.Sprintf("%d.00", i*10)
		rows = append(rows, billtest.Row{Kind: billtest.Payment, Order: trade(i), MerchantOrder: fmt.Sprintf("M%d", i), Amount: amount, Currency: "CNY", Time: now})
		if i == 3 {
			continue // never sent
		}
		p := platformtest.AlipayNotify(app, fmt.Sprintf("M%d", i), trade(i), "TRADE_SUCCESS", amount)
		p.Set("gmt_payment", now.In(time.FixedZone("CST", 8*3600)).Format(time.DateTime))
		gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded", p.Encode(), nil)
	}
	write := func(name string, rows []billtest.Row) string {
		b := billtest.Bytes(func(w io.Writer) billtest.Writer {
			return alipaybill.NewWriter(w, "20881021772966100156", now.Add(-12*time.Hour), now.Add(12*time.Hour))
		}, rows)
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bill := write("20881021772966100156_业务明细.csv", rows)
	addr := []string{"--address", g.Admin}

	out, err := runCLI(t, append([]string{"reconcile", "--platform", "alipay", "--bill", bill}, addr...)...)
	if err == nil || !strings.Contains(err.Error(), "2 settled, never run") {
		t.Fatalf("reconcile with findings: %v, want an error naming them\n%s", err, out)
	}
	failedKey := "alipay:" + app + ":" + trade(2) + ":paid"
	for _, want := range []string{"settled, never run  2", "matched             1      CNY 10.00", "CNY 50.00", "30.00 CNY",
		"idemgate idempotency redeliver '" + failedKey + "'", "failed", "none", "merchant " + app} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}

	out, _ = runCLI(t, append([]string{"reconcile", "--platform", "alipay", "--bill", bill, "--json", "--items"}, addr...)...)
	var rep reconcile.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if rep.SettledNeverRun.Count != 2 || rep.Matched.Count != 1 || len(rep.Matched.Items) != 1 || rep.SettledNeverRun.Amounts["CNY"] != "50.00" {
		t.Fatalf("--json report: %+v", rep)
	}

	if out, err := runCLI(t, append([]string{"reconcile", "--platform", "alipay", "--bill", write("ok.csv", rows[:1])}, addr...)...); err != nil {
		t.Fatalf("all matched: %v\n%s", err, out)
	}

	broken := filepath.Join(t.TempDir(), "broken.csv")
	b, _ := os.ReadFile(bill)
	if err := os.WriteFile(broken, []byte(strings.Replace(string(b), "\t,M2\t,", "\t,", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, append([]string{"reconcile", "--platform", "alipay", "--bill", broken}, addr...)...); err == nil ||
		!strings.Contains(err.Error(), "line 7") || !strings.Contains(err.Error(), "HTTP 400") {
		t.Fatalf("a malformed bill: %v", err)
	}
	if _, err := runCLI(t, append([]string{"reconcile", "--bill", bill}, addr...)...); err == nil || !strings.Contains(err.Error(), "--platform") {
		t.Fatalf("no platform: %v", err)
	}

}
