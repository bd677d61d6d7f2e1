package signer

import (
	"bytes"
	"crypto/aes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The business events beyond a payment, shaped as each platform's
// documentation shows them, for `idemgate idempotency send --event` and
// the tests.

// beijing is the zone Alipay's and WeChat Pay's times are written in.
var beijing = time.FixedZone("CST", 8*3600)

// AlipayRefund is the notify Alipay sends when a refund of the trade
// succeeds: the trade's fields with out_biz_no (the merchant's refund id),
// refund_fee (the trade's refunded amount so far) and gmt_refund; its
// trade_status is TRADE_CLOSED once all of it is refunded, else
// TRADE_SUCCESS (Alipay's 异步通知 trade_status table).
func AlipayRefund(appID, outTradeNo, tradeNo, totalAmount, outBizNo, refundFee string) url.Values {
	v := AlipayNotify(appID, outTradeNo, tradeNo, "TRADE_SUCCESS", totalAmount)
	now := time.Now().In(beijing)
	if refundFee == totalAmount {
		v.Set("trade_status", "TRADE_CLOSED")
		v.Set("gmt_close", now.Format(time.DateTime))
	}
	v.Set("out_biz_no", outBizNo)
	v.Set("refund_fee", refundFee)
	v.Set("gmt_refund", now.Format("2006-01-02 15:04:05.000"))
	return v
}

// AlipayUnpaid is a notify of a trade that was never paid: tradeStatus
// WAIT_BUYER_PAY (created) or TRADE_CLOSED (closed unpaid, with
// gmt_close), without the payment's fields.
func AlipayUnpaid(appID, outTradeNo, tradeNo, tradeStatus, totalAmount string) url.Values {
	v := AlipayNotify(appID, outTradeNo, tradeNo, tradeStatus, totalAmount)
	for _, k := range []string{"gmt_payment", "buyer_pay_amount", "receipt_amount", "invoice_amount", "fund_bill_list", "point_amount"} {
		v.Del(k)
	}
	if tradeStatus == "TRADE_CLOSED" {
		v.Set("gmt_close", time.Now().In(beijing).Format(time.DateTime))
	}
	return v
}

// AlipayFinished is the TRADE_FINISHED notify Alipay sends when a paid
// trade can no longer be refunded, with gmt_close.
func AlipayFinished(appID, outTradeNo, tradeNo, totalAmount string) url.Values {
	v := AlipayNotify(appID, outTradeNo, tradeNo, "TRADE_FINISHED", totalAmount)
	v.Set("gmt_close", time.Now().In(beijing).Format(time.DateTime))
	return v
}

// AlipayReturn is the query Alipay appends to return_url when it sends the
// browser back after a page payment (alipay.trade.page.pay.return).
func AlipayReturn(appID, outTradeNo, tradeNo, totalAmount string) url.Values {
	return url.Values{
		"charset":      {"utf-8"},
		"out_trade_no": {outTradeNo},
		"method":       {"alipay.trade.page.pay.return"},
		"total_amount": {totalAmount},
		"trade_no":     {tradeNo},
		"auth_app_id":  {appID},
		"version":      {"1.0"},
		"app_id":       {appID},
		"seller_id":    {"2088102177296610"},
		"timestamp":    {time.Now().In(beijing).Format(time.DateTime)},
	}
}

// WechatPayRefundResource is the decrypted resource of a WeChat Pay API
// v3 refund notification (REFUND.SUCCESS, REFUND.ABNORMAL, REFUND.CLOSED
// with refund_status SUCCESS, ABNORMAL, CLOSED), shaped as its
// documentation shows it.
func WechatPayRefundResource(transactionID, outTradeNo, refundID, outRefundNo, refundStatus string, refund, total int) string {
	return fmt.Sprintf(`{"mchid":"1230000109","transaction_id":%q,"out_trade_no":%q,"refund_id":%q,"out_refund_no":%q,"refund_status":%q,"success_time":"2026-03-14T17:30:00+08:00","user_received_account":"招商银行信用卡0403","amount":{"total":%d,"refund":%d,"payer_total":%d,"payer_refund":%d}}`,
		transactionID, outTradeNo, refundID, outRefundNo, refundStatus, total, refund, total, refund)
}

// WechatPayPartnerTransaction is the decrypted resource of a service
// provider's (服务商) TRANSACTION.SUCCESS notification, shaped as WeChat
// Pay's partner payment notification shows it (wechatpay-go's
// partnerpayments.Transaction): sp_mchid/sub_mchid and sp_appid/sub_appid
// instead of mchid and appid, the payer's sp_openid/sub_openid.
func WechatPayPartnerTransaction(spMchID, subMchID, transactionID, outTradeNo, tradeState string, total int) string {
	return fmt.Sprintf(`{"sp_appid":"wx8888888888888888","sp_mchid":%q,"sub_appid":"wxd678efh567hg6999","sub_mchid":%q,"out_trade_no":%q,"transaction_id":%q,"trade_type":"JSAPI","trade_state":%q,"trade_state_desc":"支付成功","bank_type":"CMC","attach":"","success_time":"2026-03-14T17:26:32+08:00","payer":{"sp_openid":"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o","sub_openid":"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},"amount":{"total":%d,"payer_total":%d,"currency":"CNY","payer_currency":"CNY"}}`,
		spMchID, subMchID, outTradeNo, transactionID, tradeState, total, total)
}

// WechatPayPartnerRefundResource is the decrypted resource of a service
// provider's refund notification: sp_mchid and sub_mchid instead of mchid.
func WechatPayPartnerRefundResource(spMchID, subMchID, transactionID, outTradeNo, refundID, outRefundNo, refundStatus string, refund, total int) string {
	return fmt.Sprintf(`{"sp_mchid":%q,"sub_mchid":%q,"transaction_id":%q,"out_trade_no":%q,"refund_id":%q,"out_refund_no":%q,"refund_status":%q,"success_time":"2026-03-14T17:30:00+08:00","user_received_account":"招商银行信用卡0403","amount":{"total":%d,"refund":%d,"payer_total":%d,"payer_refund":%d}}`,
		spMchID, subMchID, transactionID, outTradeNo, refundID, outRefundNo, refundStatus, total, refund, total, refund)
}

// WechatPayV2RefundInfo is the decrypted req_info of a WeChat Pay API v2
// refund notification (退款结果通知); refundStatus SUCCESS, CHANGE or
// REFUNDCLOSE.
func WechatPayV2RefundInfo(transactionID, outTradeNo, refundID, outRefundNo, refundStatus string, refundFee, totalFee int, success time.Time) map[string]string {
	return map[string]string{
		"out_refund_no":         outRefundNo,
		"out_trade_no":          outTradeNo,
		"refund_account":        "REFUND_SOURCE_RECHARGE_FUNDS",
		"refund_fee":            strconv.Itoa(refundFee),
		"refund_id":             refundID,
		"refund_recv_accout":    "支付用户零钱",
		"refund_request_source": "API",
		"refund_status":         refundStatus,
		"settlement_refund_fee": strconv.Itoa(refundFee),
		"settlement_total_fee":  strconv.Itoa(totalFee),
		"success_time":          success.In(beijing).Format(time.DateTime),
		"total_fee":             strconv.Itoa(totalFee),
		"transaction_id":        transactionID,
	}
}

// RefundFields are the fields of a v2 refund notification: no sign, the
// refund info as a <root> document in req_info (RefundEnvelope); nonce_str
// is nonce.
func (w WechatPayV2) RefundFields(info map[string]string, nonce string) (map[string]string, error) {
	var b strings.Builder
	b.WriteString("<root>")
	for _, k := range sortedKeys(info) {
		b.WriteString("<" + k + "><![CDATA[" + info[k] + "]]></" + k + ">")
	}
	b.WriteString("</root>")
	return w.RefundEnvelope(b.String(), nonce)
}

// RefundEnvelope is a v2 refund notification's envelope around plain:
// req_info is plain encrypted with AES-256-ECB (PKCS #7 padding) under the
// lower-case hex MD5 of the API key, base64, as WeChat Pay does. plain may
// be any text (tests encrypt what a verifier must refuse).
func (w WechatPayV2) RefundEnvelope(plain, nonce string) (map[string]string, error) {
	sum := md5.Sum([]byte(w.APIKey))
	block, err := aes.NewCipher([]byte(hex.EncodeToString(sum[:])))
	if err != nil {
		return nil, fmt.Errorf("signer: %w", err)
	}
	n := aes.BlockSize - len(plain)%aes.BlockSize
	padded := append([]byte(plain), bytes.Repeat([]byte{byte(n)}, n)...)
	ct := make([]byte, len(padded))
	for i := 0; i < len(padded); i += aes.BlockSize {
		block.Encrypt(ct[i:i+aes.BlockSize], padded[i:i+aes.BlockSize])
	}
	return map[string]string{
		"return_code": "SUCCESS",
		"appid":       "wx2421b1c4370ec43b",
		"mch_id":      "10000100",
		"nonce_str":   nonce,
		"req_info":    base64.StdEncoding.EncodeToString(ct),
	}, nil
}

// StripeChangeEvent is a Stripe event of type eventType whose
// data.object is object (JSON), created at the given time, with
// data.previous_attributes (JSON; none when empty): the object's fields
// as they were before the event, as Stripe sends with charge.refunded and
// *.updated.
func StripeChangeEvent(id, eventType, object, previous string, created time.Time) []byte {
	data := `{"object": ` + object + `}`
	if previous != "" {
		data = `{"object": ` + object + `, "previous_attributes": ` + previous + `}`
	}
	return []byte(fmt.Sprintf(`{
  "id": %q,
  "object": "event",
  "api_version": "2025-03-31.basil",
  "created": %d,
  "data": %s,
  "livemode": false,
  "pending_webhooks": 1,
  "request": {"id": null, "idempotency_key": null},
  "type": %q
}`, id, created.Unix(), data, eventType))
}

// PayPalRefundEvent is a PAYMENT.CAPTURE.REFUNDED webhook event: the
// resource is the refund, linked up to the capture it refunds.
func PayPalRefundEvent(id, refundID, captureID, value string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"event_version":"1.0","create_time":"2026-03-14T09:30:00.000Z","resource_type":"refund","resource_version":"2.0","event_type":"PAYMENT.CAPTURE.REFUNDED","summary":"A $ %s USD capture payment was refunded","resource":{"id":%q,"amount":{"currency_code":"USD","value":%q},"status":"COMPLETED","create_time":"2026-03-14T09:30:00Z","links":[{"href":"https://api.sandbox.paypal.com/v2/payments/refunds/%s","rel":"self","method":"GET"},{"href":"https://api.sandbox.paypal.com/v2/payments/captures/%s","rel":"up","method":"GET"}]},"links":[{"href":"https://api.sandbox.paypal.com/v1/notifications/webhooks-events/%s","rel":"self","method":"GET"}]}`,
		id, value, refundID, value, refundID, captureID, id))
}
