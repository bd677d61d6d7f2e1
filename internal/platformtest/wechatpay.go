package platformtest

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
)

// WechatPay signs WeChat Pay API v3 notifications: the resource is
// encrypted with AEAD_AES_256_GCM under the APIv3 key, and the envelope is
// signed with SHA256withRSA over "<timestamp>\n<nonce>\n<body>\n". Its
// fields are signer.WechatPay's: Key, Serial and APIv3Key.
type WechatPay signer.WechatPay

// WechatPayEvent is one notification before encryption (signer.WechatPayEvent).
type WechatPayEvent = signer.WechatPayEvent

// WechatPayTransaction is the decrypted resource of a TRANSACTION.SUCCESS
// notification (signer.WechatPayTransaction).
func WechatPayTransaction(transactionID, outTradeNo, tradeState string, total int) string {
	return signer.WechatPayTransaction(transactionID, outTradeNo, tradeState, total)
}

// WechatPayRefund is the decrypted resource of a REFUND.SUCCESS
// notification.
func WechatPayRefund(transactionID, outTradeNo, refundID, refundStatus string, refund, total int) string {
	return fmt.Sprintf(`{"mchid":"1230000109","transaction_id":%q,"out_trade_no":%q,"refund_id":%q,"out_refund_no":"R%s","refund_status":%q,"success_time":"2026-03-14T17:30:00+08:00","user_received_account":"招商银行信用卡0403","amount":{"total":%d,"refund":%d,"payer_total":%d,"payer_refund":%d}}`,
		transactionID, outTradeNo, refundID, outTradeNo, refundStatus, total, refund, total, refund)
}

// WechatPay's service-provider (服务商) merchants in the partner resources:
// the service provider's sp_mchid and the sub-merchant's sub_mchid.
const (
	WechatPaySpMchID  = "1230000109"
	WechatPaySubMchID = "1900000109"
)

// WechatPayPartnerTransaction is the decrypted resource of a service
// provider's (服务商) TRANSACTION.SUCCESS notification, shaped as WeChat
// Pay's partner payment notification shows it (wechatpay-go's
// partnerpayments.Transaction): sp_mchid/sub_mchid and sp_appid/sub_appid
// instead of mchid and appid, the payer's sp_openid/sub_openid.
func WechatPayPartnerTransaction(spMchID, subMchID, transactionID, outTradeNo, tradeState string, total int) string {
	return signer.WechatPayPartnerTransaction(spMchID, subMchID, transactionID, outTradeNo, tradeState, total)
}

// WechatPayPartnerRefund is the decrypted resource of a service provider's
// REFUND.SUCCESS notification: sp_mchid and sub_mchid instead of mchid.
func WechatPayPartnerRefund(spMchID, subMchID, transactionID, outTradeNo, refundID, refundStatus string, refund, total int) string {
	return signer.WechatPayPartnerRefundResource(spMchID, subMchID, transactionID, outTradeNo, refundID, "R"+outTradeNo, refundStatus, refund, total)
}

// Body is the notification envelope with the resource freshly encrypted
// (a new 12-character nonce each call, as each retry has, unless ev.Nonce
// is set).
func (w WechatPay) Body(t testing.TB, ev WechatPayEvent) []byte {
	t.Helper()
	v, err := signer.WechatPay(w).Body(ev)
	check(t, err)
	return v
}

// Header signs body at ts with a fresh nonce: Wechatpay-Timestamp,
// -Nonce, -Signature, -Serial and -Signature-Type.
func (w WechatPay) Header(t testing.TB, body []byte, ts time.Time) http.Header {
	t.Helper()
	v, err := signer.WechatPay(w).Header(body, ts)
	check(t, err)
	return v
}

// HeaderWithNonce is Header with the given Wechatpay-Nonce, for tests that
// need the same header on every run or name the nonce themselves.
func (w WechatPay) HeaderWithNonce(t testing.TB, body []byte, ts time.Time, nonce string) http.Header {
	t.Helper()
	v, err := signer.WechatPay(w).HeaderWithNonce(body, ts, nonce)
	check(t, err)
	return v
}

// Notification is Body and Header at the current time: one delivery.
func (w WechatPay) Notification(t testing.TB, ev WechatPayEvent) ([]byte, http.Header) {
	t.Helper()
	body, h, err := signer.WechatPay(w).Notification(ev)
	check(t, err)
	return body, h
}

// SigntestHeader is the header of a WeChat Pay signature probe, whose
// Wechatpay-Signature starts with "WECHATPAY/SIGNTEST/": the merchant must
// reject it.
func (w WechatPay) SigntestHeader(t testing.TB, body []byte) http.Header {
	t.Helper()
	h, err := signer.WechatPay(w).Header(body, time.Now())
	check(t, err)
	h.Set("Wechatpay-Signature", "WECHATPAY/SIGNTEST/"+base64.StdEncoding.EncodeToString([]byte(signer.Nonce(48))))
	return h
}
