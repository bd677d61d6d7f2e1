package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
)

// TestOwnDataDir: after ownDataDir, everything Caddy keeps on disk — the
// storage (where the embedded store and locks go), the data directory and
// the config directory (autosave.json) — is under .idemgate-demo/ in the
// current directory, not in the user's Caddy directories.
func TestOwnDataDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("XDG_DATA_HOME", "/nonexistent/user-data")
	t.Setenv("XDG_CONFIG_HOME", "/nonexistent/user-config")
	saved := caddy.DefaultStorage.Path
	t.Cleanup(func() { caddy.DefaultStorage.Path = saved })
	if err := ownDataDir(); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, dataDir) + string(filepath.Separator)
	for what, path := range map[string]string{
		"storage":    caddy.DefaultStorage.Path,
		"data dir":   caddy.AppDataDir(),
		"config dir": caddy.AppConfigDir(),
	} {
		if !strings.HasPrefix(path, want) {
			t.Errorf("%s is %s, not under %s", what, path, want)
		}
	}
}

// TestDemoHasEveryModule: the demo registers what the README's demo
// commands use — the admin API (curl localhost:2019/idempotency/keys/…),
// the console and the CLI — not the handler alone.
func TestDemoHasEveryModule(t *testing.T) {
	for _, id := range []string{"idempotency", "http.handlers.idempotency", "admin.api.idempotency", "http.handlers.idempotency_console"} {
		if _, err := caddy.GetModule(id); err != nil {
			t.Errorf("module %s: %v", id, err)
		}
	}
	if _, ok := caddycmd.Commands()["idempotency"]; !ok {
		t.Error("no idempotency command")
	}
}

// TestDemoListensOnLoopback: the demo's gateway (Caddyfile.example) and
// admin endpoint answer this machine only.
func TestDemoListensOnLoopback(t *testing.T) {
	cf, err := os.ReadFile("../../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}.Adapt(cf, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Admin struct {
			Listen string `json:"listen"`
		} `json:"admin"`
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Apps.HTTP.Servers) == 0 {
		t.Fatalf("no servers in %s", out)
	}
	for name, srv := range cfg.Apps.HTTP.Servers {
		for _, l := range srv.Listen {
			host, _, err := net.SplitHostPort(l)
			if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
				t.Errorf("server %s listens on %q, want a loopback address", name, l)
			}
		}
	}
	if cfg.Admin.Listen != "localhost:2019" {
		t.Errorf("admin listens on %q, want localhost:2019", cfg.Admin.Listen)
	}
}

// TestBannerNamesWhereItListens: every address the demo's banner names is
// one it listens on — the backend's, the gateway's and the admin
// endpoint's as Caddyfile.example (adapted as Caddy runs it) says — and
// each of those is named. A banner that said localhost:8080 for a gateway
// bound to 127.0.0.1:8080 sent users to an address nothing listened on.
func TestBannerNamesWhereItListens(t *testing.T) {
	servers, admin, err := listening([]string{"run", "--config", "../../Caddyfile.example", "--adapter", "caddyfile"})
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 1 || servers[0] != "127.0.0.1:8080" || admin != "localhost:2019" {
		t.Fatalf("Caddyfile.example listens on %v, admin %q; want 127.0.0.1:8080 and localhost:2019", servers, admin)
	}
	b := banner(servers, admin, 200*time.Millisecond, 0, false)
	listens := map[string]bool{backendAddr: false, servers[0]: false, admin: false}
	for _, m := range regexp.MustCompile(`([A-Za-z0-9.-]*|\[[0-9a-fA-F:]+\]):\d+`).FindAllString(b, -1) {
		if _, ok := listens[m]; !ok {
			t.Errorf("the banner names %s, where the demo does not listen:\n%s", m, b)
		}
		listens[m] = true
	}
	for addr, named := range listens {
		if !named {
			t.Errorf("the banner does not name %s:\n%s", addr, b)
		}
	}
	// The file name alone selects the Caddyfile adapter, as Caddy does.
	if s, _, err := listening([]string{"run", "--config=../../Caddyfile.example"}); err != nil || !slices.Equal(s, servers) {
		t.Errorf("without --adapter: %v, %v", s, err)
	}
}
