package platformtest

import (
	"testing"

	"github.com/idemgate/idemgate/internal/signer"
)

// WechatPayV2 signs WeChat Pay API v2 notifications (XML). Its fields are
// signer.WechatPayV2's: APIKey and SignType ("MD5", the default, or
// "HMAC-SHA256").
type WechatPayV2 signer.WechatPayV2

// WechatPayV2Payment is a payment result notification as WeChat Pay v2's
// documentation shows it (signer.WechatPayV2Payment).
func WechatPayV2Payment(transactionID, outTradeNo string, totalFee int) map[string]string {
	return signer.WechatPayV2Payment(transactionID, outTradeNo, totalFee)
}

// Sign returns a copy of fields with sign (and sign_type for HMAC-SHA256)
// set (signer.WechatPayV2.Sign).
func (w WechatPayV2) Sign(fields map[string]string) map[string]string {
	return signer.WechatPayV2(w).Sign(fields)
}

// Body is the signed notification as XML.
func (w WechatPayV2) Body(fields map[string]string) []byte {
	return signer.WechatPayV2(w).Body(fields)
}

// Refund is a refund notification: no sign, the refund in req_info,
// encrypted with AES-256-ECB under the lower-case hex MD5 of the API key.
func (w WechatPayV2) Refund(t testing.TB, info map[string]string) []byte {
	t.Helper()
	v, err := signer.WechatPayV2(w).Refund(info)
	check(t, err)
	return v
}

// RefundFields are the fields of a refund notification whose req_info
// encrypts plain as it is (Refund's <root> document, or anything else a
// verifier must refuse) and whose nonce_str is nonce.
func (w WechatPayV2) RefundFields(t testing.TB, plain, nonce string) map[string]string {
	t.Helper()
	v, err := signer.WechatPayV2(w).RefundFields(plain, nonce)
	check(t, err)
	return v
}

// WechatPayV2RefundInfo is the decrypted req_info of a refund notification
// (signer.WechatPayV2RefundInfo).
func WechatPayV2RefundInfo(transactionID, outTradeNo, refundID, refundStatus string, refundFee, totalFee int) map[string]string {
	return signer.WechatPayV2RefundInfo(transactionID, outTradeNo, refundID, refundStatus, refundFee, totalFee)
}

// WechatPayV2XML writes fields the way WeChat Pay does: <xml> with each
// value in CDATA (signer.WechatPayV2XML).
func WechatPayV2XML(fields map[string]string) []byte { return signer.WechatPayV2XML(fields) }

// WechatPayV2XMLIndented is WechatPayV2XML laid out as WeChat Pay's
// documentation shows it (signer.WechatPayV2XMLIndented).
func WechatPayV2XMLIndented(fields map[string]string) []byte {
	return signer.WechatPayV2XMLIndented(fields)
}

// WechatPayV2Answer is the XML a merchant answers with: return_code
// SUCCESS (handled) or FAIL (WeChat Pay retries).
func WechatPayV2Answer(returnCode, returnMsg string) string {
	return signer.WechatPayV2Answer(returnCode, returnMsg)
}
