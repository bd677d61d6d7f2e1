package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestRouteTable: each route of the admin API (docs/operations.md's
// table, the orders and deliveries routes) reaches its handler on its
// method; a wrong method is a 405 naming the allowed ones (and Allow), an
// unknown path a 404; a key holding ":" and an escaped "/" (even one
// ending in "%2Fredeliver") reaches its key routes whole.
func TestRouteTable(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store memory", "{backend}", be.Addr(), "{extra}", "")
	do := func(method, uri, body string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+g.Admin+uri, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		// An error's message as written, its quotes not escaped.
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return resp.StatusCode, e.Error, resp.Header
		}
		return resp.StatusCode, string(b), resp.Header
	}

	keys := []string{"demo:a/b:c", "demo:x/redeliver"}
	for _, k := range keys {
		gatewaytest.Notify(t, g.Base, strings.TrimPrefix(k, "demo:"))
	}
	for _, c := range []struct {
		method, uri, body string
		status            int
		want              string // in the body
	}{
		{"GET", "/idempotency/stores", "", 200, `"memory"`},
		{"GET", "/idempotency/keys?state=answered", "", 200, `"key": "demo:a/b:c"`},
		{"GET", gatewaytest.KeyURI(keys[0]), "", 200, `"key": "demo:a/b:c"`},
		{"GET", gatewaytest.KeyURI(keys[1]), "", 200, `"key": "demo:x/redeliver"`},
		{"GET", "/idempotency/keys/demo:a%2Fb:c?body=1", "", 200, `"key": "demo:a/b:c"`},
		{"POST", gatewaytest.KeyURI(keys[0]) + "/redeliver", "", 409, `key "demo:a/b:c" is answered`},
		{"POST", gatewaytest.KeyURI(keys[1]) + "/redeliver", "", 409, `key "demo:x/redeliver" is answered`},
		{"POST", "/idempotency/redeliver", `{"state": "failed", "dry_run": true}`, 200, `"matched": 0`},
		{"GET", "/idempotency/summary", "", 200, `"failed"`},
		{"GET", "/idempotency/refused", "", 200, `"refused"`},
		{"GET", "/idempotency/search?q=demo:a", "", 200, `"key": "demo:a/b:c"`},
		{"GET", "/idempotency/orders/demo::a%2Fb:c", "", 404, `no business event of order "demo::a/b:c"`},
		{"POST", "/idempotency/reconcile?platform=nope", "", 400, `platform`},
		{"GET", "/idempotency/deliveries", "", 200, `"deliveries"`},
		{"POST", "/idempotency/deliveries/demo/pause", "", 404, `no route delivers scope "demo"`},
		{"POST", "/idempotency/deliveries/demo/resume", "", 404, `no route delivers scope "demo"`},
		{"DELETE", gatewaytest.KeyURI(keys[0]), "", 200, `"deleted": true`},
		{"GET", gatewaytest.KeyURI(keys[0]), "", 404, `no record for key "demo:a/b:c"`},

		{"POST", "/idempotency/nope", "", 404, "no such route"},
		{"GET", "/idempotency/orders", "", 404, "no such route"},
		{"POST", "/idempotency/deliveries/demo/stop", "", 404, "no such route"},
		{"GET", "/idempotency/keys/", "", 400, "missing key"},
	} {
		status, body, _ := do(c.method, c.uri, c.body)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %s, want %d with %q", c.method, c.uri, status, body, c.status, c.want)
		}
	}

	for _, c := range []struct{ method, uri, allow string }{
		{"POST", "/idempotency/stores", "GET, HEAD"},
		{"PUT", gatewaytest.KeyURI(keys[1]), "DELETE, GET, HEAD"},
		{"POST", gatewaytest.KeyURI(keys[1]), "DELETE, GET, HEAD"},
		{"DELETE", "/idempotency/keys", "GET, HEAD"},
		{"GET", "/idempotency/redeliver", "POST"},
		{"DELETE", "/idempotency/summary", "GET, HEAD"},
		{"GET", "/idempotency/reconcile", "POST"},
		{"POST", "/idempotency/search", "GET, HEAD"},
		{"POST", "/idempotency/refused", "GET, HEAD"},
		{"POST", "/idempotency/orders/demo::1", "GET, HEAD"},
		{"POST", "/idempotency/deliveries", "GET, HEAD"},
		{"GET", "/idempotency/deliveries/demo/pause", "POST"},
	} {
		status, body, h := do(c.method, c.uri, "")
		if status != 405 || h.Get("Allow") != c.allow || !strings.Contains(body, "method "+c.method+" not allowed") ||
			!strings.Contains(body, "allowed: "+c.allow) || !strings.Contains(h.Get("Content-Type"), "json") {
			t.Errorf("%s %s: %d Allow %q %s, want 405 allowing %s", c.method, c.uri, status, h.Get("Allow"), body, c.allow)
		}
	}
}
