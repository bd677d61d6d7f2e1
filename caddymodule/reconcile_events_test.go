package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
)

// TestReconcileEvent: a reconciliation whose bill shows a payment that
// never ran makes its scope's route emit idempotency.reconcile as a Caddy
// event — its scope, platform and each category's count and amounts — for
// any events handler; one where everything matched emits nothing.
func TestReconcileEvent(t *testing.T) {
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "M2" {
			return 500, "down", 0
		}
		return 200, "success", 0
	})
	port, admin := freePort(t), gatewaytest.ReservePort(t)
	loadTapped(t, `{
	admin `+admin+`
	persist_config off
	storage file_system `+t.TempDir()+`
}
http://127.0.0.1:`+itoa(port)+` {
	handle /notify {
		idempotency {
			platform alipay
			verify off
			app_id 2021004123456789
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
}`, "idempotency.reconcile")
	base := "http://127.0.0.1:" + itoa(port)
	waitListening(t, base)
	waitListening(t, "http://"+admin)

	now := time.Now().Truncate(time.Second)
	var rows []billtest.Row
	for _, o := range []string{"1", "2"} {
		trade := "202610032200145886000000000" + o
		rows = append(rows, billtest.Row{Kind: billtest.Payment, Order: trade, MerchantOrder: "M" + o, Amount: o + "0.00", Currency: "CNY", Time: now})
		form := url.Values{"app_id": {"2021004123456789"}, "trade_no": {trade}, "out_trade_no": {"M" + o},
			"trade_status": {"TRADE_SUCCESS"}, "total_amount": {o + "0.00"}}
		gatewaytest.Post(t, base+"/notify", "application/x-www-form-urlencoded", form.Encode(), nil)
	}
	reconcile := func(rows []billtest.Row) {
		t.Helper()
		bill := billtest.Bytes(func(w io.Writer) billtest.Writer {
			return alipaybill.NewWriter(w, "20881021772966100156", now.Add(-12*time.Hour), now.Add(12*time.Hour))
		}, rows)
		resp, err := gatewaytest.Client.Post("http://"+admin+"/idempotency/reconcile?platform=alipay", "text/csv", bytes.NewReader(bill))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("reconcile: %d %s", resp.StatusCode, b)
		}
	}
	reconcile(rows[:1]) // all matched
	reconcile(rows)
	tappedEventsMu.Lock()
	defer tappedEventsMu.Unlock()
	if len(tappedEvents) != 1 {
		t.Fatalf("%d reconcile events, want 1 (the bill with a payment that never ran): %+v", len(tappedEvents), tappedEvents)
	}
	e := tappedEvents[0]
	snr, _ := e.Data["settled_never_run"].(map[string]any)
	if e.Name() != "idempotency.reconcile" || e.Data["scope"] != "alipay" || e.Data["platform"] != "alipay" ||
		snr["count"] != 1 || snr["amounts"].(map[string]string)["CNY"] != "20.00" {
		t.Fatalf("event %s %+v", e.Name(), e.Data)
	}
}
