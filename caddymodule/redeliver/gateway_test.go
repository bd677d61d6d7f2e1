package redeliver_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	_ "github.com/idemgate/idemgate/caddymodule"
	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// Redelivery through the real module (internal/gatewaytest): a journaled
// notification sent back into its route through the admin API. The built
// binary's redelivery, re-signed: caddymodule's recovery_process_test.go.

// TestRedeliverProbeRefusesAnotherRoute: a config reload moved /notify to
// another scope's route and the key's own route to /demo; that route has
// served nothing yet, so the redelivery probes the site's routing with the
// journaled request, finds the other route, and is refused — nothing is
// sent, the key stays failed. Once its own route has served a request,
// the redelivery enters it directly.
func TestRedeliverProbeRefusesAnotherRoute(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 500, "down", 0
		}
		return 200, "ok " + order + " at " + r.URL.Path, 0
	})
	route := func(path, scope string) string {
		return `
	handle ` + path + ` {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope ` + scope + `
			store memory
		}
		reverse_proxy ` + be.Addr() + `
	}`
	}
	adminAddr := gatewaytest.ReservePort(t)
	port := gatewaytest.FreePort(t)
	cf := func(site string) string {
		return "{\n\tadmin " + adminAddr + "\n\tauto_https off\n\tpersist_config off\n\tstorage file_system " + t.TempDir() +
			"\n\tlog {\n\t\tlevel ERROR\n\t}\n}\nhttp://127.0.0.1:" + strconv.Itoa(port) + " {\n" + site + "\n}\n"
	}
	gatewaytest.LoadCaddyfile(t, cf(route("/notify", "demo")))
	t.Cleanup(func() { caddy.Stop() })
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	gatewaytest.WaitListening(t, base)
	g := gatewaytest.Gateway{Base: base, Admin: adminAddr}
	if r := gatewaytest.Post(t, base+"/notify", "application/x-www-form-urlencoded", "out_trade_no=m-1", nil); r.Status != 500 {
		t.Fatalf("first copy: %+v", r)
	}
	gatewaytest.LoadCaddyfile(t, cf(route("/notify", "other")+route("/demo", "demo")))
	g.WaitReloaded(t)
	status, body := g.AdminDo(t, http.MethodPost, gatewaytest.KeyURI("demo:m-1")+"/redeliver")
	if status != http.StatusConflict || !strings.Contains(body, "to route other#1, not demo#1") || be.Count("m-1") != 1 {
		t.Fatalf("redelivery after the reload: %d %s, backend %d; want 409 naming other#1, nothing sent", status, body, be.Count("m-1"))
	}
	var rec admin.RecordView
	g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("demo:m-1"), &rec)
	if rec.State != "failed" {
		t.Fatalf("state after the refused redelivery: %s", rec.State)
	}
	// The demo route serves a request: now it knows its chain.
	gatewaytest.Post(t, base+"/demo", "application/x-www-form-urlencoded", "out_trade_no=m-2", nil)
	var red admin.RedeliveryView
	g.AdminJSON(t, http.MethodPost, gatewaytest.KeyURI("demo:m-1")+"/redeliver", &red)
	if red.State != "answered" || red.Body != "ok m-1 at /notify" || be.Count("m-1") != 2 {
		t.Fatalf("redelivery into the known route: %+v, backend %d", red, be.Count("m-1"))
	}
}
