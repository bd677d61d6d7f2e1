package command

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestCLIErrorsNameFlags: where the admin API names a parameter or a JSON
// field (merchant=<app_id>, dry_run: true, scope=…), the CLI's error
// names the flag its user typed.
func TestCLIErrorsNameFlags(t *testing.T) {
	for api, want := range map[string]string{
		`{"error":"an Alipay bill names the seller account, not the app_id of the keys: say which with merchant=<app_id> (or pin one with app_id on scope alipay's route)"}`:                                                           "say which with --merchant <app_id> (or pin one",
		`{"error":"alipay bill, line 7: no merchant (商户号) on the row: give merchant=<mchid>"}`:                                                                                                                                         "give --merchant <mchid>",
		`{"error":"scope shop has alipay routes, and this is a wechatpay bill: which scope? (scope=…)"}`:                                                                                                                               "which scope? (--scope …)",
		`{"error":"key \"demo:cli-1\": the backend already ran it (answered at 2026-10-03T09:00:00Z, status 200); ?force=1 (--force) alone does not run it a second time: add again=1 (--again) only if the business must run again"}`: "; --force alone does not run it a second time: add --again only if",
		`{"error":"several stores are loaded; pick one with ?store=<id> (--store): memory, redis:x"}`:                                                                                                                                  "pick one with --store <id>: memory",
	} {
		err := adminError("localhost:2019", errors.New("caddy responded with error: HTTP 400: "+api))
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "merchant=") || strings.Contains(err.Error(), "scope=") {
			t.Errorf("%s\n  became %q, want %q", api, err, want)
		}
	}

	// A bulk redelivery without a filter, through the running API.
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) { return 500, "down", 0 })
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store memory", "{backend}", be.Addr(), "{extra}", "")
	gatewaytest.Notify(t, g.Base, "f-1")
	_, err := runCLI(t, "redeliver", "--state", "failed", "--address", g.Admin)
	if err == nil || !strings.Contains(err.Error(), "a dry run (--dry-run) lists them") ||
		!strings.Contains(err.Error(), "needs a filter (--scope, --since)") || strings.Contains(err.Error(), "dry_run") {
		t.Fatalf("redeliver without a filter: %v, want the flags named", err)
	}
}

// TestCLIConfigQuiet: --config finds the admin address without printing
// Caddy's start-up log lines ("using config from file", "adapted config
// to JSON", the adapter's warnings). Run in a child process, where
// Caddy's default logger writes to the standard error it would print to.
func TestCLIConfigQuiet(t *testing.T) {
	testenv.Slow(t, "process test: re-runs this test binary as a child")
	if args := os.Getenv("IDEMGATE_CLI_CHILD"); args != "" {
		out, err := runCLI(t, strings.Split(args, "\x1f")...)
		os.Stdout.WriteString(out)
		if err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
		}
		return
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"store":"memory","keys":[],"next":""}`))
	}))
	defer srv.Close()
	cfg := filepath.Join(t.TempDir(), "Caddyfile")
	// Not formatted, as people write them: Caddy's adapter warns.
	os.WriteFile(cfg, []byte("{\n admin "+strings.TrimPrefix(srv.URL, "http://")+"\n}\n:0 {\n  respond ok\n}\n"), 0o600)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCLIConfigQuiet$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEMGATE_CLI_CHILD="+strings.Join([]string{"list", "--state", "failed", "--config", cfg}, "\x1f"))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "no keys (store memory)") {
		t.Fatalf("list --config did not reach the admin address:\n%s", stdout.String())
	}
	for _, s := range []string{stdout.String(), stderr.String()} {
		if strings.Contains(s, "using config from file") || strings.Contains(s, "adapted config") || strings.Contains(s, `"level"`) {
			t.Errorf("the CLI printed Caddy's start-up log lines:\n%s", s)
		}
	}
}

// TestSendRefusedNamesWhatWasUsed: a route refusing the signature of a
// notification signed with --secret makes send ask about that secret, not
// about keygen's keys the user did not use.
func TestSendRefusedNamesWhatWasUsed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "signature mismatch", http.StatusUnauthorized)
	}))
	defer srv.Close()
	dir := t.TempDir()
	out, err := runIdem(t, "send", "--platform", "stripe", "--url", srv.URL, "--secret", "whsec_wrong", "--dir", dir)
	if err == nil || !strings.Contains(out, "--secret you passed") || strings.Contains(out, dir) || strings.Contains(out, "testkeys") {
		t.Errorf("send --secret to a refusing route: %v\n%s", err, out)
	}
	if _, err := runIdem(t, "keygen", "--platform", "stripe", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	out, err = runIdem(t, "send", "--platform", "stripe", "--url", srv.URL, "--dir", dir)
	if err == nil || !strings.Contains(out, "the keys in "+dir) {
		t.Errorf("send with keygen's keys to a refusing route: %v\n%s", err, out)
	}
}
