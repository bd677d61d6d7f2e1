package caddymodule

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// TestAlipayQueryCannotOverrideSignedFields: a servlet backend reads a
// parameter from the query before the body (getParameter). An Alipay
// notify POSTed with ?out_trade_no=VICTIM&total_amount=8888.00 beside a
// verified 0.01 body is refused with a 400 and never forwarded; a query of
// the merchant's own (?channel=alipay) goes through.
func TestAlipayQueryCannotOverrideSignedFields(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.WriteFile(t, "alipay_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	var mu sync.Mutex
	paid := map[string]string{} // order → amount, as the servlet reads them
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		param := func(name string) string { // the query first, as a servlet's getParameter
			if v := r.URL.Query().Get(name); v != "" {
				return v
			}
			return form.Get(name)
		}
		mu.Lock()
		paid[param("out_trade_no")] = param("total_amount")
		mu.Unlock()
		io.WriteString(w, "success")
	}))
	defer be.Close()
	g := startGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+pub+`
			store memory
		}
		reverse_proxy `+strings.TrimPrefix(be.URL, "http://")+`
	}`)
	body := platformtest.Alipay{Key: k}.Body(t, platformtest.AlipayNotify(testAlipayAppID, "o-mine", "2026q1", "TRADE_SUCCESS", "0.01"))
	d := delivery{ctype: "application/x-www-form-urlencoded; charset=utf-8", body: body}

	for _, q := range []string{"out_trade_no=VICTIM&total_amount=8888.00", "trade_status=TRADE_SUCCESS", "sign=x", "a=%zz"} {
		d.path = "/notify?" + q
		if r := send(t, g.base, "attack", d); r.status != http.StatusBadRequest {
			t.Fatalf("?%s: %d %q, want 400", q, r.status, r.body)
		}
	}
	mu.Lock()
	if len(paid) != 0 {
		t.Fatalf("the backend ran for %v; a refused notification must never reach it", paid)
	}
	mu.Unlock()

	d.path = "/notify?channel=alipay"
	if r := send(t, g.base, "mine", d); r.status != 200 || r.body != "success" {
		t.Fatalf("a query of the merchant's own: %d %q, want it forwarded", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paid) != 1 || paid["o-mine"] != "0.01" {
		t.Fatalf("the backend marked %v paid, want o-mine 0.01 only", paid)
	}
}
