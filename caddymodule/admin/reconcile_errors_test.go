package admin

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestReconcileAlertAndRefusals: a reconciliation that finds payments
// settled whose business never ran fires idempotency.reconcile to the
// route's alert, with the counts; a bill that does not read is refused
// with 400 naming its line (or saying it is truncated), as are options
// that cannot be right.
func TestReconcileAlertAndRefusals(t *testing.T) {
	var mu sync.Mutex
	var alerts []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		_ = json.NewDecoder(r.Body).Decode(&v)
		mu.Lock()
		alerts = append(alerts, v)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)

	p := rcPlatforms()[0] // alipay
	sc := &scenario{fate: map[string]string{}}
	be := rcBackend(t, sc)
	repl := append([]string{"{store}", "store memory", "{backend}", be.Addr(), "{ttl}", "1h", "{extra}", "alert " + hook.URL + " reconcile"}, p.setup(t)...)
	g := gatewaytest.StartGateway(t, p.route, repl...)
	events := []rcEvent{
		{order: 1, amount: "10.00", notified: "10.00", at: rcDay.Add(time.Hour)},
		{order: 2, amount: "20.00", notified: "20.00", at: rcDay.Add(2 * time.Hour)},
		{order: 3, amount: "30.00", notified: "30.00", at: rcDay.Add(3 * time.Hour)},
	}
	sc.fate[rcLabel(events[1])] = "failed"
	for _, ev := range events[:2] {
		p.send(t, g.Base, rcLabel(ev), ev)
	}
	rows := make([]billtest.Row, len(events))
	for i, ev := range events {
		rows[i] = p.row(ev)
	}
	good := billtest.Bytes(func(w io.Writer) billtest.Writer { return p.bill(w, rcDay, rcDay.Add(24*time.Hour)) }, rows)

	rep := postBill(t, g, "platform=alipay", good)
	if rep.SettledNeverRun.Count != 2 || rep.Matched.Count != 1 || rep.Merchant[0] != rcAlipayApp {
		t.Fatalf("report: %+v", rep)
	}
	gatewaytest.Eventually(t, 10*time.Second, "the reconcile alert", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(alerts) > 0
	})
	mu.Lock()
	a := alerts[0]
	mu.Unlock()
	details, _ := a["details"].(map[string]any)
	snr, _ := details["settled_never_run"].(map[string]any)
	if a["event"] != "idempotency.reconcile" || a["scope"] != "alipay" || a["platform"] != "alipay" ||
		snr["count"] != float64(2) || snr["amounts"].(map[string]any)["CNY"] != "50.00" {
		t.Fatalf("alert %v", a)
	}

	// All matched: no alert. The alerter sends in order, so the next
	// alert, of the next bill with findings, shows whether one was sent.
	postBill(t, g, "platform=alipay", billtest.Bytes(func(w io.Writer) billtest.Writer { return p.bill(w, rcDay, rcDay.Add(24*time.Hour)) }, rows[:1]))
	postBill(t, g, "platform=alipay", good)
	gatewaytest.Eventually(t, 10*time.Second, "the second reconcile alert", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(alerts) > 1
	})
	mu.Lock()
	if second := alerts[1]["details"].(map[string]any)["settled_never_run"].(map[string]any); second["count"] != float64(2) {
		t.Errorf("an alert after a bill that all matched: %v", alerts[1])
	}
	mu.Unlock()

	lines := strings.Split(string(good), "\r\n")
	malformed := strings.Join(append(append(append([]string(nil), lines[:6]...), "2026100322001458860000000009\t,M9,交易"), lines[6:]...), "\r\n")
	truncated := good[:len(good)-200]
	for _, c := range []struct {
		name, method, query string
		body                []byte
		status              int
		says                string
	}{
		{"a row of 3 values", http.MethodPost, "platform=alipay", []byte(malformed), 400, "alipay bill, line 7: 3 values where the header has 25 columns"},
		{"truncated", http.MethodPost, "platform=alipay", truncated, 400, "truncated"},
		{"a zip, not its csv", http.MethodPost, "platform=alipay", []byte("PK\x03\x04rest"), 400, "zip archive"},
		{"no platform", http.MethodPost, "", good, 400, "which platform"},
		{"unknown platform", http.MethodPost, "platform=square", good, 400, "platform must be one of"},
		{"another platform's scope", http.MethodPost, "platform=wechatpay&scope=alipay", good, 400, "scope alipay has alipay routes"},
		{"no app_id to key an Alipay bill", http.MethodPost, "platform=alipay&scope=shop", good, 400, "merchant=<app_id>"},
		{"from without to", http.MethodPost, "platform=alipay&from=2026-10-03T00:00:00Z", good, 400, "from and to go together"},
		{"GET", http.MethodGet, "platform=alipay", nil, 405, "not allowed"},
	} {
		req, _ := http.NewRequest(c.method, "http://"+g.Admin+"/idempotency/reconcile?"+c.query, bytes.NewReader(c.body))
		resp, err := gatewaytest.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, resp.StatusCode, b, c.status, c.says)
		}
	}
}
