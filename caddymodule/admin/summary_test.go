package admin

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
)

const summaryAppID = "2021000000000001"

// TestSummaryRefundsApart: a failed Alipay payment of 309.00 and a failed
// refund of 10.00 on the same trade. The money at stake reports the
// payment as amounts and the refund as refund_amounts, never 319.00: one
// is money the merchant received, the other money it owes. One key's view
// says its amount is a refund's.
func TestSummaryRefundsApart(t *testing.T) {
	k, _ := platformtest.Keys(t)
	alipay := platformtest.Alipay{Key: k}
	pub := platformtest.WriteFile(t, "alipay.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 502, "database is down", 0
	})
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+pub+`
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	const trade = "2026120122009"
	paid := platformtest.AlipayNotify(summaryAppID, "o-9", trade, "TRADE_SUCCESS", "309.00")
	refund := platformtest.AlipayNotify(summaryAppID, "o-9", trade, "TRADE_SUCCESS", "309.00")
	refund.Set("out_biz_no", "rf-1")
	refund.Set("refund_fee", "10.00")
	refund.Set("gmt_refund", time.Now().In(time.FixedZone("CST", 8*3600)).Format(time.DateTime))
	for _, p := range []url.Values{paid, refund} {
		if r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded; charset=utf-8", alipay.Body(t, p), nil); r.Status != 502 {
			t.Fatalf("notify: %+v", r)
		}
	}
	var s SummaryView
	g.AdminJSON(t, http.MethodGet, "/idempotency/summary", &s)
	if s.Failed.Count != 2 || s.Failed.Amounts["CNY"] != "309.00" || len(s.Failed.Amounts) != 1 ||
		s.Failed.RefundAmounts["CNY"] != "10.00" || len(s.Failed.RefundAmounts) != 1 || s.Failed.WithoutAmount != 0 {
		t.Fatalf("failed money at stake: %+v, want 309.00 CNY of payments and 10.00 CNY of refunds apart", s.Failed)
	}
	if s.Dead.RefundAmounts == nil || len(s.Dead.RefundAmounts) != 0 {
		t.Errorf("dead: %+v, want refund_amounts {}", s.Dead)
	}
	_, raw := g.AdminDo(t, http.MethodGet, "/idempotency/summary?scope=alipay")
	for _, want := range []string{`"amounts":{"CNY":"309.00"}`, `"refund_amounts":{"CNY":"10.00"}`} {
		if !strings.Contains(strings.Join(strings.Fields(raw), ""), want) {
			t.Errorf("summary JSON lacks %s: %s", want, raw)
		}
	}
	var rec RecordView
	g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("alipay:"+summaryAppID+":"+trade+":refund:rf-1"), &rec)
	if rec.Amount == nil || rec.Amount.Value != "10.00" || !rec.Amount.Refund {
		t.Errorf("the refund key's amount: %+v", rec.Amount)
	}
	rec = RecordView{}
	g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("alipay:"+summaryAppID+":"+trade+":paid"), &rec)
	if rec.Amount == nil || rec.Amount.Value != "309.00" || rec.Amount.Refund {
		t.Errorf("the payment key's amount: %+v", rec.Amount)
	}
}

// TestSummaryTwoCurrencies: the money at stake, per currency, in exact
// decimals read from the signed content: two failed Alipay payments (CNY
// 88.88 + 31.12), a failed Stripe charge (USD 9.90), a Stripe event kept
// only in part (counted without amount). Past Alipay's retry window its
// keys read dead and move to dead's amounts.
func TestSummaryTwoCurrencies(t *testing.T) {
	const secret = "whsec_summary"
	a := gatewaytest.NewAlipayOrders(t)
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) { return 503, "down", 0 })
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+a.Pub+`
			store memory
		}
		reverse_proxy {backend}
	}
	handle /stripe {
		idempotency {
			platform stripe
			secret `+secret+`
			store memory
			journal_body 300
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	d1 := a.Notify("t-s1", "TRADE_SUCCESS")
	p := platformtest.AlipayNotify(gatewaytest.AlipayAppID, "o-t-s2", "t-s2", "TRADE_SUCCESS", "31.12")
	d2 := gatewaytest.Delivery{Path: "/notify", Ctype: "application/x-www-form-urlencoded; charset=utf-8", Body: a.Signer.Body(t, p)}
	for _, d := range []gatewaytest.Delivery{d1, d2} {
		if r := gatewaytest.Post(t, g.Base+"/notify", d.Ctype, d.Body, nil); r.Status != 503 {
			t.Fatalf("alipay copy: %+v", r)
		}
	}
	small := []byte(`{"id":"evt_s1","object":"event","type":"payment_intent.payment_failed","data":{"object":{"id":"pi_1","amount":990,"currency":"usd"}}}`)
	big := platformtest.StripeEvent("evt_s2", "payment_intent.succeeded", "pi_2", 12345) // longer than journal_body
	for _, b := range [][]byte{small, big} {
		if r := gatewaytest.Post(t, g.Base+"/stripe", "application/json", string(b), platformtest.StripeHeader(b, secret, time.Now())); r.Status != 503 {
			t.Fatalf("stripe copy: %+v", r)
		}
	}
	var s SummaryView
	g.AdminJSON(t, http.MethodGet, "/idempotency/summary", &s)
	if s.Failed.Count != 4 || s.Failed.Amounts["CNY"] != "120.00" || s.Failed.Amounts["USD"] != "9.90" || len(s.Failed.Amounts) != 2 ||
		s.Failed.WithoutAmount != 1 || s.Dead.Count != 0 || s.InFlight.Count != 0 {
		t.Fatalf("summary: %+v", s)
	}
	var rec RecordView
	g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("stripe:evt_s1"), &rec)
	if rec.Amount == nil || rec.Amount.Value != "9.90" || rec.Amount.Currency != "USD" {
		t.Fatalf("one key's amount: %+v", rec.Amount)
	}
	s = SummaryView{}
	g.AdminJSON(t, http.MethodGet, "/idempotency/summary?scope=stripe", &s)
	if s.Failed.Count != 2 || s.Failed.Amounts["USD"] != "9.90" || len(s.Failed.Amounts) != 1 {
		t.Fatalf("summary of scope stripe: %+v", s)
	}
	t.Cleanup(gatewaytest.App(t).SetClock(func() time.Time { return time.Now().Add(25*time.Hour + time.Minute) }))
	s = SummaryView{}
	g.AdminJSON(t, http.MethodGet, "/idempotency/summary", &s)
	if s.Dead.Count != 2 || s.Dead.Amounts["CNY"] != "120.00" || s.Failed.Count != 2 || s.Failed.Amounts["CNY"] != "" {
		t.Fatalf("summary past Alipay's window: %+v", s)
	}
}
