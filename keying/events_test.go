package keying

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// knownEvent: is ev a business event SplitOrder reads back?
func knownEvent(ev string) bool {
	_, got, ok := SplitOrder("s:m:o:" + ev)
	return ok && got == ev
}

func TestSplitOrder(t *testing.T) {
	for _, c := range []struct {
		key, order, event string
		ok                bool
	}{
		{"alipay:2021:T1:paid", "alipay:2021:T1", "paid", true},
		{"alipay:2021:T1:closed", "alipay:2021:T1", "closed", true},
		{"alipay:2021:T1:created", "alipay:2021:T1", "created", true},
		{"wechatpay_v2:m:T1:failed", "wechatpay_v2:m:T1", "failed", true},
		{"alipay:2021:T1:finished", "alipay:2021:T1", "finished", true},
		{"alipay:2021:T1:refund:R1", "alipay:2021:T1", "refund:R1", true},
		{"wechatpay:m:T1:refund:R1:abnormal", "wechatpay:m:T1", "refund:R1:abnormal", true},
		{"wechatpay:m:T1:refund:R:1:closed", "wechatpay:m:T1", "refund:R:1:closed", true},
		{"shop:O-1:paid", "shop:O-1", "paid", true},
		// Its own business event: no event suffix.
		{"stripe:evt_1", "", "", false},
		{"demo:order-1", "", "", false},
		{"alipay:2021:T1", "", "", false},
		// The keys of the presets before business events keep their names.
		{"alipay:2021:T1:TRADE_SUCCESS:", "", "", false},
		{"alipay:2021:T1:TRADE_CLOSED:R1", "", "", false},
		{"wechatpay:TRANSACTION.SUCCESS:4200", "", "", false},
		{"wechatpay_v2:refund:5000:SUCCESS", "", "", false},
		// A scope alone is no order; an empty refund id is no refund.
		{"shop:paid", "", "", false},
		{"shop:refund:R1", "", "", false},
		{"shop:O:refund:", "", "", false},
		{":paid", "", "", false},
		{"paid", "", "", false},
		{"", "", "", false},
	} {
		order, event, ok := SplitOrder(c.key)
		if order != c.order || event != c.event || ok != c.ok {
			t.Errorf("SplitOrder(%q) = %q, %q, %v; want %q, %q, %v", c.key, order, event, ok, c.order, c.event, c.ok)
		}
	}
}

func FuzzSplitOrder(f *testing.F) {
	for _, k := range []string{"alipay:2021:T1:paid", "wechatpay:m:T:refund:R:abnormal", "stripe:evt_1", "a:b:refund:", "x::paid"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		order, event, ok := SplitOrder(key)
		if !ok {
			if order != "" || event != "" {
				t.Fatalf("not an order's event, yet %q %q", order, event)
			}
			return
		}
		if order+":"+event != key || !strings.Contains(order, ":") {
			t.Fatalf("SplitOrder(%q) = %q + %q", key, order, event)
		}
		if o2, e2, ok2 := SplitOrder(order + ":" + event); !ok2 || o2 != order || e2 != event {
			t.Fatalf("not stable: %q", key)
		}
	})
}

func TestMoney(t *testing.T) {
	for _, c := range []struct {
		minor, cur, want string
	}{
		{"990", "CNY", "9.90"}, {"1", "cny", "0.01"}, {"0", "USD", "0.00"}, {"123456", "usd", "1234.56"},
		{"500", "JPY", "500"}, {"1234", "KWD", "1.234"}, {"-250", "EUR", "-2.50"},
	} {
		m, err := FromMinor(c.minor, c.cur)
		if err != nil || m.Amount != c.want || m.Currency != strings.ToUpper(c.cur) {
			t.Errorf("FromMinor(%s, %s) = %+v, %v; want %s", c.minor, c.cur, m, err, c.want)
		}
	}
	for _, bad := range []string{"", "9.9.9", "abc", "1e3", "9.9999", "12,00"} {
		if _, err := Major(bad, "CNY"); err == nil {
			t.Errorf("Major(%q) accepted", bad)
		}
		if _, err := FromMinor(bad, "CNY"); err == nil && bad != "" {
			t.Errorf("FromMinor(%q) accepted", bad)
		}
	}
	if m, err := Major("100", "usd"); err != nil || m != (Money{"100", "USD"}) {
		t.Errorf("Major(100) = %+v %v", m, err)
	}
}

