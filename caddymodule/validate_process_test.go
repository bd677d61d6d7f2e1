package caddymodule

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// runValidate runs `idemgate validate` on a Caddyfile whose one site holds
// siteBody, bounded by limit, and returns its output, error and duration.
func runValidate(t *testing.T, home, siteBody string, limit time.Duration) (string, error, time.Duration) {
	t.Helper()
	bin := gatewayBinary(t)
	cf := filepath.Join(t.TempDir(), "Caddyfile")
	text := "{\n\tadmin off\n\tpersist_config off\n}\nhttp://127.0.0.1:" + itoa(freePort(t)) + " {\n" + siteBody + "\n}\n"
	if err := os.WriteFile(cf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "validate", "--config", cf, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(home, "config"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), err, time.Since(start)
}

// TestValidateWhileRunning: `validate` succeeds while a gateway runs on
// the same embedded file, whose lock that gateway holds: validating opens
// no store. (Caddy's habit: validate, then reload.)
func TestValidateWhileRunning(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	be := newBackend(t)
	home := t.TempDir()
	db := filepath.Join(home, "keys.db")
	site := fmt.Sprintf(`
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store embedded %s
	}
	reverse_proxy %s`, db, be.addr())
	gw := startProc(t, home, site)
	if r := notify(t, gw.base, "v-1"); r.status != 200 {
		t.Fatalf("first copy: %d %q", r.status, r.body)
	}
	// The running gateway holds the file's lock: opening it here fails.
	if s, err := store.NewEmbedded(db, store.EmbeddedOptions{OpenTimeout: 100 * time.Millisecond}); err == nil {
		s.Close()
		t.Fatal("the embedded file opened beside the running gateway: the test proves nothing")
	}
	out, err, took := runValidate(t, home, site, 30*time.Second)
	if err != nil || !strings.Contains(out, "Valid configuration") {
		t.Fatalf("validate beside the running gateway: %v\n%s", err, out)
	}
	t.Logf("validate took %v", took)
	// Running it, though, opens the store: a second gateway on the file
	// refuses to start, naming why.
	cf2 := filepath.Join(t.TempDir(), "Caddyfile")
	text := "{\n\tadmin off\n\tpersist_config off\n}\nhttp://127.0.0.1:" + itoa(freePort(t)) + " {\n" + site + "\n}\n"
	if err := os.WriteFile(cf2, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	second := exec.Command(gatewayBinary(t), "run", "--config", cf2, "--adapter", "caddyfile")
	second.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data2"),
		"XDG_CONFIG_HOME="+filepath.Join(home, "config2"))
	done := make(chan []byte, 1)
	go func() { b, _ := second.CombinedOutput(); done <- b }()
	select {
	case b := <-done:
		if second.ProcessState.Success() || !strings.Contains(string(b), "is held by another process") {
			t.Errorf("a second gateway on the same file: exit %v\n%s", second.ProcessState, b)
		}
	case <-time.After(30 * time.Second):
		second.Process.Kill()
		<-done
		t.Fatal("a second gateway on the same file kept running")
	}
	if r := notify(t, gw.base, "v-1"); r.status != 200 || !r.replayed {
		t.Fatalf("copy after validate: got %d replayed=%v, want the replayed answer", r.status, r.replayed)
	}
	if n := be.count("v-1"); n != 1 {
		t.Errorf("backend ran %d times, want 1", n)
	}
}

// TestValidateDialsNoRedis: `validate` of a config whose Redis accepts
// connections but never answers returns at once and connects to it
// not once.
func TestValidateDialsNoRedis(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			defer c.Close() // held open, never answered
		}
	}()
	for _, storeID := range []string{
		"store redis " + ln.Addr().String(),
		"store redis redis://" + ln.Addr().String() + "/2",
		"store redis " + ln.Addr().String() + " {\n\t\t\tdb 3\n\t\t}",
	} {
		t.Run(storeID, func(t *testing.T) {
			site := "\tidempotency {\n\t\tkey k:{idempotency.form.out_trade_no}\n\t\t" + storeID + "\n\t}\n\trespond ok"
			out, err, took := runValidate(t, t.TempDir(), site, 30*time.Second)
			if err != nil || !strings.Contains(out, "Valid configuration") {
				t.Fatalf("validate: %v\n%s", err, out)
			}
			// The binary's own start-up costs a few hundred ms; a dial
			// that waited for Redis would take its 2s check time-out.
			if took > 1500*time.Millisecond {
				t.Errorf("validate took %v; want it at once", took)
			}
			if n := conns.Load(); n != 0 {
				t.Errorf("validate connected to Redis %d times, want none", n)
			}
		})
	}
}

