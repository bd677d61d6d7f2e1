package alipay

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestAlipayEvents classifies Alipay's documented notifications
// (opendocs.alipay.com/open/203/105286): the payment, TRADE_FINISHED when
// the refund window ends, a partial refund (TRADE_SUCCESS with refund
// fields), a full refund (TRADE_CLOSED with refund fields), a trade closed
// unpaid, the signed browser return, and what must be refused.
func TestAlipayEvents(t *testing.T) {
	k, _ := platformtest.Keys(t)
	signer := platformtest.Alipay{Key: k}
	p := presettest.MustNew(t, New, Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey), Return: ReturnBusiness})
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
		req     *keying.Request
		event   string
		money   keying.Money
		wantErr error
	}{
		{"payment", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS"))), "paid", keying.Money{Amount: "88.88", Currency: "CNY"}, nil},
		{"refund window ended", alipayPost(signer.Sign(t, notify("TRADE_FINISHED"))), "paid", keying.Money{Amount: "88.88", Currency: "CNY"}, nil},
		{"partial refund", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "out_biz_no", "RF-1", "refund_fee", "8.88", "gmt_refund", "2026-03-15 10:00:00.123"))),
			"refund:RF-1", keying.Money{Amount: "8.88", Currency: "CNY"}, nil},
		{"second partial refund", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "out_biz_no", "RF-2", "refund_fee", "18.88"))),
			"refund:RF-2", keying.Money{Amount: "18.88", Currency: "CNY"}, nil},
		{"full refund", alipayPost(signer.Sign(t, notify("TRADE_CLOSED", "out_biz_no", "RF-3", "refund_fee", "88.88"))),
			"refund:RF-3", keying.Money{Amount: "88.88", Currency: "CNY"}, nil},
		{"closed unpaid", alipayPost(signer.Sign(t, notify("TRADE_CLOSED"))), "closed", keying.Money{Amount: "88.88", Currency: "CNY"}, nil},
		{"waiting for payment", alipayPost(signer.Sign(t, notify("WAIT_BUYER_PAY"))), "created", keying.Money{Amount: "88.88", Currency: "CNY"}, nil},
		{"signed browser return", &keying.Request{Method: http.MethodGet, URL: &url.URL{Path: "/return", RawQuery: signer.Query(t, ret)}}, "paid", keying.Money{Amount: "88.88", Currency: "CNY"}, nil},
		{"cross-border currency", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "trans_currency", "USD"))), "paid", keying.Money{Amount: "88.88", Currency: "USD"}, nil},
		{"refund without out_biz_no", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "refund_fee", "8.88"))), "", keying.Money{}, keying.ErrMalformed},
		{"unknown status", alipayPost(signer.Sign(t, notify("TRADE_PENDING"))), "", keying.Money{}, keying.ErrMalformed},
		{"amount not a decimal", alipayPost(signer.Sign(t, notify("TRADE_SUCCESS", "total_amount", "88,88"))), "", keying.Money{}, keying.ErrMalformed},
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
			if o, e, ok := keying.SplitOrder("alipay:" + n.Key); !ok || o != "alipay:"+order || e != c.event {
				t.Fatalf("SplitOrder does not read the key back: %q %q %v", o, e, ok)
			}
		})
	}
}
