package app_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	_ "github.com/idemgate/idemgate/caddymodule"
	"github.com/idemgate/idemgate/caddymodule/metrics"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestRegistriesAcrossReloads: 100 config reloads, each replacing a sync
// route and an async route with two of new scopes, leave in the running
// config's app exactly what the last config has — its two routes, its one
// engine, its one store — one meter provider in the process, nothing in
// the first config's app, and no goroutine of a dropped route behind.
func TestRegistriesAcrossReloads(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	port := gatewaytest.FreePort(t)
	config := func(i int) string {
		return fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	storage file_system %s
	log {
		level ERROR
	}
}
http://127.0.0.1:%d {
	handle /sync {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope sync-%d
			store memory
		}
		reverse_proxy %s
	}
	handle /async {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope async-%d
			store memory
			deliver async {
				to http://%s
				ack 200 success
			}
		}
	}
}
`, t.TempDir(), port, i, be.Addr(), i, be.Addr())
	}
	gatewaytest.LoadCaddyfile(t, config(0))
	t.Cleanup(func() { caddy.Stop() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	gatewaytest.WaitListening(t, base)
	if r := gatewaytest.Post(t, base+"/sync", "application/x-www-form-urlencoded", "out_trade_no=warm", nil); r.Status != 200 {
		t.Fatalf("the first config's sync route: %d %q", r.Status, r.Body)
	}
	goroutines := runtime.NumGoroutine()
	first := gatewaytest.App(t)

	for i := 1; i <= 100; i++ {
		gatewaytest.LoadCaddyfile(t, config(i))
	}
	gatewaytest.WaitServing(t, base)
	if r := gatewaytest.Post(t, base+"/sync", "application/x-www-form-urlencoded", "out_trade_no=after", nil); r.Status != 200 {
		t.Fatalf("the last config's sync route: %d %q", r.Status, r.Body)
	}

	app := gatewaytest.App(t)
	if n := len(app.ScopeNames()); n != 2 {
		t.Errorf("%d scopes registered after 100 reloads, want the last config's 2", n)
	}
	for _, scope := range []string{"sync-100", "async-100"} {
		if _, ok := app.RouteOf(scope); !ok {
			t.Errorf("scope %s of the running config is not registered", scope)
		}
	}
	if _, ok := app.RouteOf("sync-99"); ok {
		t.Error("a dropped route's scope is still registered")
	}
	if es := app.Engines(); len(es) != 1 || es[0].Scope() != "async-100" {
		t.Errorf("engines after 100 reloads: %d, want the last config's one", len(es))
	}
	if ids := app.StoreIDs(); len(ids) != 1 {
		t.Errorf("stores after 100 reloads: %v, want one", ids)
	}
	if first == app {
		t.Fatal("the first and the last config share an app")
	}
	if n, es, ids := first.ScopeNames(), first.Engines(), first.StoreIDs(); len(n) != 0 || len(es) != 0 || len(ids) != 0 {
		t.Errorf("the first config's app keeps scopes %v, %d engines, stores %v after it was unloaded", n, len(es), ids)
	}
	// The metrics' collector is held by the running config's registry
	// only (the dropped configs' registries are let go).
	gatewaytest.Eventually(t, 5*time.Second, "the dropped configs' registries to be let go", func() bool {
		return metrics.Registries() <= 1
	})
	// Dropped engines' workers and refreshers are gone (a little slack for
	// the HTTP server's own connection goroutines).
	gatewaytest.Eventually(t, 10*time.Second, "the dropped routes' goroutines to end", func() bool {
		return runtime.NumGoroutine() <= goroutines+10
	})
}