// TestValidateRefusesBadRedisAddresses: what can be checked offline is,
// by `validate` (and `adapt`, where no placeholder hides the value).
func TestValidateRefusesBadRedisAddresses(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	for _, c := range []struct{ store, want string }{
		{"store redis redis//127.0.0.1:16379", `redis address "redis//127.0.0.1:16379": host "redis//127.0.0.1" is not a host name or IP address`},
		{"store redis 127.0.0.1", `redis address "127.0.0.1": address 127.0.0.1: missing port in address`},
		{"store redis 127.0.0.1:http", `port "http" is not a number`},
		{"store redis 127.0.0.1:70000", `port "70000" is not a number from 1 to 65535`},
		{"store redis redis://127.0.0.1:6379/x", `invalid database number`},
		{"store redis redis://:s3cret@127.0.0.1:6379/x", `redis://***@127.0.0.1:6379/x`},
		{"store redis 127.0.0.1:1 127.0.0.1:2 {\n\t\tdb 1\n\t}", "redis cluster (several addresses) has no database 1"},
	} {
		t.Run(c.store, func(t *testing.T) {
			site := "idempotency {\n\tkey k:{idempotency.form.a}\n\t" + c.store + "\n}\nrespond ok"
			_, err := adaptSite(t, site)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("adapt: got %v, want an error containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("adapt's error shows the password: %v", err)
			}
		})
	}
	// A JSON config has no adapter: validate checks it.
	cfg := `{"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[
		{"handler":"idempotency","key":"k:{idempotency.form.a}","store":{"type":"redis","addresses":["redis//127.0.0.1:16379"]}},
		{"handler":"static_response","body":"ok"}]}]}}}}}`
	if err := validateJSON(t, cfg); err == nil || !strings.Contains(err.Error(), `redis address "redis//127.0.0.1:16379"`) {
		t.Fatalf("validate: got %v, want the address refused", err)
	}
	out, err, _ := runValidate(t, t.TempDir(), "\tidempotency {\n\t\tkey k:{idempotency.form.a}\n\t\tstore redis redis//127.0.0.1:16379\n\t}\n\trespond ok", 30*time.Second)
	if err == nil || !strings.Contains(out, "is not a host name or IP address") {
		t.Fatalf("idemgate validate: %v\n%s", err, out)
	}
}

// TestValidateStatusQueryNeedsOnDuplicate: `idemgate validate` refuses a
// status-query route (a generic route keyed as an order's event) without
// on_duplicate, whose poll after the payment would get an empty 200, and
// an on_duplicate whose JSON body holds a mistyped placeholder; it takes
// the docs' recipe.
func TestValidateStatusQueryNeedsOnDuplicate(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	const route = "\tidempotency {\n\t\tscope alipay\n\t\tkey {idempotency.json.app_id}:{idempotency.json.trade_no}:paid\n" +
		"\t\tsuccess 200 body TRADE_SUCCESS\n%s\t\tstore memory\n\t}\n\trespond ok"
	for _, c := range []struct{ name, onDup, want string }{
		{"no on_duplicate", "", "without on_duplicate they would get an empty 200"},
		{"a typo in a JSON body", "\t\ton_duplicate respond 200 `{\"state\":\"{http.request.uri.qery.s}\",\"trade_no\":\"{idempotency.json.trade_no}\"}`\n",
			"{http.request.uri.qery.s}: Caddy has no placeholder"},
	} {
		out, err, _ := runValidate(t, t.TempDir(), fmt.Sprintf(route, c.onDup), 30*time.Second)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: validate: %v, want it refused naming %q\n%s", c.name, err, c.want, out)
		}
	}
	out, err, _ := runValidate(t, t.TempDir(), gatewaytest.StatusQueryRecipe(t, "127.0.0.1:9", "store memory"), 30*time.Second)
	if err != nil || !strings.Contains(out, "Valid configuration") {
		t.Fatalf("the docs' status-query recipe: %v\n%s", err, out)
	}
}
