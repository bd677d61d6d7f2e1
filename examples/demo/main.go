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
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
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
		startBackend()
	}
	os.Args = append([]string{os.Args[0]}, args...)
	caddycmd.Main()
}

func startBackend() {
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
	fmt.Fprintf(os.Stderr, `
idemgate demo
  legacy backend (no idempotency check)  http://%[1]s   delay %[2]v, fail-first %[3]d, GET /return: %[5]s
  gateway (idempotency + reverse_proxy)   http://localhost:8080/notify

In another terminal:
  go run ./examples/storm                                    # 100 copies through the gateway: 1 renewal
  go run ./examples/storm -url http://%[1]s/notify   # straight to the backend: 100 renewals
  curl -i -d out_trade_no=o-1 localhost:8080/notify          # twice: the 2nd is replayed
  curl -s localhost:8080/stats                               # renewals per order
  curl -s localhost:2019/idempotency/keys/demo:o-1           # the remembered answer
  curl -s -X DELETE localhost:2019/idempotency/keys/demo:o-1 # forget it: the next copy goes through
Answers are kept in %[4]s/ and survive restarts; remove it to start afresh.
Stop with Ctrl-C.

`, backendAddr, delay, failFirst, dataDir, map[bool]string{false: "renews too (DEMO_BACKEND_RETURN=business)", true: "page only (DEMO_BACKEND_RETURN=page)"}[returnPage])
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
