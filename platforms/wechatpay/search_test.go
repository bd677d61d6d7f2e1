package wechatpay

import (
	"slices"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestWechatPayMerchantRefs: the decrypted resource's out_trade_no and
// out_refund_no; without the APIv3 key nothing is decrypted, so none.
func TestWechatPayMerchantRefs(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.PublicKeyPEM(t, &k.PublicKey)
	byKey := Config{PublicKey: pub, PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key}
	noSecret := Config{PublicKey: pub, PublicKeyID: wxPubKeyID}
	pay := wxBody(t, wxEvent("EV-1", "TRANSACTION.SUCCESS", platformtest.WechatPayTransaction(wxTxID, "ORDER-20260314-7", "SUCCESS", 100)))
	refund := wxBody(t, wxEvent("EV-2", "REFUND.SUCCESS", platformtest.WechatPayRefund("1008450740201411110005820873", "20150806125346", "50200207182018070300011301001", "SUCCESS", 999, 999)))
	cases := []presettest.VerifyCase[Config]{
		{Name: "paid", Cfg: byKey, Req: wxRequest(t, k, wxPubKeyID, presettest.Now, "N1", pay), Key: "1230000109:" + wxTxID + ":paid"},
		{Name: "refund", Cfg: byKey, Req: wxRequest(t, k, wxPubKeyID, presettest.Now, "N2", refund), Key: "1230000109:1008450740201411110005820873:refund:R20150806125346"},
		{Name: "no APIv3 key", Cfg: noSecret, Req: wxRequest(t, k, wxPubKeyID, presettest.Now, "N3", pay), Key: "EV-1"},
	}
	want := map[string][]string{
		"paid":         {"ORDER-20260314-7"},
		"refund":       {"20150806125346", "R20150806125346"},
		"no APIv3 key": nil,
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if !slices.Equal(n.MerchantRefs, want[c.Name]) {
			t.Fatalf("MerchantRefs = %q, want %q", n.MerchantRefs, want[c.Name])
		}
	})
}
