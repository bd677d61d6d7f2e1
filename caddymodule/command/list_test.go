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

// TestListShowsOrderNumberAndAmount: `list` rows name the merchant's
// order number (out_trade_no) and the amount with its currency, in the
// aligned table and in the API's JSON, for an answered and a failed key.
func TestListShowsOrderNumberAndAmount(t *testing.T) {
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
	post := func(label, outTradeNo, tradeNo, amount string) int {
		body := platformtest.Alipay{Key: k}.Body(t, platformtest.AlipayNotify(app, outTradeNo, tradeNo, "TRADE_SUCCESS", amount))
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
	if s := post("paid", "SHOP-20261003-0042", "2026100322001400000000004242", "128.00"); s != 200 {
		t.Fatalf("notify: %d", s)
	}
	if s := post("fail", "SHOP-20261003-0043", "2026100322001400000000004343", "66.60"); s == 200 {
		t.Fatalf("failing notify: %d", s)
	}
	for _, c := range []struct{ state, key, order, amount string }{
		{"answered", "alipay:" + app + ":2026100322001400000000004242:paid", "SHOP-20261003-0042", "128.00 CNY"},
		{"failed", "alipay:" + app + ":2026100322001400000000004343:paid", "SHOP-20261003-0043", "66.60 CNY"},
	} {
		out, err := runCLI(t, append([]string{"list", "--state", c.state}, addr...)...)
		if err != nil || !regexp.MustCompile(`(?m)^KEY +STATE +STATUS +COPIES +ATTEMPTS +LAST SEEN +EVENT +ORDER NO +AMOUNT +PLATFORM RETRIES\n`+
			regexp.QuoteMeta(c.key)+` +`+c.state+` +\S+ +1 +1 +\S+ \S+ \(.*\) +paid +`+regexp.QuoteMeta(c.order)+` +`+regexp.QuoteMeta(c.amount)+`( |$)`).MatchString(out) {
			t.Fatalf("list --state %s: %v\n%s", c.state, err, out)
		}
		out, err = runCLI(t, append([]string{"list", "--state", c.state, "--json"}, addr...)...)
		var page admin.PageView
		if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Keys) != 1 {
			t.Fatalf("list --state %s --json: %v\n%s", c.state, err, out)
		}
		got := page.Keys[0]
		if got.Key != c.key || len(got.MerchantRefs) == 0 || got.MerchantRefs[0] != c.order || got.Amount == nil ||
			got.Amount.Value+" "+got.Amount.Currency != c.amount {
			t.Fatalf("list --state %s --json: %+v\n%s", c.state, got, out)
		}
	}
}
