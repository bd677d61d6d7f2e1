package delivery_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/sdkbackend"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestAsyncSignatureExpires: WeChat Pay v3 signs its notification's time,
// the gateway cannot re-sign it, and wechatpay-go refuses it 5 minutes
// after that time. A notification signed 4m55s before it arrives is
// accepted (tolerance 5m) and acknowledged; the backend is down until the
// signature is past its 5 minutes, then up: the SDK refuses the next
// delivery (401), and the key is dead at once with the reason, the dead
// event fires, the business never ran, and nothing is retried for
// give_up's 24 hours. On every store, the key is listed dead at once
// (`?state=dead`, the summary's dead with its amount), not failed.
func TestAsyncSignatureExpires(t *testing.T) {
	testenv.Slow(t, "runs for seconds: waits for a signature to pass its 5 minutes, on every store")
	gatewaytest.EachStore(t, testAsyncSignatureExpires)
}

func testAsyncSignatureExpires(t *testing.T, _, store string) {
	k, _ := platformtest.Keys(t)
	pubFile := platformtest.WriteFile(t, "platform_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	const apiV3 = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4"
	wx := platformtest.WechatPay{Key: k, Serial: "PUB_KEY_ID_01", APIv3Key: apiV3}
	be := sdkbackend.WechatPayPublicKey(apiV3, "PUB_KEY_ID_01", &k.PublicKey)
	be.SetDown(true)
	srv := httptest.NewServer(be)
	t.Cleanup(srv.Close)

	var mu sync.Mutex
	var alerts []gatewaytest.Alert
	ops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e gatewaytest.Alert
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &e) == nil {
			mu.Lock()
			alerts = append(alerts, e)
			mu.Unlock()
		}
	}))
	t.Cleanup(ops.Close)
	deadAlerts := func() []gatewaytest.Alert {
		mu.Lock()
		defer mu.Unlock()
		var out []gatewaytest.Alert
		for _, e := range alerts {
			if e.Event == "idempotency.dead" {
				out = append(out, e)
			}
		}
		return out
	}

	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform wechatpay
			public_key `+pubFile+`
			public_key_id PUB_KEY_ID_01
			secret `+apiV3+`
			`+store+`
			alert `+ops.URL+` dead
			deliver async {
				to `+srv.URL+`
				retry 200ms 500ms
			}
		}
	}`)

	signed := time.Now().Add(-4*time.Minute - 55*time.Second)
	ev := platformtest.WechatPayEvent{ID: "n-exp", EventType: "TRANSACTION.SUCCESS",
		Resource: platformtest.WechatPayTransaction("4200777", "o-exp", "SUCCESS", 990)}
	body := wx.Body(t, ev)
	hdr := wx.Header(t, body, signed)
	const key = "wechatpay:1230000109:4200777:paid"
	if r := gatewaytest.Send(t, g.Base, "o-exp", gatewaytest.Delivery{Path: "/notify", Ctype: "application/json", Body: string(body), Header: hdr}); r.Status != 200 {
		t.Fatalf("the notification signed 4m55s ago: got %d %q, want the ack", r.Status, r.Body)
	}
	// Down past the signature's 5 minutes (the SDK's clock: whole seconds).
	expires := signed.Truncate(time.Second).Add(5*time.Minute + 1500*time.Millisecond)
	time.Sleep(time.Until(expires))
	if be.Attempts() == 0 {
		t.Fatal("no delivery was attempted while the backend was down")
	}
	be.SetDown(false)

	var rec map[string]any
	gatewaytest.Eventually(t, 10*time.Second, "the key to be dead", func() bool {
		rec = nil
		g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI(key), &rec)
		return rec["state"] == "dead"
	})
	attempts, _ := rec["attempts"].([]any)
	last, _ := attempts[len(attempts)-1].(map[string]any)
	if msg, _ := last["error"].(string); !strings.Contains(msg, "the platform's signature expired") || last["status"] != float64(401) {
		t.Errorf("the last attempt %v should be the SDK's 401, its error saying the platform's signature expired", last)
	}
	gatewaytest.Eventually(t, 5*time.Second, "the idempotency.dead alert", func() bool { return len(deadAlerts()) == 1 })
	if a := deadAlerts()[0]; a.Key != key || a.Status != 401 {
		t.Errorf("dead alert %+v, want key %s status 401", a, key)
	}
	n := be.Attempts()
	time.Sleep(1500 * time.Millisecond) // three retry intervals
	if be.Attempts() != n {
		t.Errorf("deliveries went on after the key was dead: %d attempts, then %d", n, be.Attempts())
	}
	if be.Total() != 0 || len(be.Refusals()) == 0 {
		t.Errorf("the SDK ran %v and refused %v; want no run, its refusal", be.Events(), be.Refusals())
	}
	if n > 40 {
		t.Errorf("%d deliveries for one notification, want a few", n)
	}
	if len(deadAlerts()) != 1 {
		t.Errorf("dead alerts %v, want one", deadAlerts())
	}

	// Listed dead at once, though give_up (24h) is far off: the
	// listings, the console's Dead list and the summary read the
	// record's dead mark.
	listed := func(state string) []string {
		var page admin.PageView
		g.AdminJSON(t, http.MethodGet, "/idempotency/keys?state="+state, &page)
		var keys []string
		for _, k := range page.Keys {
			keys = append(keys, k.Key+" "+k.State)
		}
		return keys
	}
	if got := listed("dead"); len(got) != 1 || got[0] != key+" dead" {
		t.Errorf("?state=dead lists %v, want [%s dead]", got, key)
	}
	if got := listed("failed"); len(got) != 0 {
		t.Errorf("?state=failed lists %v, want none (the key is dead)", got)
	}
	var sum admin.SummaryView
	g.AdminJSON(t, http.MethodGet, "/idempotency/summary", &sum)
	if sum.Dead.Count != 1 || sum.Dead.Amounts["CNY"] != "9.90" || sum.Failed.Count != 0 || sum.InFlight.Count != 0 {
		t.Errorf("summary %+v, want one dead key of CNY 9.90, nothing failed or in flight", sum)
	}
}