// TestAlipayEvents classifies Alipay's documented notifications
// (opendocs.alipay.com/open/203/105286): the payment, TRADE_FINISHED when
// the refund window ends, a partial refund (TRADE_SUCCESS with refund
// fields), a full refund (TRADE_CLOSED with refund fields), a trade closed
// unpaid, the signed browser return, and what must be refused.
func TestAlipayEvents(t *testing.T) {
	k, _ := platformtest.Keys(t)
	signer := platformtest.Alipay{Key: k}
	p := mustNew(t, "alipay", Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey)})
	const order = "2016091800538339:2026031422001437971000029351"
	notify := func(status string, extra ...string) url.Values {
		v := platformtest.AlipayNotify("2016091800538339", "o-1", "2026031422001437971000029351", status, "88.88")
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		return v
	}
	ret := platformtest.AlipayReturn("2016091800538339", "o-1", "2026031422001437971000029351", "88.88")
	for _, c := range []struct {
		name    string
		req     *Request
		event   string
		money   Money
		wantErr error
	}{
		{"payment", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS"))), "paid", Money{"88.88", "CNY"}, nil},
		{"refund window ended", alipayPost(signer.Sign(t, notify("TRADE_FINISHED"))), "paid", Money{"88.88", "CNY"}, nil},
		{"partial refund", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "out_biz_no", "RF-1", "refund_fee", "8.88", "gmt_refund", "2026-03-15 10:00:00.123"))),
			"refund:RF-1", Money{"8.88", "CNY"}, nil},
		{"second partial refund", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "out_biz_no", "RF-2", "refund_fee", "18.88"))),
			"refund:RF-2", Money{"18.88", "CNY"}, nil},
		{"full refund", alipayPost(signer.Sign(t, notify("TRADE_CLOSED", "out_biz_no", "RF-3", "refund_fee", "88.88"))),
			"refund:RF-3", Money{"88.88", "CNY"}, nil},
		{"closed unpaid", alipayPost(signer.Sign(t, notify("TRADE_CLOSED"))), "closed", Money{"88.88", "CNY"}, nil},
		{"waiting for payment", alipayPost(signer.Sign(t, notify("WAIT_BUYER_PAY"))), "created", Money{"88.88", "CNY"}, nil},
		{"signed browser return", &Request{Method: http.MethodGet, URL: &url.URL{Path: "/return", RawQuery: signer.Query(t, ret)}}, "paid", Money{"88.88", "CNY"}, nil},
		{"cross-border currency", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "trans_currency", "USD"))), "paid", Money{"88.88", "USD"}, nil},
		{"refund without out_biz_no", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "refund_fee", "8.88"))), "", Money{}, ErrMalformed},
		{"unknown status", alipayPost(signer.Sign(t, notify("TRADE_PENDING"))), "", Money{}, ErrMalformed},
		{"amount not a decimal", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "total_amount", "88,88"))), "", Money{}, ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := p.Verify(c.req)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("got %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Order != order || n.Event != c.event || n.Key != order+":"+c.event || n.Money != c.money {
				t.Fatalf("order %q event %q key %q money %+v; want %q %q %+v", n.Order, n.Event, n.Key, n.Money, order, c.event, c.money)
			}
			if o, e, ok := SplitOrder("alipay:" + n.Key); !ok || o != "alipay:"+order || e != c.event {
				t.Fatalf("SplitOrder does not read the key back: %q %q %v", o, e, ok)
			}
		})
	}
}

// TestWechatPayEvents classifies WeChat Pay v3's documented events, the
// resource decrypted with the APIv3 key ("支付结果通知", "退款结果通知"):
// a payment, and each outcome of a refund as that refund's own event.
func TestWechatPayEvents(t *testing.T) {
	k, _ := platformtest.Keys(t)
	cfg := Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey), PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key}
	const order = "1230000109:4200001"
	refund := func(status string) string {
		return platformtest.WechatPayRefund("4200001", "o-1", "5020", status, 300, 1000)
	}
	for _, c := range []struct {
		name, eventType, resource, event string
		money                            Money
		wantErr                          error
	}{
		{"payment", "TRANSACTION.SUCCESS", platformtest.WechatPayTransaction("4200001", "o-1", "SUCCESS", 1000), "paid", Money{"10.00", "CNY"}, nil},
		{"refund", "REFUND.SUCCESS", refund("SUCCESS"), "refund:Ro-1", Money{"3.00", "CNY"}, nil},
		{"refund abnormal", "REFUND.ABNORMAL", refund("ABNORMAL"), "refund:Ro-1:abnormal", Money{"3.00", "CNY"}, nil},
		{"refund closed", "REFUND.CLOSED", refund("CLOSED"), "refund:Ro-1:closed", Money{"3.00", "CNY"}, nil},
		{"refund without out_refund_no", "REFUND.SUCCESS", strings.Replace(refund("SUCCESS"), `"out_refund_no":"Ro-1",`, "", 1), "", Money{}, ErrMalformed},
		{"payment without transaction_id", "TRANSACTION.SUCCESS", `{"mchid":"1230000109","amount":{"total":1}}`, "", Money{}, ErrMalformed},
		{"unknown event type", "PROFITSHARING.SUCCESS", platformtest.WechatPayTransaction("4200001", "o-1", "SUCCESS", 1000), "", Money{}, ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := wxBody(t, wxEvent("EV-"+c.name, c.eventType, c.resource))
			n, err := mustNew(t, "wechatpay", cfg).Verify(wxRequest(t, k, wxPubKeyID, testNow, "n", body))
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("got %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Order != order || n.Event != c.event || n.Key != order+":"+c.event || n.Money != c.money {
				t.Fatalf("order %q event %q key %q money %+v; want %q %q %+v", n.Order, n.Event, n.Key, n.Money, order, c.event, c.money)
			}
			if !knownEvent(n.Event) {
				t.Fatalf("event %q is not read back by SplitOrder", n.Event)
			}
		})
	}
}

