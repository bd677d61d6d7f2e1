package platformtest

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

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

// WeChat Pay v2's service-provider (服务商) merchants: the service
// provider's mch_id (whose API key signs) and its sub-merchant's
// sub_mch_id.
const (
	WechatPayV2SpMchID  = "10000100"
	WechatPayV2SubMchID = "1900000109"
)

// WechatPayV2PartnerPayment is a service provider's payment result
// notification: the payment's fields with the sub-merchant's sub_mch_id,
// sub_appid, sub_openid and sub_is_subscribe beside the service
// provider's mch_id and appid, all signed.
func WechatPayV2PartnerPayment(subMchID, transactionID, outTradeNo string, totalFee int) map[string]string {
	f := signer.WechatPayV2Payment(transactionID, outTradeNo, totalFee)
	f["mch_id"] = WechatPayV2SpMchID
	f["sub_mch_id"] = subMchID
	f["sub_appid"] = "wx8888888888888888"
	f["sub_openid"] = "oUpF8uN95-Ptaags6E_roPHg7AG0"
	f["sub_is_subscribe"] = "N"
	return f
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
	return signer.WechatPayV2XML(w.RefundFields(t, string(cdataXML("root", info, "")), signer.Nonce(32)))
}

// RefundInfoFields are the fields of Refund's notification for info, with
// nonce_str nonce: a test changes its unsigned envelope before writing it
// (WechatPayV2XML).
func (w WechatPayV2) RefundInfoFields(t testing.TB, info map[string]string, nonce string) map[string]string {
	t.Helper()
	return w.RefundFields(t, string(cdataXML("root", info, "")), nonce)
}

// RefundFields are the fields of a refund notification whose req_info
// encrypts plain as it is (Refund's <root> document, or anything else a
// verifier must refuse) and whose nonce_str is nonce.
func (w WechatPayV2) RefundFields(t testing.TB, plain, nonce string) map[string]string {
	t.Helper()
	f, err := signer.WechatPayV2(w).RefundEnvelope(plain, nonce)
	check(t, err)
	return f
}

// PartnerRefund is a service provider's refund notification for
// subMchID: Refund's, its envelope naming the sub-merchant (sub_mch_id,
// sub_appid) beside the service provider's mch_id, none of it signed.
func (w WechatPayV2) PartnerRefund(t testing.TB, subMchID string, info map[string]string) []byte {
	t.Helper()
	f := w.RefundFields(t, string(cdataXML("root", info, "")), signer.Nonce(32))
	f["mch_id"] = WechatPayV2SpMchID
	f["sub_mch_id"] = subMchID
	f["sub_appid"] = "wx8888888888888888"
	return signer.WechatPayV2XML(f)
}

// WechatPayV2RefundInfo is the decrypted req_info of a refund notification.
func WechatPayV2RefundInfo(transactionID, outTradeNo, refundID, refundStatus string, refundFee, totalFee int) map[string]string {
	return signer.WechatPayV2RefundInfo(transactionID, outTradeNo, refundID, "R"+outTradeNo, refundStatus, refundFee, totalFee, time.Now())
}

// WechatPayV2XML writes fields the way WeChat Pay does: <xml> with each
// value in CDATA (signer.WechatPayV2XML).
func WechatPayV2XML(fields map[string]string) []byte { return signer.WechatPayV2XML(fields) }

// WechatPayV2XMLIndented is WechatPayV2XML laid out as WeChat Pay's
// documentation shows it: one element a line, indented by two spaces.
func WechatPayV2XMLIndented(fields map[string]string) []byte {
	return cdataXML("xml", fields, "\n  ")
}

// WechatPayV2Answer is the XML a merchant answers with: return_code
// SUCCESS (handled) or FAIL (WeChat Pay retries).
func WechatPayV2Answer(returnCode, returnMsg string) string {
	return "<xml><return_code><![CDATA[" + returnCode + "]]></return_code><return_msg><![CDATA[" + returnMsg + "]]></return_msg></xml>"
}

// cdataXML writes fields, sorted by name, as CDATA elements under root,
// each after indent; with an indent, the closing tag has a line of its own
// (signer.WechatPayV2XML's form, which has no indent).
func cdataXML(root string, fields map[string]string, indent string) []byte {
	var b strings.Builder
	b.WriteString("<" + root + ">")
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		b.WriteString(indent + "<" + k + "><![CDATA[" + fields[k] + "]]></" + k + ">")
	}
	if indent != "" {
		b.WriteString("\n")
	}
	b.WriteString("</" + root + ">")
	return []byte(b.String())
}
