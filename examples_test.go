package idemgate

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/internal/signer"
)

// TestExamplesRunAsWritten: every examples/*.Caddyfile and
// Caddyfile.example, run from a directory where `idemgate idempotency
// keygen --platform all` wrote its keys, adapts without error or warning,
// listens on loopback only (every server and the admin endpoint), and
// starts (is provisioned) without error.
func TestExamplesRunAsWritten(t *testing.T) {
	files, err := filepath.Glob("examples/*.Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("found %d example Caddyfiles, want one per platform: %v", len(files), files)
	}
	files = append(files, "Caddyfile.example")
	for i, f := range files {
		if files[i], err = filepath.Abs(f); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	keygen(t, "--platform", "all", "--dir", filepath.Join(dir, "idemgate-testkeys"))
	// The embedded store and Caddy's storage go under the temporary
	// directory, not the user's.
	for _, name := range []string{"XDG_DATA_HOME", "XDG_CONFIG_HOME", "HOME"} {
		t.Setenv(name, filepath.Join(dir, strings.ToLower(name)))
	}
	t.Chdir(dir)

	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		t.Fatal("no caddyfile adapter registered")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			cfgJSON, warn, err := adapter.Adapt(src, map[string]any{"filename": file})
			if err != nil {
				t.Fatalf("adapting %s: %v", file, err)
			}
			for _, w := range warn {
				t.Errorf("adapt warning: %v", w)
			}
			if !bytes.Contains(cfgJSON, []byte(`"handler":"idempotency"`)) {
				t.Fatalf("%s has no idempotency handler", file)
			}
			for _, addr := range listeners(t, cfgJSON) {
				if !loopback(t, addr) {
					t.Errorf("%s listens on %q, not on loopback only", file, addr)
				}
			}
			var cfg caddy.Config
			if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
				t.Fatal(err)
			}
			if err := caddy.Validate(&cfg); err != nil {
				t.Fatalf("%s does not start: %v", file, err)
			}
		})
	}
}

// keygen runs `idemgate idempotency keygen <args>` in this process.
func keygen(t *testing.T, args ...string) {
	t.Helper()
	c, ok := caddycmd.Commands()["idempotency"]
	if !ok {
		t.Fatal("no idempotency subcommand registered")
	}
	root := &cobra.Command{Use: c.Name, Short: c.Short}
	c.CobraFunc(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"keygen"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("keygen %v: %v\n%s", args, err, &out)
	}
}

// listeners are the addresses an adapted config listens on: every HTTP
// server's, and the admin endpoint's (Caddy's default, localhost:2019,
// when the config names none).
func listeners(t *testing.T, cfgJSON []byte) []string {
	t.Helper()
	var cfg struct {
		Admin *struct {
			Disabled bool   `json:"disabled"`
			Listen   string `json:"listen"`
		} `json:"admin"`
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	var out []string
	if len(cfg.Apps.HTTP.Servers) == 0 {
		t.Fatal("the config has no HTTP server")
	}
	for name, srv := range cfg.Apps.HTTP.Servers {
		if len(srv.Listen) == 0 {
			t.Errorf("server %s names no listener", name)
		}
		out = append(out, srv.Listen...)
	}
	switch {
	case cfg.Admin == nil || cfg.Admin.Listen == "":
		out = append(out, caddy.DefaultAdminListen)
	case !cfg.Admin.Disabled:
		out = append(out, cfg.Admin.Listen)
	}
	return out
}

// loopback reports whether a Caddy listener address names only this
// machine: a loopback IP or localhost, never an empty host (every
// interface).
func loopback(t *testing.T, addr string) bool {
	t.Helper()
	na, err := caddy.ParseNetworkAddress(addr)
	if err != nil {
		t.Errorf("listener %q: %v", addr, err)
		return false
	}
	if na.Host == "localhost" {
		return true
	}
	ip := net.ParseIP(na.Host)
	return ip != nil && ip.IsLoopback()
}

// TestCatchUpExampleRunsAsWritten: examples/catchup/Caddyfile, run from a
// directory holding the keys and certificate its command writes into
// catchup-keys/, adapts without error or warning, listens on loopback
// only, has a catch_up route per platform (Stripe and PayPal resend,
// Alipay and WeChat Pay query_route) and starts (is provisioned) without
// error. caddy.Validate starts no app, so no engine asks the platforms.
func TestCatchUpExampleRunsAsWritten(t *testing.T) {
	file, err := filepath.Abs("examples/catchup/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "catchup-keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	pub, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	cert, err := signer.Certificate(k, big.NewInt(1), "messageverificationcerts.paypal.com")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"app_private_key.pem":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"alipay_public_key.pem": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"paypal_cert.pem":       cert,
		"apiclient_key.pem":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"wechatpay_pub_key.pem": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	} {
		if err := os.WriteFile(filepath.Join(keys, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"XDG_DATA_HOME", "XDG_CONFIG_HOME", "HOME"} {
		t.Setenv(name, filepath.Join(dir, strings.ToLower(name)))
	}
	t.Chdir(dir)

	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfgJSON, warn, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": file})
	if err != nil {
		t.Fatalf("adapting %s: %v", file, err)
	}
	for _, w := range warn {
		t.Errorf("adapt warning: %v", w)
	}
	for _, addr := range listeners(t, cfgJSON) {
		if !loopback(t, addr) {
			t.Errorf("listens on %q, not on loopback only", addr)
		}
	}
	if n := bytes.Count(cfgJSON, []byte(`"catch_up":`)); n != 4 {
		t.Errorf("%d catch_up blocks, want one per platform (4)", n)
	}
	for _, p := range []string{"stripe", "paypal", "alipay", "wechatpay"} {
		if !bytes.Contains(cfgJSON, []byte(`"name":"`+p+`"`)) {
			t.Errorf("no %s route", p)
		}
	}
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&cfg); err != nil {
		t.Fatalf("%s does not start: %v", file, err)
	}
}
