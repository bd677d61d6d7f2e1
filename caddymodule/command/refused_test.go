package command

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestRefusedCLI: `refused` prints the notifications the gateway refused
// before any claim as an aligned table, newest first, the body's first
// bytes on one line with what could steer a terminal made visible;
// --json prints the API's JSON; --scope and --since filter.
func TestRefusedCLI(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store embedded "+t.TempDir()+"/idem.db",
		"{backend}", be.Addr(), "{extra}", "")
	addr := []string{"--address", g.Admin}

	out, err := runCLI(t, append([]string{"refused"}, addr...)...)
	if err != nil || !strings.HasPrefix(out, "no refused notifications (store ") {
		t.Fatalf("refused with none: %v %q", err, out)
	}
	// An empty key (a sender's template out of step), its body holding a
	// terminal escape; then a fingerprint conflict.
	form := "application/x-www-form-urlencoded"
	if r := gatewaytest.Post(t, g.Base+"/notify", form, "total_amount=9.90&note="+url.QueryEscape("\x1b[2J")+"\n", nil); r.Status != 400 {
		t.Fatalf("empty key: %d %q", r.Status, r.Body)
	}
	gatewaytest.Notify(t, g.Base, "c-1")
	if r := gatewaytest.Notify(t, g.Base, "c-1", "total_amount", "0.01"); r.Status != 422 {
		t.Fatalf("conflict: %d %q", r.Status, r.Body)
	}
	rawEsc := "total_amount=9.90&x=\x1b[2J"
	if r := gatewaytest.Post(t, g.Base+"/notify", form, rawEsc, nil); r.Status != 400 {
		t.Fatalf("raw escape: %d %q", r.Status, r.Body)
	}

	out, err = runCLI(t, append([]string{"refused"}, addr...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 rows:\n%s", out)
	}
	header := regexp.MustCompile(`^TIME +SCOPE +ROUTE +STATUS +CLASS +REASON +LENGTH +SHA-256 +BODY$`)
	if !header.MatchString(lines[0]) {
		t.Fatalf("header: %q", lines[0])
	}
	// Aligned: every row's SCOPE column starts where the header's does.
	col := strings.Index(lines[0], "SCOPE")
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l[col:], "demo ") {
			t.Errorf("row not aligned under SCOPE: %q", l)
		}
	}
	if !strings.Contains(lines[1], " 400 ") || !strings.Contains(lines[1], `x=\x1b[2J`) || strings.ContainsRune(out, 0x1b) {
		t.Errorf("newest first, the escape made visible:\n%s", out)
	}
	if !strings.Contains(lines[2], " 422 ") || !strings.Contains(lines[2], "conflict") || !strings.Contains(lines[2], "same key, different fingerprint (key demo:c-1)") {
		t.Errorf("the conflict row: %q", lines[2])
	}
	if !strings.Contains(lines[3], "bad_request") || !strings.Contains(lines[3], "key: {idempotency.form.out_trade_no} is empty") ||
		!strings.Contains(lines[3], `note=%1B%5B2J\n`) {
		t.Errorf("the empty key's row: %q", lines[3])
	}

	out, err = runCLI(t, append([]string{"refused", "--json", "--since", "1h", "--scope", "demo", "--limit", "2"}, addr...)...)
	var v admin.RefusedView
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || len(v.Refused) != 2 || v.Refused[0].Status != 400 ||
		string(v.Refused[0].Prefix) != rawEsc || v.Scope != "demo" || v.Since.IsZero() {
		t.Fatalf("--json --since 1h --scope demo --limit 2: %v\n%s", err, out)
	}
	if out, err := runCLI(t, append([]string{"refused", "--scope", "other"}, addr...)...); err != nil || !strings.HasPrefix(out, "no refused") {
		t.Errorf("--scope other: %v %q", err, out)
	}
	if _, err := runCLI(t, append([]string{"refused", "--since", "yesterday"}, addr...)...); err == nil || !strings.Contains(err.Error(), "--since") {
		t.Errorf("--since yesterday: %v", err)
	}
	if be.Total.Load() != 1 {
		t.Errorf("backend ran %d times, want 1", be.Total.Load())
	}
}
