package keying

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// TestSettles: what reconciliation reads of each preset's notification —
// payment or refund (or neither), the platform's time of the event and,
// for Stripe and PayPal, the objects a bill names. Signatures are off: the
// verifiers have their own tests; the bodies are the platforms' shapes.
func TestSettles(t *testing.T) {
	bj := time.FixedZone("CST", 8*3600)
	stripeAt := testNow.Truncate(time.Second)
	wx := func(eventType, resource string) *Request {
		body := platformtest.WechatPay{APIv3Key: wxAPIv3Key}.Body(t, platformtest.WechatPayEvent{ID: "EV-1", EventType: eventType, Resource: resource})
		return post(body, http.Header{"Content-Type": {"application/json"}})
	}
	refundRes := platformtest.WechatPayRefund("1008450740201411110005820873", "20150806125346", "50200207182018070300011301001", "SUCCESS", 999, 999)
	stripeBody := func(typ, object string) []byte {
		return []byte(`{"id":"evt_1","object":"event","created":` + itoa(stripeAt.Unix()) + `,"type":"` + typ + `","data":{"object":` + object + `}}`)
	}
	cases := []struct {
		name     string
		platform string
		cfg      Config
		req      *Request
		settles  Settlement
		at       time.Time
		refs     []string
	}{
		{"alipay notify", "alipay", Config{NoVerify: true}, alipayPost(alipayNotify()), SettlesPayment,
			time.Date(2026, 3, 14, 17, 26, 32, 0, bj), nil},
		{"alipay return", "alipay", Config{NoVerify: true}, alipayGet(alipayReturn().Encode()), SettlesPayment,
			time.Date(2026, 3, 14, 17, 26, 40, 0, bj), nil},
		{"alipay partial refund", "alipay", Config{NoVerify: true},
			alipayPost(with(alipayNotify(), "out_biz_no", "R1", "refund_fee", "8.00", "gmt_refund", "2026-03-20 10:00:01.320")), SettlesRefund,
			time.Date(2026, 3, 20, 10, 0, 1, 320e6, bj), nil},
		{"alipay closed", "alipay", Config{NoVerify: true},
			alipayPost(with(alipayNotify(), "trade_status", "TRADE_CLOSED", "gmt_close", "2026-03-14 18:00:00")), "",
			time.Date(2026, 3, 14, 18, 0, 0, 0, bj), nil},
		{"alipay unparsable time", "alipay", Config{NoVerify: true}, alipayPost(with(alipayNotify(), "gmt_payment", "soon")), SettlesPayment,
			time.Time{}, nil},
		{"wechatpay payment", "wechatpay", Config{Secret: wxAPIv3Key, NoVerify: true}, wx("TRANSACTION.SUCCESS", wxTransaction("SUCCESS", 100)),
			SettlesPayment, time.Date(2026, 3, 14, 17, 26, 32, 0, bj), nil},
		{"wechatpay refund", "wechatpay", Config{Secret: wxAPIv3Key, NoVerify: true}, wx("REFUND.SUCCESS", refundRes),
			SettlesRefund, time.Date(2026, 3, 14, 17, 30, 0, 0, bj), nil},
		{"wechatpay refund abnormal", "wechatpay", Config{Secret: wxAPIv3Key, NoVerify: true}, wx("REFUND.ABNORMAL", refundRes),
			"", time.Date(2026, 3, 14, 17, 30, 0, 0, bj), nil},
		{"wechatpay_v2 payment", "wechatpay_v2", Config{Secret: wxV2Key}, v2req(wxV2XML(wxV2MD5.Sign(wxV2Fields()))),
			SettlesPayment, time.Date(2014, 9, 3, 13, 15, 40, 0, bj), nil},
		{"wechatpay_v2 refund", "wechatpay_v2", Config{Secret: wxV2Key}, v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS"))),
			SettlesRefund, time.Date(2018, 11, 19, 16, 24, 13, 0, bj), nil},
		{"wechatpay_v2 refund closed", "wechatpay_v2", Config{Secret: wxV2Key}, v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("REFUNDCLOSE"))),
			"", time.Date(2018, 11, 19, 16, 24, 13, 0, bj), nil},
		{"stripe charge", "stripe", Config{NoVerify: true},
			post(stripeBody("charge.succeeded", `{"id":"ch_1","object":"charge","amount":500,"currency":"usd","payment_intent":"pi_1"}`), nil),
			SettlesPayment, stripeAt, []string{"ch_1", "pi_1"}},
		{"stripe payment intent, its charge", "stripe", Config{NoVerify: true},
			post(stripeBody("payment_intent.succeeded", `{"id":"pi_2","object":"payment_intent","amount":500,"currency":"usd","latest_charge":"ch_2"}`), nil),
			SettlesPayment, stripeAt, []string{"pi_2", "ch_2"}},
		{"stripe payment intent, charges list (older API)", "stripe", Config{NoVerify: true},
			post(stripeBody("payment_intent.succeeded", `{"id":"pi_3","amount":500,"currency":"usd","charges":{"data":[{"id":"ch_3"}]}}`), nil),
			SettlesPayment, stripeAt, []string{"pi_3", "ch_3"}},
		{"stripe refund", "stripe", Config{NoVerify: true},
			post(stripeBody("refund.created", `{"id":"re_1","object":"refund","amount":200,"currency":"usd","charge":"ch_1","payment_intent":"pi_1"}`), nil),
			SettlesRefund, stripeAt, []string{"re_1", "ch_1", "pi_1"}},
		{"stripe charge refunded", "stripe", Config{NoVerify: true},
			post(stripeBody("charge.refunded", `{"id":"ch_1","object":"charge","amount":500,"amount_refunded":200,"currency":"usd"}`), nil),
			SettlesRefund, stripeAt, []string{"ch_1"}},
		{"stripe customer: no money", "stripe", Config{NoVerify: true},
			post(stripeBody("customer.created", `{"id":"cus_1","object":"customer"}`), nil), "", time.Time{}, nil},
		{"paypal capture", "paypal", Config{NoVerify: true},
			post([]byte(`{"id":"WH-1","create_time":"2026-03-14T09:26:50.000Z","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"42311647XV020574X","create_time":"2026-03-14T09:26:49Z","amount":{"currency_code":"USD","value":"7.47"}}}`), nil),
			SettlesPayment, time.Date(2026, 3, 14, 9, 26, 49, 0, time.UTC), []string{"42311647XV020574X"}},
		{"paypal refund, event time", "paypal", Config{NoVerify: true},
			post([]byte(`{"id":"WH-2","create_time":"2026-03-15T01:00:00Z","event_type":"PAYMENT.CAPTURE.REFUNDED","resource":{"id":"1JU08902781691411","amount":{"currency_code":"USD","value":"2.00"}}}`), nil),
			SettlesRefund, time.Date(2026, 3, 15, 1, 0, 0, 0, time.UTC), []string{"1JU08902781691411"}},
		{"paypal plan: no money", "paypal", Config{NoVerify: true},
			post(ppEvent("WH-3", "BILLING.PLAN.CREATED", "P-1"), nil), "", time.Time{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustNew(t, c.platform, c.cfg)
			n, err := p.Verify(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if n.Settles != c.settles || !n.At.Equal(c.at) || !slices.Equal(n.Refs, c.refs) {
				t.Fatalf("Settles %q At %v Refs %q, want %q %v %q", n.Settles, n.At, n.Refs, c.settles, c.at, c.refs)
			}
		})
	}
}

// TestBillRefs: a journaled body gives the objects its verified
// notification would have named.
func TestBillRefs(t *testing.T) {
	stripe := []byte(`{"id":"evt_1","type":"charge.failed","data":{"object":{"id":"ch_1","payment_intent":"pi_1","metadata":{}}}}`)
	paypal := []byte(`{"id":"WH-1","event_type":"PAYMENT.CAPTURE.DENIED","resource":{"id":"CAP1","amount":{"value":"1.00"}}}`)
	for _, c := range []struct {
		platform string
		body     []byte
		want     []string
	}{
		{"stripe", stripe, []string{"ch_1", "pi_1"}},
		{"paypal", paypal, []string{"CAP1"}},
		{"alipay", []byte("trade_no=1"), nil},
		{"stripe", []byte("not json"), nil},
	} {
		if got := presets[c.platform].BillRefs(c.body); !slices.Equal(got, c.want) {
			t.Errorf("%s %s: %q, want %q", c.platform, c.body, got, c.want)
		}
	}
}
