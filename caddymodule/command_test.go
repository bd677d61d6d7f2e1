package caddymodule

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

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
	be := newBackend(t)
	release := make(chan struct{})
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "slow" {
			<-release
		}
		return 200, "ok " + order, 0
	})
	g := startGateway(t, notifyRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.addr(), "{extra}", "")
	addr := []string{"--address", g.admin}

	notify(t, g.base, "c/1")
	notify(t, g.base, "c/1")

	out, err := runCLI(t, append([]string{"inspect", "demo:c/1"}, addr...)...)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var rec recordView
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Key != "demo:c/1" || rec.State != "answered" || rec.Copies != 2 {
		t.Fatalf("inspect printed %q (%v)", out, err)
	}
	if !strings.Contains(out, "\n  \"state\": \"answered\"") {
		t.Errorf("inspect output is not indented JSON: %q", out)
	}

	// --config finds the admin address in a Caddyfile.
	cfg := filepath.Join(t.TempDir(), "Caddyfile")
	os.WriteFile(cfg, []byte("{\n\tadmin "+g.admin+"\n}\n:0 {\n\trespond ok\n}\n"), 0o600)
	out, err = runCLI(t, "inspect", "--body", "demo:c/1", "--config", cfg, "--adapter", "caddyfile")
	if err != nil || !strings.Contains(out, `"body": "b2sgYy8x"`) { // base64("ok c/1")
		t.Fatalf("inspect --body --config: %q %v", out, err)
	}

	out, err = runCLI(t, append([]string{"purge", "demo:c/1"}, addr...)...)
	if err != nil || !strings.Contains(out, `"deleted": true`) {
		t.Fatalf("purge: %q %v", out, err)
	}
	if r := notify(t, g.base, "c/1"); r.status != 200 || r.replayed || be.count("c/1") != 2 {
		t.Fatalf("after purge: %d replayed=%v backend=%d, want forwarded again", r.status, r.replayed, be.count("c/1"))
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
	go func() { defer wg.Done(); notify(t, g.base, "slow") }()
	var page pageView
	eventually(t, 5*time.Second, "the slow claim listed", func() bool {
		out, err := runCLI(t, append([]string{"in-flight", "--all", "--limit", "1"}, addr...)...)
		if err != nil {
			t.Fatalf("in-flight: %v", err)
		}
		page = pageView{}
		json.Unmarshal([]byte(out), &page)
		return len(page.Keys) == 1
	})
	if page.Keys[0].Key != "demo:slow" || page.Next != "" {
		t.Errorf("in-flight --all: %+v", page)
	}
	close(release)
	wg.Wait()
	out, err = runCLI(t, append([]string{"in-flight"}, addr...)...)
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Keys) != 0 {
		t.Errorf("in-flight after the answer: %q %v, want no keys", out, err)
	}
}
