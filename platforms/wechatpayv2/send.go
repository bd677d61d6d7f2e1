package wechatpayv2

import (
	"fmt"
	"net/http"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/wechatpay"
)

// fileAPIKey is the file keygen writes for WeChat Pay API v2.
const fileAPIKey = "wechatpay_v2_api_key"

// sender signs a payment result notification, and a refund's with its
// req_info encrypted, with a test API key; the body depends on the id,
// event, order, refund and amounts only, as a retry's does.
var sender = &keying.Sender{
	Summary: "XML signed with the API key (MD5, or --sign-type HMAC-SHA256);\na refund's req_info encrypted with MD5(API key) (AES-256-ECB)",
	Files:   []string{fileAPIKey},
	Keygen: func() ([]keying.KeyFile, error) {
		return []keying.KeyFile{{Name: fileAPIKey, Data: []byte(signer.Nonce(32))}}, nil
	},
	NewID: wechatpay.NewID,
	Events: []keying.SendEvent{
		{Name: "paid", About: "result_code SUCCESS"},
		{Name: "failed", About: "result_code FAIL"},
		{Name: "refund", About: "refund_status SUCCESS in the encrypted req_info"},
		{Name: "refund_abnormal", About: "refund_status CHANGE (the refund's own event)"},
		{Name: "refund_closed", About: "refund_status REFUNDCLOSE (the refund's own event)"},
	},
	RefundEvent: "refund",
	TradeID:     true,
	Flags:       []keying.SendFlag{{Name: "sign-type", Default: "MD5", Usage: "WeChat Pay v2: MD5 or HMAC-SHA256"}},
	Sign: func(in keying.SendInput) (keying.Signed, error) {
		signType := in.Flag("sign-type")
		if signType != "MD5" && signType != "HMAC-SHA256" {
			return keying.Signed{}, fmt.Errorf("--sign-type must be MD5 or HMAC-SHA256, not %q", signType)
		}
		v2 := signer.WechatPayV2{SignType: signType}
		var err error
		if v2.APIKey, err = in.Value(in.Secret, fileAPIKey, "--secret"); err != nil {
			return keying.Signed{}, err
		}
		header := http.Header{"Content-Type": {"text/xml"}}
		switch in.Event {
		case "paid", "failed":
			fields := signer.WechatPayV2Payment(in.ID, in.Order, in.Amount)
			fields["nonce_str"] = in.Nonce(32)
			fields["time_end"] = keying.SendEventTime.Format("20060102150405")
			if in.Event == "failed" {
				fields["result_code"] = "FAIL"
				fields["err_code"] = "NOTENOUGH"
				fields["err_code_des"] = "余额不足"
			}
			return keying.Signed{Body: v2.Body(fields), Header: header}, nil
		case "refund", "refund_abnormal", "refund_closed":
			status := map[string]string{"refund": "SUCCESS", "refund_abnormal": "CHANGE", "refund_closed": "REFUNDCLOSE"}[in.Event]
			info := signer.WechatPayV2RefundInfo(in.ID, in.Order, "50"+in.Nonce(20), in.Refund, status,
				in.RefundAmount, in.Amount, keying.SendEventTime)
			// A refund notification carries no sign: req_info decrypting
			// under the API key is what authenticates it.
			fields, err := v2.RefundFields(info, in.Nonce(32))
			if err != nil {
				return keying.Signed{}, err
			}
			return keying.Signed{Body: signer.WechatPayV2XML(fields), Header: header}, nil
		}
		return keying.Signed{}, fmt.Errorf("no event %q", in.Event)
	},
}
