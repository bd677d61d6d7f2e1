package alipay

import (
	"slices"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestAlipayMerchantRefs: a notification names the merchant's order
// number (out_trade_no) and a refund's (out_biz_no), from signed params.
func TestAlipayMerchantRefs(t *testing.T) {
	k, _ := platformtest.Keys(t)
	rsa2 := platformtest.Alipay{Key: k}
	cfg := Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey)}
	cases := []presettest.VerifyCase[Config]{
		{Name: "paid", Cfg: cfg, Req: alipayPost(rsa2.Sign(t, alipayNotify())), Key: "2016091800538339:2026031422001437971000029351:paid"},
		{Name: "refund", Cfg: cfg, Req: alipayPost(rsa2.Sign(t, with(alipayNotify(), "out_biz_no", "R20260314-1", "refund_fee", "8.00"))),
			Key: "2016091800538339:2026031422001437971000029351:refund:R20260314-1"},
		{Name: "browser return", Cfg: Config{PublicKey: cfg.PublicKey, Return: ReturnBusiness}, Req: alipayGet(rsa2.Sign(t, alipayReturn()).Encode()), Key: "2016091800538339:2026031422001437971000029351:paid"},
	}
	want := map[string][]string{
		"paid":           {"20260314172606001"},
		"refund":         {"20260314172606001", "R20260314-1"},
		"browser return": {"20260314172606001"},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if !slices.Equal(n.MerchantRefs, want[c.Name]) {
			t.Fatalf("MerchantRefs = %q, want %q", n.MerchantRefs, want[c.Name])
		}
	})
	// A reference added after signing is refused with the whole request:
	// nothing unsigned is ever filed.
	presettest.Verifies(t, New, cfg, alipayPost(with(rsa2.Sign(t, alipayNotify()), "out_request_no", "FORGED")), keying.ErrSignature, "")
}
