package command

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
)

// runCLI runs `idemgate idempotency <args>` in this process and returns
// its standard output and error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c := idempotencyCommand()
	root := &cobra.Command{Use: c.Name, Short: c.Short}
	c.CobraFunc(root)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestCLI: inspect, purge and in-flight against a running gateway's admin
// endpoint, found by --address and by --config.
func TestCLI(t *testing.T) {
	rs := redistest.Start(t)
	be := gatewaytest.NewBackend(t)
	release := make(chan struct{})
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "slow" {
			<-release
		}
		return 200, "ok " + order, 0
	})
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.Addr(), "{extra}", "")
	addr := []string{"--address", g.Admin}

	gatewaytest.Notify(t, g.Base, "c/1")
	gatewaytest.Notify(t, g.Base, "c/1")

	out, err := runCLI(t, append([]string{"inspect", "demo:c/1", "--json"}, addr...)...)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var rec admin.RecordView
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Key != "demo:c/1" || rec.State != "answered" || rec.Copies != 2 {
		t.Fatalf("inspect printed %q (%v)", out, err)
	}
	if !strings.Contains(out, "\n  \"state\": \"answered\"") {
		t.Errorf("inspect output is not indented JSON: %q", out)
	}

	// --config finds the admin address in a Caddyfile.
	cfg := filepath.Join(t.TempDir(), "Caddyfile")
	os.WriteFile(cfg, []byte("{\n\tadmin "+g.Admin+"\n}\n:0 {\n\trespond ok\n}\n"), 0o600)
	out, err = runCLI(t, "inspect", "--json", "--body", "demo:c/1", "--config", cfg, "--adapter", "caddyfile")
	if err != nil || !strings.Contains(out, `"body": "b2sgYy8x"`) { // base64("ok c/1")
		t.Fatalf("inspect --body --config: %q %v", out, err)
	}
	// For people: a table, and the bodies as text, never base64.
	out, err = runCLI(t, append([]string{"inspect", "--body", "demo:c/1"}, addr...)...)
	if err != nil || !strings.Contains(out, "\n    ok c/1\n") || strings.Contains(out, "b2sgYy8x") ||
		!strings.Contains(out, "    out_trade_no=c%2F1") || !regexp.MustCompile(`(?m)^state +answered$`).MatchString(out) {
		t.Fatalf("inspect --body for people: %v\n%s", err, out)
	}

	out, err = runCLI(t, append([]string{"purge", "demo:c/1"}, addr...)...)
	if err != nil || !strings.Contains(out, `"deleted": true`) {
		t.Fatalf("purge: %q %v", out, err)
	}
	if r := gatewaytest.Notify(t, g.Base, "c/1"); r.Status != 200 || r.Replayed || be.Count("c/1") != 2 {
		t.Fatalf("after purge: %d replayed=%v backend=%d, want forwarded again", r.Status, r.Replayed, be.Count("c/1"))
	}

	// Errors: a clear message, and an error (the exit status is non-zero).
	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"purge", "demo:nope"}, addr...), `no record for key "demo:nope"`},
		{append([]string{"inspect", "demo:nope"}, addr...), "(HTTP 404)"},
		{[]string{"inspect", "demo:x", "--address", "127.0.0.1:1"}, "is the gateway running"},
		{append([]string{"inspect", "demo:x", "--store", "nope"}, addr...), "loaded: redis:"},
		{append([]string{"in-flight", "--limit", "0"}, addr...), "--limit"},
		{append([]string{"inspect"}, addr...), "accepts 1 arg"},
	} {
		if _, err := runCLI(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}

	// in-flight lists the claim of a notification at the backend.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); gatewaytest.Notify(t, g.Base, "slow") }()
	var page admin.PageView
	gatewaytest.Eventually(t, 5*time.Second, "the slow claim listed", func() bool {
		out, err := runCLI(t, append([]string{"in-flight", "--json", "--all", "--limit", "1"}, addr...)...)
		if err != nil {
			t.Fatalf("in-flight: %v", err)
		}
		page = admin.PageView{}
		json.Unmarshal([]byte(out), &page)
		return len(page.Keys) == 1
	})
	if page.Keys[0].Key != "demo:slow" || page.Next != "" {
		t.Errorf("in-flight --all: %+v", page)
	}
	close(release)
	wg.Wait()
	out, err = runCLI(t, append([]string{"in-flight", "--json"}, addr...)...)
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Keys) != 0 {
		t.Errorf("in-flight after the answer: %q %v, want no keys", out, err)
	}
}

