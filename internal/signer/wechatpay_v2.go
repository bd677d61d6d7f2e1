package signer

import (
	"bytes"
	"crypto/aes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// WechatPayV2 signs WeChat Pay API v2 notifications (XML).
type WechatPayV2 struct {
	// APIKey is the merchant's API v2 key (32 characters).
	APIKey string
	// SignType is "MD5" (the default) or "HMAC-SHA256".
	SignType string
}

// WechatPayV2Payment is a payment result notification as WeChat Pay v2's
// documentation shows it; nonce_str is fresh on each call.
func WechatPayV2Payment(transactionID, outTradeNo string, totalFee int) map[string]string {
	return map[string]string{
		"appid":          "wx2421b1c4370ec43b",
		"attach":         "支付测试",
		"bank_type":      "CFT",
		"fee_type":       "CNY",
		"is_subscribe":   "Y",
		"mch_id":         "10000100",
		"nonce_str":      Nonce(32),
		"openid":         "oUpF8uMEb4qRXf22hE3X68TekukE",
		"out_trade_no":   outTradeNo,
		"result_code":    "SUCCESS",
		"return_code":    "SUCCESS",
		"time_end":       time.Now().Format("20060102150405"),
		"total_fee":      strconv.Itoa(totalFee),
		"cash_fee":       strconv.Itoa(totalFee),
		"trade_type":     "JSAPI",
		"transaction_id": transactionID,
	}
}

// Sign returns a copy of fields with sign (and sign_type for HMAC-SHA256)
// set: the non-empty fields but sign, sorted, k=v joined by "&", then
// "&key=<API key>"; MD5, or HMAC-SHA256 keyed by the API key; upper-case hex.
func (w WechatPayV2) Sign(fields map[string]string) map[string]string {
	out := make(map[string]string, len(fields)+2)
	for k, v := range fields {
		out[k] = v
	}
	delete(out, "sign")
	if w.SignType == "HMAC-SHA256" {
		out["sign_type"] = "HMAC-SHA256"
	}
	names := make([]string, 0, len(out))
	for k, v := range out {
		if v != "" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + "=" + out[k]
	}
	s := strings.Join(parts, "&") + "&key=" + w.APIKey
	var sum []byte
	if w.SignType == "HMAC-SHA256" {
		m := hmac.New(sha256.New, []byte(w.APIKey))
		m.Write([]byte(s))
		sum = m.Sum(nil)
	} else {
		d := md5.Sum([]byte(s))
		sum = d[:]
	}
	out["sign"] = strings.ToUpper(hex.EncodeToString(sum))
	return out
}

// Body is the signed notification as XML.
func (w WechatPayV2) Body(fields map[string]string) []byte {
	return WechatPayV2XML(w.Sign(fields))
}

// Refund is a refund notification: no sign, the refund in req_info,
// encrypted with AES-256-ECB under the lower-case hex MD5 of the API key.
func (w WechatPayV2) Refund(info map[string]string) ([]byte, error) {
	fields, err := w.RefundFields(string(cdataXML("root", info, "")), Nonce(32))
	if err != nil {
		return nil, err
	}
	return WechatPayV2XML(fields), nil
}

// RefundFields are the fields of a refund notification whose req_info
// encrypts plain as it is (Refund's <root> document, or anything else a
// verifier must refuse) and whose nonce_str is nonce.
func (w WechatPayV2) RefundFields(plain, nonce string) (map[string]string, error) {
	sum := md5.Sum([]byte(w.APIKey))
	block, err := aes.NewCipher([]byte(hex.EncodeToString(sum[:])))
	if err != nil {
		return nil, fmt.Errorf("signer: refund key: %w", err)
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

// WechatPayV2RefundInfo is the decrypted req_info of a refund notification.
func WechatPayV2RefundInfo(transactionID, outTradeNo, refundID, refundStatus string, refundFee, totalFee int) map[string]string {
	return map[string]string{
		"out_refund_no":         "R" + outTradeNo,
		"out_trade_no":          outTradeNo,
		"refund_account":        "REFUND_SOURCE_RECHARGE_FUNDS",
		"refund_fee":            strconv.Itoa(refundFee),
		"refund_id":             refundID,
		"refund_recv_accout":    "支付用户零钱",
		"refund_request_source": "API",
		"refund_status":         refundStatus,
		"settlement_refund_fee": strconv.Itoa(refundFee),
		"settlement_total_fee":  strconv.Itoa(totalFee),
		"success_time":          time.Now().Format(time.DateTime),
		"total_fee":             strconv.Itoa(totalFee),
		"transaction_id":        transactionID,
	}
}

// WechatPayV2XML writes fields the way WeChat Pay does: <xml> with each
// value in CDATA.
func WechatPayV2XML(fields map[string]string) []byte {
	return cdataXML("xml", fields, "")
}

// WechatPayV2XMLIndented is WechatPayV2XML laid out as WeChat Pay's
// documentation shows it: one element a line, indented by two spaces.
func WechatPayV2XMLIndented(fields map[string]string) []byte {
	return cdataXML("xml", fields, "\n  ")
}

// cdataXML writes fields, sorted by name, as CDATA elements under root,
// each after indent; with an indent, the closing tag has a line of its own.
func cdataXML(root string, fields map[string]string, indent string) []byte {
	var b strings.Builder
	b.WriteString("<" + root + ">")
	for _, k := range sortedKeys(fields) {
		b.WriteString(indent + "<" + k + "><![CDATA[" + fields[k] + "]]></" + k + ">")
	}
	if indent != "" {
		b.WriteString("\n")
	}
	b.WriteString("</" + root + ">")
	return []byte(b.String())
}

// WechatPayV2Answer is the XML a merchant answers with: return_code
// SUCCESS (handled) or FAIL (WeChat Pay retries).
func WechatPayV2Answer(returnCode, returnMsg string) string {
	return "<xml><return_code><![CDATA[" + returnCode + "]]></return_code><return_msg><![CDATA[" + returnMsg + "]]></return_msg></xml>"
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
