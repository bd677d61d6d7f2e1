package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
)

// TestReconcileWechatPayV2Partner: a WeChat Pay v2 service provider's
// (服务商) route pins its own mch_id (the merchant of its API key), so its
// keys name that mch_id; the bill downloaded for a sub-merchant names the
// sub-merchant in 特约商户号. Through the real module: the sub-merchant's
// bill matches the payments and the refund that ran (not settled, never
// run), another sub-merchant's order under the same provider is not its
// run, not settled, and the bill of a sub-merchant the route has never
// seen is refused as another merchant's.
func TestReconcileWechatPayV2Partner(t *testing.T) {
	const (
		apiKey = "192006250b4c09247ec02edce69f6a2d"
		sp     = platformtest.WechatPayV2SpMchID
		subA   = platformtest.WechatPayV2SubMchID
		subB   = "1900000222"
	)
	// The backend answers as a v2 merchant's does: the SUCCESS XML.
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(string, int, *http.Request) (int, string, time.Duration) {
		return 200, "<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>", 0
	})
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform wechatpay_v2
			secret `+apiKey+`
			mchid `+sp+`
			store memory
			ttl 1h
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	w := platformtest.WechatPayV2{APIKey: apiKey}
	post := func(body []byte) {
		t.Helper()
		if r := gatewaytest.Post(t, g.Base+"/notify", "text/xml", string(body), nil); r.Status != 200 {
			t.Fatalf("notify: %d %s", r.Status, r.Body)
		}
	}
	pay := func(sub string, i, fen int, at time.Time) {
		f := platformtest.WechatPayV2PartnerPayment(sub, rcTxn(i), fmt.Sprintf("M%d", i), fen)
		f["time_end"] = at.In(time.FixedZone("CST", 8*3600)).Format("20060102150405")
		post(w.Body(w.Sign(f)))
	}
	pay(subA, 1, 1000, rcDay.Add(9*time.Hour))
	pay(subA, 2, 500, rcDay.Add(10*time.Hour))
	pay(subB, 3, 700, rcDay.Add(11*time.Hour))
	env := w.RefundInfoFields(t, map[string]string{"transaction_id": rcTxn(1), "out_trade_no": "M1", "refund_id": "50000000382019052709732678859",
		"out_refund_no": "R1", "total_fee": "1000", "refund_fee": "300", "settlement_refund_fee": "300", "refund_status": "SUCCESS",
		"success_time": rcDay.Add(12 * time.Hour).In(time.FixedZone("CST", 8*3600)).Format(time.DateTime)}, signer.Nonce(32))
	env["mch_id"], env["sub_mch_id"] = sp, subA
	post(signer.WechatPayV2XML(env))
	for _, k := range []string{"wechatpay_v2:" + sp + ":" + rcTxn(1) + ":paid", "wechatpay_v2:" + sp + ":" + rcTxn(1) + ":refund:R1"} {
		if status, body := g.AdminDo(t, "GET", "/idempotency/keys/"+k); status != 200 {
			t.Fatalf("key %s (the provider's mch_id, as before): %d %s", k, status, body)
		}
	}

	row := func(sub string, i int, amount string, at time.Time) billtest.Row {
		return billtest.Row{Kind: billtest.Payment, Order: rcTxn(i), MerchantOrder: fmt.Sprintf("M%d", i), Amount: amount,
			Currency: "CNY", Time: at, Merchant: sp, SubMerchant: sub}
	}
	refund := row(subA, 1, "3.00", rcDay.Add(12*time.Hour))
	refund.Kind, refund.Refund = billtest.Refund, "R1"
	rep := postBill(t, g, "platform=wechatpay_v2", billOf(wechatpaybill.NewWriter,
		row(subA, 1, "10.00", rcDay.Add(9*time.Hour)), row(subA, 2, "5.00", rcDay.Add(10*time.Hour)), refund))
	if rep.Matched.Count != 3 || rep.SettledNeverRun.Count != 0 || rep.RunNotSettled.Count != 0 || rep.AmountDiffers.Count != 0 ||
		len(rep.Merchant) != 1 || rep.Merchant[0] != subA {
		t.Errorf("the sub-merchant's bill: matched %d, settled never run %+v, run not settled %+v, amount differs %d, merchant %v",
			rep.Matched.Count, rep.SettledNeverRun.Items, rep.RunNotSettled.Items, rep.AmountDiffers.Count, rep.Merchant)
	}

	// A sub-merchant the route has never seen: refused, naming it.
	status, body := postRaw(t, g, "/idempotency/reconcile?platform=wechatpay_v2", billOf(wechatpaybill.NewWriter, row("1900000333", 7, "9.00", rcDay.Add(9*time.Hour))))
	if status != 400 || !strings.Contains(body, "merchant 1900000333's") || !strings.Contains(body, "pins "+sp) || !strings.Contains(body, "not reconciled") {
		t.Errorf("a bill of a sub-merchant never seen: %d %s", status, body)
	}
}