// TestWechatPayV2Events: v2's payment notification (result_code SUCCESS
// or FAIL) and its refund notification, whose decrypted req_info names the
// refund (refund_status SUCCESS, CHANGE, REFUNDCLOSE).
func TestWechatPayV2Events(t *testing.T) {
	cfg := Config{Secret: wxV2Key}
	const order = "10000100:1004400740201409030005092168"
	const refundOrder = "10000100:4200000215201811190261405420"
	for _, c := range []struct {
		name, order, event string
		body               []byte
		money              Money
		wantErr            error
	}{
		{"payment", order, "paid", wxV2XML(wxV2MD5.Sign(wxV2Fields())), Money{"0.01", "CNY"}, nil},
		{"failed payment", order, "failed", wxV2XML(wxV2MD5.Sign(set(wxV2Fields(), "result_code", "FAIL"))), Money{"0.01", "CNY"}, nil},
		{"payment in another currency", order, "paid", wxV2XML(wxV2MD5.Sign(set(wxV2Fields(), "fee_type", "HKD"))), Money{"0.01", "HKD"}, nil},
		{"refund", refundOrder, "refund:131811191610442717309", wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS")), Money{"39.60", "CNY"}, nil},
		{"refund changed", refundOrder, "refund:131811191610442717309:abnormal", wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("CHANGE")), Money{"39.60", "CNY"}, nil},
		{"refund closed", refundOrder, "refund:131811191610442717309:closed", wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("REFUNDCLOSE")), Money{"39.60", "CNY"}, nil},
		{"refund status unknown", "", "", wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("LATER")), Money{}, ErrMalformed},
		{"result code unknown", "", "", wxV2XML(wxV2MD5.Sign(set(wxV2Fields(), "result_code", "MAYBE"))), Money{}, ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := mustNew(t, "wechatpay_v2", cfg).Verify(v2req(c.body))
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("got %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Order != c.order || n.Event != c.event || n.Key != c.order+":"+c.event || n.Money != c.money {
				t.Fatalf("order %q event %q key %q money %+v; want %q %q %+v", n.Order, n.Event, n.Key, n.Money, c.order, c.event, c.money)
			}
		})
	}
}

// TestPlatformEventMoney: Stripe, PayPal and Standard Webhooks keep one
// business event per event id (no order), with the amount their events
// carry.
func TestPlatformEventMoney(t *testing.T) {
	now := testNow
	stripe := mustNew(t, "stripe", Config{Secret: "whsec_money"})
	for _, c := range []struct {
		amount int
		cur    string
		want   Money
	}{{990, "usd", Money{"9.90", "USD"}}, {500, "jpy", Money{"500", "JPY"}}} {
		body := []byte(strings.Replace(string(platformtest.StripeEventAt("evt_m", "charge.succeeded", "ch_1", c.amount, now)), `"usd"`, `"`+c.cur+`"`, 1))
		n, err := stripe.Verify(&Request{Method: http.MethodPost, Header: platformtest.StripeHeader(body, "whsec_money", now), Body: body, Now: now})
		if err != nil || n.Key != "evt_m" || n.Order != "" || n.Event != "" || n.Money != c.want {
			t.Errorf("stripe %d %s: %+v %v", c.amount, c.cur, n, err)
		}
	}
	n, err := mustNew(t, "paypal", Config{NoVerify: true}).Verify(&Request{Method: http.MethodPost, Header: http.Header{},
		Body: platformtest.PayPalEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "CAP-1", "12.34"), Now: now})
	if err != nil || n.Key != "WH-1" || n.Order != "" || n.Money != (Money{"12.34", "USD"}) {
		t.Errorf("paypal: %+v %v", n, err)
	}
}

// Decimal places the point (the three money formatters share it).
func TestDecimal(t *testing.T) {
	for _, c := range []struct {
		digits string
		scale  int
		neg    bool
		want   string
	}{
		{"5", 2, false, "0.05"}, {"1230", 2, false, "12.30"}, {"7", 0, true, "-7"},
		{"0", 3, false, "0.000"}, {"12", 1, true, "-1.2"}, {"100", 0, false, "100"},
	} {
		if got := Decimal(c.digits, c.scale, c.neg); got != c.want {
			t.Errorf("Decimal(%q, %d, %v) = %q, want %q", c.digits, c.scale, c.neg, got, c.want)
		}
	}
}
