package wechatpayv2

import (
	"slices"
	"testing"

	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestWechatPayV2MerchantRefs: a payment's signed out_trade_no; a
// refund's from req_info (decrypted under the merchant's key), never from
// its unsigned envelope.
func TestWechatPayV2MerchantRefs(t *testing.T) {
	cfg := Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}
	refund := wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS"))
	cases := []presettest.VerifyCase[Config]{
		{Name: "paid", Cfg: cfg, Req: v2req(wxV2XML(wxV2MD5.Sign(wxV2Fields()))), Key: "10000100:1004400740201409030005092168:paid"},
		{Name: "refund", Cfg: cfg, Req: v2req(refund), Key: "10000100:4200000215201811190261405420:refund:131811191610442717309"},
		{Name: "refund, envelope names another order", Cfg: cfg, Req: v2req(smuggle(refund, "<out_trade_no>FORGED</out_trade_no><out_refund_no>FORGED2</out_refund_no>")),
			Key: "10000100:4200000215201811190261405420:refund:131811191610442717309"},
	}
	want := map[string][]string{
		"paid":                                 {"1409811653"},
		"refund":                               {"71106718111915575302817", "131811191610442717309"},
		"refund, envelope names another order": {"71106718111915575302817", "131811191610442717309"},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if !slices.Equal(n.MerchantRefs, want[c.Name]) {
			t.Fatalf("MerchantRefs = %q, want %q", n.MerchantRefs, want[c.Name])
		}
	})
}
