package command

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/examples/legacy"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// runIdem runs `idemgate idempotency <args>` in this process.
func runIdem(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c := idempotencyCommand()
	root := &cobra.Command{Use: c.Name, Short: c.Short}
	c.CobraFunc(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// startLegacy runs the stand-in legacy backend of examples/legacy.
func startLegacy(t *testing.T) (*legacy.Backend, string) {
	t.Helper()
	b := legacy.New(legacy.Config{Log: io.Discard})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b, ln.Addr().String()
}

var (
	localSite = regexp.MustCompile(`(?m)^http://localhost:\d+ \{`)
	localPath = regexp.MustCompile(`(?m)^\thandle (\S+) \{`)
)

// TestSendEachPresetLocally: for every preset, the README's local steps —
// keygen, the example's Caddyfile, send, send again — with the real
// module and the stand-in legacy backend: the first copy is forwarded, the
// second (same --id, re-signed as the platform's retry is) replayed, the
// backend runs once, and a notification signed with other keys is a 401
// that never reaches it.
func TestSendEachPresetLocally(t *testing.T) {
	for _, p := range sendPlatforms {
		t.Run(p, func(t *testing.T) {
			keys := t.TempDir()
			if out, err := runIdem(t, "keygen", "--platform", p, "--dir", keys); err != nil {
				t.Fatalf("keygen: %v\n%s", err, out)
			}
			text, err := os.ReadFile(filepath.Join("..", "..", "examples", p+".Caddyfile"))
			if err != nil {
				t.Fatal(err)
			}
			route := localPath.FindStringSubmatch(string(text))
			if route == nil || !localSite.Match(text) || !strings.Contains(string(text), "idemgate-testkeys/") ||
				!strings.Contains(string(text), "storage file_system .idemgate-demo/local") {
				t.Fatalf("examples/%s.Caddyfile has no http://localhost site, handle route, idemgate-testkeys/ keys or own storage", p)
			}
			be, beAddr := startLegacy(t)
			port := gatewaytest.FreePort(t)
			cf := strings.NewReplacer(
				"idemgate-testkeys/", keys+"/",
				"127.0.0.1:9090", beAddr,
				".idemgate-demo/local", t.TempDir(),
				"persist_config off", "persist_config off\n\tadmin off\n\tlog {\n\t\tlevel ERROR\n\t}",
			).Replace(localSite.ReplaceAllString(string(text), fmt.Sprintf("http://127.0.0.1:%d {", port)))
			gatewaytest.LoadCaddyfile(t, cf)
			t.Cleanup(func() { caddy.Stop() })
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			gatewaytest.WaitListening(t, base)
			url := base + route[1]

			id := "idtest" + p
			send := func(args ...string) (string, error) {
				return runIdem(t, append([]string{"send", "--platform", p, "--url", url, "--timeout", "20s"}, args...)...)
			}
			out, err := send("--dir", keys, "--id", id)
			if err != nil || !strings.Contains(out, " 200 OK") || strings.Contains(out, "Idempotent-Replayed") {
				t.Fatalf("first send: %v\n%s", err, out)
			}
			if !strings.Contains(out, "--id "+id) {
				t.Errorf("send does not say how to send the notification again:\n%s", out)
			}
			out, err = send("--dir", keys, "--id", id)
			if err != nil || !strings.Contains(out, " 200 OK  Idempotent-Replayed: true") {
				t.Fatalf("second send of the same notification: %v\n%s", err, out)
			}
			if st := be.Stats(); st.Total != 1 {
				t.Fatalf("backend ran %d times for one notification sent twice, want 1 (%v)", st.Total, st.Renewals)
			}

			// Keys the route does not know: refused before the backend.
			other := t.TempDir()
			if _, err := runIdem(t, "keygen", "--platform", p, "--dir", other); err != nil {
				t.Fatal(err)
			}
			out, err = send("--dir", other, "--id", id+"-forged")
			if err == nil || !strings.Contains(out, "401 Unauthorized") {
				t.Fatalf("send with other keys: got %v\n%s\nwant a 401", err, out)
			}
			if strings.Contains(out, "send it again") || !strings.Contains(out, "refused the signature") {
				t.Errorf("after a 401, send suggests sending it again, or does not say why it failed:\n%s", out)
			}
			if st := be.Stats(); st.Total != 1 {
				t.Errorf("a forged notification reached the backend: it ran %d times, want 1", st.Total)
			}
		})
	}
}

// TestSendErrors: missing keys and unknown platforms are errors that say
// what to do.
func TestSendErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := runIdem(t, "send", "--platform", "stripe", "--url", "http://127.0.0.1:1/x", "--dir", dir)
	if err == nil || !strings.Contains(err.Error(), "idemgate idempotency keygen --platform stripe") {
		t.Errorf("send without keys: got %v, want a hint to run keygen", err)
	}
	_, err = runIdem(t, "send", "--platform", "strip", "--url", "http://127.0.0.1:1/x")
	if err == nil || !strings.Contains(err.Error(), "alipay, wechatpay, wechatpay_v2, stripe, paypal, standard_webhooks") {
		t.Errorf("send --platform strip: got %v, want the list of platforms", err)
	}
	if _, err := runIdem(t, "keygen", "--platform", "stripe", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	_, err = runIdem(t, "keygen", "--platform", "stripe", "--dir", dir)
	if err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("keygen over existing keys: got %v, want a refusal naming --force", err)
	}
	if _, err := runIdem(t, "keygen", "--platform", "stripe", "--dir", dir, "--force"); err != nil {
		t.Errorf("keygen --force: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "stripe_webhook_secret")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the secret file is not owner-only: %v %v", fi.Mode(), err)
	}
}

// TestSendSameBody: a notification sent again with the same --id carries
// the same body where the platform's retries do (all but Alipay, which
// re-signs each retry with a new notify_time); its signature headers are
// made afresh.
func TestSendSameBody(t *testing.T) {
	for _, p := range sendPlatforms {
		if p == "alipay" {
			continue
		}
		t.Run(p, func(t *testing.T) {
			t.Parallel() // each waits a second; keys of its own
			keys := t.TempDir()
			if out, err := runIdem(t, "keygen", "--platform", p, "--dir", keys); err != nil {
				t.Fatalf("keygen: %v\n%s", err, out)
			}
			o := sendOptions{platform: p, id: "same-1", order: "o-same-1", amount: 990, dir: keys, flags: map[string]string{"sign-type": "MD5"}}
			first, err := buildNotification(o)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(1100 * time.Millisecond) // a later timestamp in the headers
			second, err := buildNotification(o)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first.body, second.body) {
				t.Errorf("two sends of one --id differ:\n%s\n%s", first.body, second.body)
			}
			if p != "wechatpay_v2" && fmt.Sprint(first.header) == fmt.Sprint(second.header) {
				t.Errorf("two sends a second apart have the same signature headers: %v", first.header)
			}
			o.id, o.order = "same-2", "o-same-2"
			if other, err := buildNotification(o); err != nil || bytes.Equal(other.body, first.body) {
				t.Errorf("another notification has the same body (%v)", err)
			}
		})
	}
}
