package wechatpayv2

import (
	"errors"
	"testing"

	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestWechatPayV2Events: v2's payment notification (result_code SUCCESS
// or FAIL) and its refund notification, whose decrypted req_info names the
// refund (refund_status SUCCESS, CHANGE, REFUNDCLOSE).
func TestWechatPayV2Events(t *testing.T) {
	cfg := Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}
	const order = "10000100:1004400740201409030005092168"
	const refundOrder = "10000100:4200000215201811190261405420"
	for _, c := range []struct {
		name, order, event string
		body               []byte
		money              keying.Money
		wantErr            error
	}{
		{"payment", order, "paid", wxV2XML(wxV2MD5.Sign(wxV2Fields())), keying.Money{Amount: "0.01", Currency: "CNY"}, nil},
		{"failed payment", order, "failed", wxV2XML(wxV2MD5.Sign(set(wxV2Fields(), "result_code", "FAIL"))), keying.Money{Amount: "0.01", Currency: "CNY"}, nil},
		{"payment in another currency", order, "paid", wxV2XML(wxV2MD5.Sign(set(wxV2Fields(), "fee_type", "HKD"))), keying.Money{Amount: "0.01", Currency: "HKD"}, nil},
		{"refund", refundOrder, "refund:131811191610442717309", wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS")), keying.Money{Amount: "39.60", Currency: "CNY"}, nil},
		{"refund changed", refundOrder, "refund:131811191610442717309:abnormal", wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("CHANGE")), keying.Money{Amount: "39.60", Currency: "CNY"}, nil},
		{"refund closed", refundOrder, "refund:131811191610442717309:closed", wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("REFUNDCLOSE")), keying.Money{Amount: "39.60", Currency: "CNY"}, nil},
		{"refund status unknown", "", "", wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("LATER")), keying.Money{}, keying.ErrMalformed},
		{"result code unknown", "", "", wxV2XML(wxV2MD5.Sign(set(wxV2Fields(), "result_code", "MAYBE"))), keying.Money{}, keying.ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := presettest.MustNew(t, New, cfg).Verify(v2req(c.body))
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
