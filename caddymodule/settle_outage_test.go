package caddymodule

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
)

// TestFaultSettleDeferredKeepsOrder: Redis (AOF) dies while an Alipay
// payment is at the backend and comes back after the backend answered.
// The settle the gateway kept and retried writes what a settle writes: the
// backend ran once, the order remembers its paid event, the platform's
// bill matches it, and nothing proposes --force for it (a forced
// redelivery is refused without again).
func TestFaultSettleDeferredKeepsOrder(t *testing.T) {
	testenv.Slow(t, "fault: Redis killed and restarted")
	const (
		app   = "2021004123456789"
		trade = "2026100322001458860000000042"
		key   = "alipay:" + app + ":" + trade + ":paid"
		order = "alipay:" + app + ":" + trade
	)
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	be := newFaultBackend(t)
	answered := make(chan struct{})
	be.setAct(func(_ string, n int) faultAction {
		return faultAction{delay: 1500 * time.Millisecond, body: "success", after: func() {
			if n == 1 {
				close(answered)
			}
		}}
	})
	g := startGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			verify off
			app_id `+app+`
			store redis {redis}
			lock_ttl 8s
		}
		reverse_proxy {backend}
	}`, "{redis}", rs.Addr(), "{backend}", be.addr())

	at := time.Now().Truncate(time.Second)
	notify := url.Values{"app_id": {app}, "trade_no": {trade}, "out_trade_no": {"M42"},
		"trade_status": {"TRADE_SUCCESS"}, "total_amount": {"42.00"}, "notify_id": {"n42"}}.Encode()
	first := make(chan reply, 1)
	go func() {
		r, err := faultSend(freshClient, http.MethodPost, g.base+"/notify", notify, formHeader)
		if err != nil {
			t.Errorf("first copy: %v", err)
		}
		first <- r
	}()
	be.waitArrived(t, "M42", 10*time.Second)
	rs.Kill()
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend never answered")
	}
	if r := <-first; r.status != 200 || r.body != "success" {
		t.Fatalf("first copy: %d %q, want the backend's success", r.status, r.body)
	}
	time.Sleep(300 * time.Millisecond) // the completion fails and is kept
	rs.Restart()

	eventually(t, 15*time.Second, "the kept answer stored", func() bool {
		status, body := g.adminDo(t, http.MethodGet, keyURI(key))
		if status != 200 {
			return false
		}
		var rec struct{ State string }
		return json.Unmarshal([]byte(body), &rec) == nil && rec.State == "answered"
	})
	if r, err := faultSend(freshClient, http.MethodPost, g.base+"/notify", notify, formHeader); err != nil || r.status != 200 || !r.replayed {
		t.Errorf("a copy after the settle: %d replayed=%v %v, want the replay", r.status, r.replayed, err)
	}

	status, body := g.adminDo(t, http.MethodGet, "/idempotency/orders/"+order)
	var page struct {
		Events []struct{ Event, Key, Amount string }
	}
	if status != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Events) != 1 ||
		page.Events[0].Event != "paid" || page.Events[0].Key != key || page.Events[0].Amount != "42.00" {
		t.Errorf("order page: %d %s, want its paid event of 42.00", status, body)
	}

	bill := billtest.Bytes(func(w io.Writer) billtest.Writer {
		return alipaybill.NewWriter(w, "20881021772966100156", at.Add(-12*time.Hour), at.Add(12*time.Hour))
	}, []billtest.Row{{Kind: billtest.Payment, Order: trade, MerchantOrder: "M42", Amount: "42.00", Currency: "CNY", Time: at}})
	resp, err := gatewaytest.Client.Post("http://"+g.admin+"/idempotency/reconcile?platform=alipay&items=1", "text/csv", bytes.NewReader(bill))
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep struct {
		SettledNeverRun struct{ Count int } `json:"settled_never_run"`
		Matched         struct {
			Count int
			Items []struct{ Key string }
		} `json:"matched"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(rb, &rep) != nil {
		t.Fatalf("reconcile: %d %s", resp.StatusCode, rb)
	}
	if rep.SettledNeverRun.Count != 0 || rep.Matched.Count != 1 || len(rep.Matched.Items) != 1 || rep.Matched.Items[0].Key != key {
		t.Errorf("reconcile: %s, want the payment matched", rb)
	}
	if strings.Contains(string(rb), "--force") {
		t.Errorf("reconciliation proposes --force for a key the backend answered: %s", rb)
	}

	status, body = g.adminDo(t, http.MethodPost, keyURI(key)+"/redeliver?force=1")
	if status != http.StatusConflict || !strings.Contains(body, "already ran") || !strings.Contains(body, "again") {
		t.Errorf("forced redelivery of the answered key without again: %d %s, want 409 saying the backend already ran it", status, body)
	}
	if n := be.count("M42"); n != 1 {
		t.Errorf("the backend ran %d times, want 1", n)
	}
}
