package caddymodule

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
)

// TestReconcileExitCodes runs the built binary's `idempotency reconcile`
// against a gateway process, as a daily job does, and reads its exit
// status: 0 when all matched, 1 when the bill and what ran differ (the
// report still printed), 2 on an error — a bill that cannot be read, one
// the gateway refuses as malformed, another seller's bill, no gateway —
// each error printed "Error: …".
func TestReconcileExitCodes(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	const app = "2021004123456789"
	bin := gatewayBinary(t)
	home := t.TempDir()
	port, adminPort := freePort(t), freePort(t)
	admin := fmt.Sprintf("127.0.0.1:%d", adminPort)
	cf := filepath.Join(home, "Caddyfile")
	if err := os.WriteFile(cf, []byte(fmt.Sprintf(`{
	admin %s
	auto_https off
	persist_config off
}
http://127.0.0.1:%d {
	route /notify {
		idempotency {
			platform alipay
			verify off
			app_id %s
			store embedded %s
		}
		respond "success"
	}
}
`, admin, port, app, filepath.Join(home, "keys.db"))), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := exec.Command(bin, "run", "--config", cf, "--adapter", "caddyfile")
	gw.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"), "XDG_CONFIG_HOME="+filepath.Join(home, "config"))
	var gwLog bytes.Buffer
	gw.Stdout, gw.Stderr = &gwLog, &gwLog
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		gw.Process.Kill()
		gw.Wait()
		if t.Failed() {
			t.Logf("gateway log:\n%s", gwLog.String())
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitListening(t, base)

	now := time.Now().Truncate(time.Second)
	cst := time.FixedZone("CST", 8*3600)
	trade := func(i int) string { return fmt.Sprintf("2026100322001458860%09d", i) }
	for i := 1; i <= 2; i++ {
		p := platformtest.AlipayNotify(app, fmt.Sprintf("M%d", i), trade(i), "TRADE_SUCCESS", fmt.Sprintf("%d.00", i*10))
		p.Set("gmt_payment", now.In(cst).Format(time.DateTime))
		resp, err := http.Post(base+"/notify", "application/x-www-form-urlencoded", strings.NewReader(p.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "success" {
			t.Fatalf("notify %d: %d %q", i, resp.StatusCode, b)
		}
	}
	row := func(i int, amount string) billtest.Row {
		return billtest.Row{Kind: billtest.Payment, Order: trade(i), MerchantOrder: fmt.Sprintf("M%d", i), Amount: amount, Currency: "CNY", Time: now}
	}
	write := func(name, account string, rows ...billtest.Row) string {
		b := billtest.Bytes(func(w io.Writer) billtest.Writer {
			return alipaybill.NewWriter(w, account, now.Add(-12*time.Hour), now.Add(12*time.Hour))
		}, rows)
		p := filepath.Join(home, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const account = "20881021772966100156" // the notifications' seller_id + 0156
	matched := write("matched.csv", account, row(1, "10.00"), row(2, "20.00"))
	differs := write("differs.csv", account, row(1, "10.00"), row(2, "19.50"), row(3, "30.00"))
	other := write("other.csv", "20880000000000010156", row(1, "10.00"))
	broken := filepath.Join(home, "broken.csv")
	b, _ := os.ReadFile(matched)
	if err := os.WriteFile(broken, []byte(strings.Replace(string(b), "\t,M2\t,", "\t,", 1)), 0o600); err != nil {
		t.Fatal(err)
	}

	reconcile := func(bill, address string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, "idempotency", "reconcile", "--platform", "alipay", "--bill", bill, "--address", address)
		cmd.Env = gw.Env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("reconcile %s: %v", bill, err)
		}
		return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
	}
	for _, c := range []struct {
		what, bill, address string
		code                int
		stdout, stderr      string
	}{
		{"all matched", matched, admin, 0, "matched             2      CNY 30.00", ""},
		{"a difference", differs, admin, 1, "amount differs      1      CNY -0.50", "the bill and what ran differ: 1 settled, never run; 1 amount differs"},
		{"an unreadable bill", filepath.Join(home, "nope.csv"), admin, 2, "", "nope.csv"},
		{"a malformed bill", broken, admin, 2, "", "line 7"},
		{"another seller's bill", other, admin, 2, "", "not reconciled against another seller's orders"},
		{"no gateway", matched, fmt.Sprintf("127.0.0.1:%d", freePort(t)), 2, "", ""},
	} {
		code, out, errOut := reconcile(c.bill, c.address)
		// Each error is printed as every subcommand prints one.
		if code != c.code || !strings.Contains(out, c.stdout) || !strings.Contains(errOut, c.stderr) || (code != 0) != strings.HasPrefix(errOut, "Error: ") {
			t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.what, code, c.code, out, errOut)
		}
		if c.code == 1 && !strings.Contains(out, "settled, never run  1") {
			t.Errorf("%s: the report is not printed:\n%s", c.what, out)
		}
	}
}
