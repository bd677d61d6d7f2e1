package wechatpay

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

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
		money                            keying.Money
		wantErr                          error
	}{
		{"payment", "TRANSACTION.SUCCESS", platformtest.WechatPayTransaction("4200001", "o-1", "SUCCESS", 1000), "paid", keying.Money{Amount: "10.00", Currency: "CNY"}, nil},
		{"refund", "REFUND.SUCCESS", refund("SUCCESS"), "refund:Ro-1", keying.Money{Amount: "3.00", Currency: "CNY"}, nil},
		{"refund abnormal", "REFUND.ABNORMAL", refund("ABNORMAL"), "refund:Ro-1:abnormal", keying.Money{Amount: "3.00", Currency: "CNY"}, nil},
		{"refund closed", "REFUND.CLOSED", refund("CLOSED"), "refund:Ro-1:closed", keying.Money{Amount: "3.00", Currency: "CNY"}, nil},
		{"refund without out_refund_no", "REFUND.SUCCESS", strings.Replace(refund("SUCCESS"), `"out_refund_no":"Ro-1",`, "", 1), "", keying.Money{}, keying.ErrMalformed},
		{"payment without transaction_id", "TRANSACTION.SUCCESS", `{"mchid":"1230000109","amount":{"total":1}}`, "", keying.Money{}, keying.ErrMalformed},
		{"unknown event type", "PROFITSHARING.SUCCESS", platformtest.WechatPayTransaction("4200001", "o-1", "SUCCESS", 1000), "", keying.Money{}, keying.ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := wxBody(t, wxEvent("EV-"+c.name, c.eventType, c.resource))
			n, err := presettest.MustNew(t, New, cfg).Verify(wxRequest(t, k, wxPubKeyID, presettest.Now, "n", body))
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
			if !presettest.KnownEvent(n.Event) {
				t.Fatalf("event %q is not read back by SplitOrder", n.Event)
			}
		})
	}
}
