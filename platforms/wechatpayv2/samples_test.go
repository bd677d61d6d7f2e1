package wechatpayv2

import (
	"encoding/json"
	"testing"

	"github.com/idemgate/idemgate/internal/presettest"
)

// Tests against samples signed by the platforms themselves, taken from
// their SDKs' test suites and documentation (keying/testdata says where
// each comes from): they pin the verifiers to the platforms' real output,
// not only to internal/platformtest's reading of the documentation.

func TestWechatPayV2DocumentationVector(t *testing.T) {
	var v struct {
		Key    string            `json:"key"`
		Fields map[string]string `json:"fields"`
		MD5    string            `json:"md5"`
		HMAC   string            `json:"hmac-sha256"`
	}
	if err := json.Unmarshal(presettest.ReadTestdata(t, "wechatpay_v2.json"), &v); err != nil {
		t.Fatal(err)
	}
	w := presettest.MustNew(t, New, Config{Secret: v.Key, MchIDs: []string{v.Fields["mch_id"]}}).(*WechatPayV2)
	for name, sign := range map[string]string{"MD5": v.MD5, "HMAC-SHA256": v.HMAC} {
		fields := map[string]string{"sign": sign}
		for k, val := range v.Fields {
			fields[k] = val
		}
		if err := w.verify(fields); err != nil {
			t.Errorf("%s: the documentation's example does not verify: %v", name, err)
		}
		fields["body"] = "test2"
		if err := w.verify(fields); err == nil {
			t.Errorf("%s: a changed field verified", name)
		}
	}
}
