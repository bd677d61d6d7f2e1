package command

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
)

// TestSearchCLI: `search <out_trade_no>` finds the key of an Alipay
// notification the gateway took, as an aligned table and as the API's
// JSON; a failed key too.
func TestSearchCLI(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.WriteFile(t, "alipay_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "fail" {
			return 502, "down", 0
		}
		return 200, "success", 0
	})
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+pub+`
			store embedded `+filepath.Join(t.TempDir(), "keys.db")+`
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	addr := []string{"--address", g.Admin}
	const app = "2021004100000001"
	post := func(label, outTradeNo, tradeNo string) int {
		body := platformtest.Alipay{Key: k}.Body(t, platformtest.AlipayNotify(app, outTradeNo, tradeNo, "TRADE_SUCCESS", "128.00"))
		req, _ := http.NewRequest(http.MethodPost, g.Base+"/notify", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		req.Header.Set("X-Order", label)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := post("paid", "SHOP-20261003-0042", "2026100322001400000000004242"); s != 200 {
		t.Fatalf("notify: %d", s)
	}
	if s := post("fail", "SHOP-20261003-0043", "2026100322001400000000004343"); s == 200 {
		t.Fatalf("failing notify: %d", s)
	}

	out, err := runCLI(t, append([]string{"search", "SHOP-20261003-0042"}, addr...)...)
	if err != nil || !regexp.MustCompile(`(?m)^FOUND BY +STATE +ORDER +EVENT +AMOUNT +CHANGED +KEY\n`+
		`SHOP-20261003-0042 +answered +alipay:2021004100000001:2026100322001400000000004242 +paid +128\.00 CNY +\S+ \S+ \(.*\) +alipay:2021004100000001:2026100322001400000000004242:paid\n$`).MatchString(out) {
		t.Fatalf("search: %v\n%s", err, out)
	}
	out, err = runCLI(t, append([]string{"search", "SHOP-20261003-0043", "--json"}, addr...)...)
	var v admin.SearchView
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || len(v.Matches) != 1 || v.Matches[0].State != "failed" ||
		v.Matches[0].Key != "alipay:2021004100000001:2026100322001400000000004343:paid" || !strings.Contains(out, `"ref": "SHOP-20261003-0043"`) {
		t.Fatalf("search --json: %v\n%s", err, out)
	}
	out, err = runCLI(t, append([]string{"search", "SHOP-NONE"}, addr...)...)
	if err != nil || !strings.Contains(out, `nothing found for "SHOP-NONE"`) {
		t.Fatalf("search for nothing known: %v\n%s", err, out)
	}
	if _, err = runCLI(t, append([]string{"search", " "}, addr...)...); err == nil || !strings.Contains(err.Error(), "out_trade_no") {
		t.Fatalf("search for blanks: %v", err)
	}
}
