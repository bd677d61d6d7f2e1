package signer

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
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

// WechatPayV2XML writes fields the way WeChat Pay does: <xml> with each
// value in CDATA, sorted by name.
func WechatPayV2XML(fields map[string]string) []byte {
	var b strings.Builder
	b.WriteString("<xml>")
	for _, k := range sortedKeys(fields) {
		b.WriteString("<" + k + "><![CDATA[" + fields[k] + "]]></" + k + ">")
	}
	b.WriteString("</xml>")
	return []byte(b.String())
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
