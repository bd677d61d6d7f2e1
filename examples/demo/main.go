// Command demo is the README's one-command demo. From the repository root:
//
//	go run ./examples/demo
//
// It starts the stand-in legacy backend (no idempotency check) on
// 127.0.0.1:9090, then runs Caddy with idemgate in this same process, as
// `caddy run --config Caddyfile.example --adapter caddyfile`: the gateway
// listens on 127.0.0.1:8080, this machine only. Arguments, if given, replace that Caddy command line
// (`go run ./examples/demo run --config my.Caddyfile`).
//
// The backend is tuned by environment variables, since the arguments are Caddy's:
//
//	DEMO_BACKEND_DELAY=200ms     how long each renewal takes (a slow backend invites retries)
//	DEMO_BACKEND_FAIL_FIRST=0    answer "fail" (500) to the first N notifications
//	DEMO_BACKEND_RETURN=business GET /return renews too, as many legacy backends do; "page":
//	                             it shows the result page only and the notify alone renews, as
//	                             Alipay asks merchants. The Alipay example
//	                             (go run ./examples/demo run --config examples/alipay.Caddyfile)
//	                             says `return business` for the first, `return display` for the second.
//
// The demo keeps its data (the embedded store, anything Caddy writes) in
// .idemgate-demo/ under the current directory, not in the user's Caddy data
// and config directories: it points XDG_DATA_HOME and XDG_CONFIG_HOME there
// for this process. Remove that directory to start afresh.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	// The module root registers every module (the handler, the admin API,
	// the console, the CLI), as cmd/idemgate has them.
	_ "github.com/idemgate/idemgate"

	"github.com/idemgate/idemgate/examples/legacy"
)

const (
	backendAddr   = "127.0.0.1:9090"
	defaultConfig = "Caddyfile.example"
	dataDir       = ".idemgate-demo"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		if _, err := os.Stat(defaultConfig); err != nil {
			fatalf("%s not found: run the demo from the repository root (go run ./examples/demo)", defaultConfig)
		}
		args = []string{"run", "--config", defaultConfig, "--adapter", "caddyfile"}
	}
	if err := ownDataDir(); err != nil {
		fatalf("%v", err)
	}
	// Only a running gateway needs the backend; `version`, `adapt`, … do not.
	if args[0] == "run" {
		startBackend(args)
	}
	os.Args = append([]string{os.Args[0]}, args...)
	caddycmd.Main()
}

func startBackend(args []string) {
	delay, err := time.ParseDuration(env("DEMO_BACKEND_DELAY", "200ms"))
	if err != nil {
		fatalf("DEMO_BACKEND_DELAY: %v", err)
	}
	failFirst, err := strconv.Atoi(env("DEMO_BACKEND_FAIL_FIRST", "0"))
	if err != nil {
		fatalf("DEMO_BACKEND_FAIL_FIRST: %v", err)
	}
	returnPage := false
	switch ret := env("DEMO_BACKEND_RETURN", "business"); ret {
	case "business":
	case "page":
		returnPage = true
	default:
		fatalf("DEMO_BACKEND_RETURN: want business or page, got %q", ret)
	}
	ln, err := net.Listen("tcp", backendAddr)
	if err != nil {
		fatalf("legacy backend: %v (is another backend, e.g. go run ./examples/legacy-backend, already on %s?)", err, backendAddr)
	}
	srv := &http.Server{
		Handler:           legacy.New(legacy.Config{Delay: delay, FailFirst: failFirst, ReturnPage: returnPage}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		// The backend lives as long as the process; Caddy's exit ends both.
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			fatalf("legacy backend: %v", err)
		}
	}()
	servers, admin, err := listening(args)
	if err != nil {
		fatalf("reading the config: %v", err)
	}
	fmt.Fprint(os.Stderr, banner(servers, admin, delay, failFirst, returnPage))
}

