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