// TestJournalCLI: an operator finds a failed notification, inspects its
// attempts and redelivers it from the CLI alone.
func TestJournalCLI(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 502, "upstream of the backend is down", 0
		}
		return 200, "ok " + order, 0
	})
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store memory", "{backend}", be.Addr(), "{extra}", "")
	addr := []string{"--address", g.Admin}
	if r := gatewaytest.Notify(t, g.Base, "cli-1"); r.Status != 502 {
		t.Fatalf("first copy: %+v", r)
	}
	out, err := runCLI(t, append([]string{"list", "--state", "failed", "--since", "1h", "--prefix", "demo:cli"}, addr...)...)
	// STATUS is the backend's: a failed key's last attempt's.
	if err != nil || !regexp.MustCompile(`(?m)^KEY +STATE +STATUS .*\ndemo:cli-1 +failed +502 +1 +1 `).MatchString(out) {
		t.Fatalf("list --state failed: %v\n%s", err, out)
	}
	out, err = runCLI(t, append([]string{"inspect", "demo:cli-1"}, addr...)...)
	if err != nil || !regexp.MustCompile(`(?m)^\S+ \S+ +\S+ +502 +failed +status 502: not a success`).MatchString(out) {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	out, err = runCLI(t, append([]string{"redeliver", "demo:cli-1"}, addr...)...)
	if err != nil || !regexp.MustCompile(`(?m)^status +200$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^state +answered$`).MatchString(out) || !strings.Contains(out, "\n    ok cli-1\n") {
		t.Fatalf("redeliver: %v\n%s", err, out)
	}
	if _, err = runCLI(t, append([]string{"redeliver", "demo:cli-1"}, addr...)...); err == nil || !strings.Contains(err.Error(), "already ran it") || strings.Contains(err.Error(), "--force") {
		t.Fatalf("second redeliver: %v, want a refusal saying the backend already ran it, proposing no --force", err)
	}
	if _, err = runCLI(t, append([]string{"redeliver", "demo:cli-1", "--force"}, addr...)...); err == nil || !strings.Contains(err.Error(), "already ran it") || !strings.Contains(err.Error(), "add --again") {
		t.Fatalf("redeliver --force of an answered key: %v, want a refusal asking for --again", err)
	}
	if n := be.Count("cli-1"); n != 2 {
		t.Fatalf("backend ran %d times, want 2", n)
	}
	out, err = runCLI(t, append([]string{"list", "--state", "failed", "--all"}, addr...)...)
	if err != nil || strings.Contains(out, "cli-1") {
		t.Fatalf("failed after the redelivery: %v\n%s", err, out)
	}
	// An answered key's STATUS is its remembered answer's, in the table
	// and in the JSON.
	out, err = runCLI(t, append([]string{"list", "--state", "answered"}, addr...)...)
	if err != nil || !regexp.MustCompile(`(?m)^demo:cli-1 +answered +200 +`).MatchString(out) {
		t.Fatalf("list --state answered: %v\n%s", err, out)
	}
	out, err = runCLI(t, append([]string{"list", "--state", "answered", "--json"}, addr...)...)
	var page admin.PageView
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Keys) != 1 || page.Keys[0].Status != 200 ||
		!strings.Contains(out, `"status": 200`) {
		t.Fatalf("list --state answered --json: %v\n%s", err, out)
	}
}

