package console

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestConsoleMissing: the console's "Missing" page and its "Query the
// platform" button, on an Alipay route with catch_up (recover alert)
// against a local Alipay stand-in: the button (a POST with the console's
// token) asks the platform, the page shows its verified answer and the
// entry in the list; a POST without the token asks nothing; an order of
// the scope offers the button on its page.
func TestConsoleMissing(t *testing.T) {
	testenv.Slow(t, "real module test")
	const appID = "2016091800538339"
	alipayKey, appKey := platformtest.Keys(t)
	der, err := x509.MarshalPKCS8PrivateKey(appKey)
	if err != nil {
		t.Fatal(err)
	}
	appKeyFile := platformtest.WriteFile(t, "app.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	pubFile := platformtest.WriteFile(t, "pub.pem", platformtest.PublicKeyPEM(t, &alipayKey.PublicKey))
	api := platformapi.NewAlipayAPI(appID, &appKey.PublicKey, alipayKey)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	const trade = "2026120422001400000000000009"
	api.Put(platformapi.AlipayTrade{OutTradeNo: "o-console", TradeNo: trade, Status: "TRADE_SUCCESS", TotalAmount: "12.50", PaidAt: time.Now().Add(-time.Hour)})
	be := gatewaytest.NewBackend(t)
	base := gatewaytest.StartCaddy(t, `
	route /notify {
		idempotency {
			platform alipay
			public_key {pub}
			app_id `+appID+`
			store memory
			catch_up {
				api {api}/gateway.do
				app_private_key {appkey}
				recover alert
			}
		}
		reverse_proxy {backend}
	}
	route /console/* {
		idempotency_console
	}`, "{backend}", be.Addr(), "{api}", srv.URL, "{pub}", pubFile, "{appkey}", appKeyFile)

	status, page := getPage(t, base+"/console/missing")
	if status != 200 || !strings.Contains(page, `id="nav-missing"`) || !strings.Contains(page, "Nothing missing") || !strings.Contains(page, `id="query-form"`) {
		t.Fatalf("missing page: %d\n%s", status, page)
	}
	post := func(form url.Values) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/console/query", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := gatewaytest.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	calls := api.Calls()
	if status, _ := post(url.Values{"scope": {"alipay"}, "out_trade_no": {"o-console"}}); status != http.StatusForbidden || api.Calls() != calls {
		t.Fatalf("a query without the token: %d, %d calls", status, api.Calls()-calls)
	}
	status, page = post(url.Values{"csrf": {consoleToken}, "scope": {"alipay"}, "out_trade_no": {"o-console"}})
	if status != 200 || !strings.Contains(page, `id="asked-outcome">alert only<`) || !strings.Contains(page, "12.50") || api.Calls() != calls+1 {
		t.Fatalf("the query: %d, %d calls\n%s", status, api.Calls()-calls, page)
	}
	_, page = getPage(t, base+"/console/missing?scope=alipay")
	if !strings.Contains(page, "1 missing payment or event") || !strings.Contains(page, trade) || !strings.Contains(page, "o-console") {
		t.Fatalf("missing list:\n%s", page)
	}
	if be.Total.Load() != 0 {
		t.Fatalf("recover alert ran the backend %d times", be.Total.Load())
	}
	// The notify comes after all: its order's page offers the button.
	a := platformtest.Alipay{Key: alipayKey}
	if r := gatewaytest.Post(t, base+"/notify", "application/x-www-form-urlencoded; charset=utf-8",
		a.Body(t, platformtest.AlipayNotify(appID, "o-console", trade, "TRADE_SUCCESS", "12.50")), nil); r.Status != 200 {
		t.Fatalf("notify: %d %s", r.Status, r.Body)
	}
	status, page = getPage(t, base+"/console/order?store=memory&o="+url.QueryEscape("alipay:"+appID+":"+trade))
	if status != 200 || !strings.Contains(page, `id="order-query"`) || !strings.Contains(page, `name="trade_no" value="`+trade+`"`) {
		t.Fatalf("order page: %d\n%s", status, page)
	}
	_, page = getPage(t, base+"/console/search?q=o-console")
	if !strings.Contains(page, `class="inline order-query"`) || !strings.Contains(page, `name="trade_no" value="`+trade+`"`) {
		t.Fatalf("search results without the button:\n%s", page)
	}
	v := &consolePage{CatchUp: []queryScope{{"alipay", "alipay"}}}
	if q := v.OrderQuery("alipay:" + appID + ":" + trade); q == nil || q.TradeNo != trade || q.Platform != "alipay" {
		t.Fatalf("order button: %+v", q)
	}
	if v.OrderQuery("shop:"+appID+":"+trade) != nil {
		t.Fatal("a scope without catch_up offers the button")
	}
}
