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

// sender signs a payment result notification with a test API key; the
// body depends on the id, order and amount only, as a retry's does.
var sender = &keying.Sender{
	Summary: "XML signed with the API key (MD5, or --sign-type HMAC-SHA256)",
	Files:   []string{fileAPIKey},
	Keygen: func() ([]keying.KeyFile, error) {
		return []keying.KeyFile{{Name: fileAPIKey, Data: []byte(signer.Nonce(32))}}, nil
	},
	NewID: wechatpay.NewID,
	Sign: func(in keying.SendInput) ([]byte, http.Header, error) {
		if in.SignType != "MD5" && in.SignType != "HMAC-SHA256" {
			return nil, nil, fmt.Errorf("--sign-type must be MD5 or HMAC-SHA256, not %q", in.SignType)
		}
		v2 := signer.WechatPayV2{SignType: in.SignType}
		var err error
		if v2.APIKey, err = in.Value(in.Secret, fileAPIKey, "--secret"); err != nil {
			return nil, nil, err
		}
		fields := signer.WechatPayV2Payment(in.ID, in.Order, in.Amount)
		fields["nonce_str"] = in.Nonce(32)
		fields["time_end"] = keying.SendEventTime.Format("20060102150405")
		return v2.Body(fields), http.Header{"Content-Type": {"text/xml"}}, nil
	},
}
