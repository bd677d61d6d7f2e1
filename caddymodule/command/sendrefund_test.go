package command

import (
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestSendRefundsRunningTotal: three refunds of a 129.00 Alipay trade
// sent with send, --refund-amount each refund's own (30.00, 20.00, 10.00)
// and --refunded-before what the earlier ones refunded. The notifications
// carry refund_fee as Alipay writes it, the trade's refunded total (30.00,
// 50.00, 60.00), and the gateway shows each refund's own money. A refund
// past the order's amount is refused before anything is sent; Stripe's
// charge.refunded carries amount_refunded and, before it, the earlier
// refunds' total.
func TestSendRefundsRunningTotal(t *testing.T) {
	keys := t.TempDir()
	if out, err := runIdem(t, "keygen", "--platform", "alipay", "--dir", keys); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) { return 200, "success", 0 })
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+filepath.Join(keys, "alipay_public_key.pem")+`
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	const trade = "2026120422001"
	send := func(args ...string) (string, error) {
		return runIdem(t, append([]string{"send", "--platform", "alipay", "--url", g.Base + "/notify", "--dir", keys,
			"--id", trade, "--amount", "12900"}, args...)...)
	}
	if out, err := send(); err != nil {
		t.Fatalf("paid: %v\n%s", err, out)
	}
	for _, r := range []struct{ refund, own, before, fee, shown string }{
		{"rf-1", "3000", "", "30.00", "30.00"},
		{"rf-2", "2000", "3000", "50.00", "20.00"},
		{"rf-3", "1000", "5000", "60.00", "10.00"},
	} {
		args := []string{"--event", "refund", "--refund", r.refund, "--refund-amount", r.own}
		if r.before != "" {
			args = append(args, "--refunded-before", r.before)
		}
		out, err := send(args...)
		if err != nil || !strings.Contains(out, "refund "+r.refund+" of "+r.shown) {
			t.Fatalf("send %v: %v\n%s", args, err, out)
		}
		if r.before != "" && !strings.Contains(out, "--refunded-before "+r.before) {
			t.Errorf("send %v: the line to send it again lacks --refunded-before:\n%s", args, out)
		}
		key := "alipay:2021000000000001:" + trade + ":refund:" + r.refund
		rec := gatewaytest.WaitAnswered(t, 5*time.Second, key)
		form, err := url.ParseQuery(string(rec.Notification.Body))
		if err != nil || form.Get("refund_fee") != r.fee {
			t.Errorf("%s: refund_fee %q (%v), want %s, the trade's refunded total", r.refund, form.Get("refund_fee"), err, r.fee)
		}
		var v admin.RecordView
		g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI(key), &v)
		if v.Amount == nil || v.Amount.Value != r.shown {
			t.Errorf("%s: the key's amount %+v, want %s, the refund's own", r.refund, v.Amount, r.shown)
		}
	}
	if out, err := send("--event", "refund", "--refund", "rf-4", "--refund-amount", "10000", "--refunded-before", "6000"); err == nil ||
		!strings.Contains(err.Error(), "--refunded-before") {
		t.Errorf("a refund past the order's amount: %v\n%s", err, out)
	}

	stripeKeys := t.TempDir()
	if out, err := runIdem(t, "keygen", "--platform", "stripe", "--dir", stripeKeys); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	n, err := buildNotification(sendOptions{platform: "stripe", event: "charge.refunded", id: "evt_r2", order: "o-1", amount: 12900,
		refund: "r2", refundAmount: 2000, refundedBefore: 3000, dir: stripeKeys})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Join(strings.Fields(string(n.body)), "")
	for _, want := range []string{`"amount_refunded":5000`, `"previous_attributes":{"amount_refunded":3000`, `"amount":2000,"charge"`} {
		if !strings.Contains(body, want) {
			t.Errorf("charge.refunded lacks %s: %s", want, n.body)
		}
	}
}