// TestAdminAndCLINotHTMLEscaped: the admin API's errors and records, and
// the CLI's output, show "<" and ">" as they are, not as \u003c \u003e.
func TestAdminAndCLINotHTMLEscaped(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	g := gatewaytest.StartGateway(t, `
	idempotency {
		key {idempotency.form.out_trade_no}
		scope demo
		store memory
	}
	reverse_proxy `+be.Addr())
	status, body := g.AdminDo(t, http.MethodGet, "/idempotency/keys/")
	if status != http.StatusBadRequest || !strings.Contains(body, "missing key: /idempotency/keys/<key>") {
		t.Errorf("GET /idempotency/keys/: got %d %s, want 400 naming /idempotency/keys/<key>", status, body)
	}
	status, body = g.AdminDo(t, http.MethodGet, "/idempotency/nope")
	if status != http.StatusNotFound || !strings.Contains(body, "try /idempotency/keys/<key>") {
		t.Errorf("GET /idempotency/nope: got %d %s", status, body)
	}
	gatewaytest.Notify(t, g.Base, "<a&b>")
	status, body = g.AdminDo(t, http.MethodGet, "/idempotency/keys/"+url.PathEscape("demo:<a&b>"))
	if status != http.StatusOK || !strings.Contains(body, `"key": "demo:<a&b>"`) {
		t.Errorf("GET a key with <, & and >: got %d %s", status, body)
	}
	out, err := runCLI(t, "in-flight", "--all", "--address", g.Admin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := printJSON(&buf, admin.RecordView{Key: "demo:<a&b>"}); err != nil || !strings.Contains(buf.String(), `"demo:<a&b>"`) {
		t.Errorf("printJSON escaped the key: %s", buf.String())
	}
	for _, s := range []string{body, out, buf.String()} {
		if strings.Contains(s, `\u003c`) || strings.Contains(s, `\u0026`) {
			t.Errorf("HTML-escaped output: %s", s)
		}
	}
}

// TestRedeliverBulkCLI: `redeliver --state failed --scope demo` after a
// dry run: each failed key runs once more, and the exit status says
// whether every key ended answered. Without a filter the run is refused
// with the count a dry run gives.
func TestRedeliverBulkCLI(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 || strings.HasPrefix(order, "bf-") {
			return 500, "down", 0
		}
		return 200, "ok " + order, 0
	})
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store memory", "{backend}", be.Addr(), "{extra}", "")
	addr := []string{"--address", g.Admin}
	for _, o := range []string{"b-0", "b-1", "b-2"} {
		gatewaytest.Notify(t, g.Base, o)
	}
	if _, err := runCLI(t, append([]string{"redeliver", "--state", "failed"}, addr...)...); err == nil ||
		!strings.Contains(err.Error(), "needs a filter") || !strings.Contains(err.Error(), "matches 3 failed keys") {
		t.Fatalf("a run without a filter: %v, want a refusal naming the 3 keys", err)
	}
	out, err := runCLI(t, append([]string{"redeliver", "--state", "failed", "--scope", "demo", "--dry-run"}, addr...)...)
	if err != nil || !strings.Contains(out, "matched 3 keys; 3 would be redelivered (dry run: nothing sent)") || be.Total.Load() != 3 {
		t.Fatalf("dry run: %v, backend %d\n%s", err, be.Total.Load(), out)
	}
	out, err = runCLI(t, append([]string{"redeliver", "--state", "failed", "--scope", "demo", "--since", "1h"}, addr...)...)
	if err != nil || strings.Count(out, "answered") != 3 || !regexp.MustCompile(`(?m)^demo:b-0 +200 +answered`).MatchString(out) {
		t.Fatalf("bulk run: %v\n%s", err, out)
	}
	for _, o := range []string{"b-0", "b-1", "b-2"} {
		if n := be.Count(o); n != 2 {
			t.Errorf("%s ran %d times, want 2", o, n)
		}
	}
	if out, err = runCLI(t, append([]string{"redeliver", "--state", "failed", "--scope", "demo"}, addr...)...); err != nil || !strings.Contains(out, "matched 0 keys") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	// A key that fails again: the run's exit status says so.
	gatewaytest.Notify(t, g.Base, "bf-1")
	out, err = runCLI(t, append([]string{"redeliver", "--state", "failed", "--scope", "demo", "--json"}, addr...)...)
	var v admin.BulkView
	if err == nil || !strings.Contains(err.Error(), "1 of 1 redelivered keys are not answered") || json.Unmarshal([]byte(out), &v) != nil ||
		len(v.Results) != 1 || v.Results[0].State != "failed" || v.Results[0].Status != 500 {
		t.Fatalf("a run whose key fails again: %v\n%s", err, out)
	}
	// One key, --json: the API's answer, state included; still non-zero.
	out, err = runCLI(t, append([]string{"redeliver", "demo:bf-1", "--json"}, addr...)...)
	var one admin.RedeliveryView
	if err == nil || json.Unmarshal([]byte(out), &one) != nil || one.State != "failed" || one.Status != 500 || one.Route != "demo#1" {
		t.Fatalf("redeliver --json of a failing key: %v\n%s", err, out)
	}
	if n := be.Count("bf-1"); n != 3 {
		t.Errorf("bf-1 ran %d times, want 3", n)
	}
	// The order command prints a table.
	if out, err = runCLI(t, append([]string{"order", "demo:b-0"}, addr...)...); err != nil || !regexp.MustCompile(`(?m)^EVENT +STATE +RAN`).MatchString(out) {
		t.Errorf("order: %v\n%s", err, out)
	}
}