// banner is what the demo prints at start: exactly the addresses it
// listens on, the backend's and those of the config Caddy runs (servers,
// admin endpoint), and commands that use them.
func banner(servers []string, admin string, delay time.Duration, failFirst int, returnPage bool) string {
	var b strings.Builder
	ret := "renews too (DEMO_BACKEND_RETURN=business)"
	if returnPage {
		ret = "page only (DEMO_BACKEND_RETURN=page)"
	}
	fmt.Fprintf(&b, "\nidemgate demo\n  legacy backend (no idempotency check)  http://%s   delay %v, fail-first %d, GET /return: %s\n", backendAddr, delay, failFirst, ret)
	for _, s := range servers {
		fmt.Fprintf(&b, "  gateway (idempotency + reverse_proxy)   http://%s/notify\n", s)
	}
	if admin != "" {
		fmt.Fprintf(&b, "  admin API                               http://%s\n", admin)
	}
	b.WriteString("\nIn another terminal:\n")
	if len(servers) > 0 {
		gw := servers[0]
		fmt.Fprintf(&b, "  go run ./examples/storm -url http://%s/notify   # 100 copies through the gateway: 1 renewal\n", gw)
		fmt.Fprintf(&b, "  go run ./examples/storm -url http://%s/notify   # straight to the backend: 100 renewals\n", backendAddr)
		fmt.Fprintf(&b, "  curl -i -d out_trade_no=o-1 %s/notify          # twice: the 2nd is replayed\n", gw)
		fmt.Fprintf(&b, "  curl -s %s/stats                               # renewals per order\n", gw)
	}
	if admin != "" {
		fmt.Fprintf(&b, "  curl -s %s/idempotency/keys/demo:o-1           # the remembered answer\n", admin)
		fmt.Fprintf(&b, "  curl -s -X DELETE %s/idempotency/keys/demo:o-1 # forget it: the next copy goes through\n", admin)
	}
	fmt.Fprintf(&b, "Answers are kept in %s/ and survive restarts; remove it to start afresh.\nStop with Ctrl-C.\n\n", dataDir)
	return b.String()
}

// listening reads the config the Caddy command line args runs (--config,
// adapted by --adapter, or by the Caddyfile adapter for a file named
// Caddyfile*, as Caddy does) and returns the addresses its HTTP servers
// listen on and its admin endpoint's ("" when admin is off).
func listening(args []string) (servers []string, admin string, err error) {
	file, adapter := flagValue(args, "config"), flagValue(args, "adapter")
	if file == "" {
		return nil, "", errors.New("no --config")
	}
	body, err := os.ReadFile(file)
	if err != nil {
		return nil, "", err
	}
	if adapter == "" && strings.HasPrefix(filepath.Base(file), "Caddyfile") {
		adapter = "caddyfile"
	}
	if adapter != "" {
		a := caddyconfig.GetAdapter(adapter)
		if a == nil {
			return nil, "", fmt.Errorf("unknown adapter %q", adapter)
		}
		if body, _, err = a.Adapt(body, map[string]any{"filename": file}); err != nil {
			return nil, "", err
		}
	}
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
	if err := json.Unmarshal(body, &cfg); err != nil {
		return nil, "", err
	}
	admin = caddy.DefaultAdminListen
	if cfg.Admin != nil && cfg.Admin.Disabled {
		admin = ""
	} else if cfg.Admin != nil && cfg.Admin.Listen != "" {
		admin = cfg.Admin.Listen
	}
	for _, srv := range cfg.Apps.HTTP.Servers {
		for _, l := range srv.Listen {
			na, err := caddy.ParseNetworkAddress(l)
			if err != nil {
				return nil, "", err
			}
			servers = append(servers, na.JoinHostPort(0))
		}
	}
	slices.Sort(servers)
	return slices.Compact(servers), admin, nil
}

// flagValue is the value of --name (or -name) in args, "" if absent.
func flagValue(args []string, name string) string {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) && strings.HasPrefix(args[i], "-") {
			return args[i+1]
		}
	}
	return ""
}

// ownDataDir points Caddy's data and config directories (where the
// embedded store and autosave.json would go) at the demo's own directory.
func ownDataDir() error {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	for name, sub := range map[string]string{"XDG_DATA_HOME": "data", "XDG_CONFIG_HOME": "config"} {
		if err := os.Setenv(name, filepath.Join(abs, sub)); err != nil {
			return err
		}
	}
	// Caddy's default storage took its path from the environment at
	// start-up, before the lines above.
	caddy.DefaultStorage.Path = caddy.AppDataDir()
	return nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "demo: "+format+"\n", a...)
	os.Exit(1)
}
