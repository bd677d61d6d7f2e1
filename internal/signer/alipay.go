package signer

import (
	"crypto"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// Alipay signs notifications as Alipay does for the asynchronous notify (a
// form POST to notify_url) and the browser's synchronous return (a GET query
// on return_url).
type Alipay struct {
	// Key is the key Alipay signs with; its public half is what the
	// merchant configures as Alipay's public key.
	Key *rsa.PrivateKey
	// SignType is "RSA2" (SHA256withRSA, the default) or "RSA" (SHA1withRSA).
	SignType string
	// Charset is "utf-8" (the default) or "GBK": with GBK every value is
	// converted to GBK bytes, which are what is signed and percent-encoded.
	Charset string
}

// AlipayNotify is an asynchronous trade_status_sync notify for one order, with
// the parameters of Alipay's documented example; notify_time is now and
// notify_id fresh, as on every retry.
func AlipayNotify(appID, outTradeNo, tradeNo, tradeStatus, totalAmount string) url.Values {
	now := time.Now().In(time.FixedZone("CST", 8*3600))
	return url.Values{
		"gmt_create":       {now.Add(-time.Minute).Format(time.DateTime)},
		"charset":          {"utf-8"},
		"seller_email":     {"merchant@example.com"},
		"subject":          {"订单 Order " + outTradeNo},
		"buyer_id":         {"2088102122524333"},
		"invoice_amount":   {totalAmount},
		"notify_id":        {"2026" + Nonce(30)},
		"fund_bill_list":   {`[{"amount":"` + totalAmount + `","fundChannel":"ALIPAYACCOUNT"}]`},
		"notify_type":      {"trade_status_sync"},
		"trade_status":     {tradeStatus},
		"receipt_amount":   {totalAmount},
		"app_id":           {appID},
		"buyer_pay_amount": {totalAmount},
		"seller_id":        {"2088102177296610"},
		"gmt_payment":      {now.Add(-50 * time.Second).Format(time.DateTime)},
		"notify_time":      {now.Format(time.DateTime)},
		"version":          {"1.0"},
		"out_trade_no":     {outTradeNo},
		"total_amount":     {totalAmount},
		"trade_no":         {tradeNo},
		"auth_app_id":      {appID},
		"buyer_logon_id":   {"csq***@sandbox.com"},
		"point_amount":     {"0.00"},
	}
}

// Sign returns a copy of params with sign and sign_type set, as Alipay's
// documentation describes: parameters other than sign, sign_type and empty
// ones, sorted by name, k=v joined by "&" (values not URL-encoded), signed
// with SHA256withRSA (RSA2) or SHA1withRSA (RSA), base64.
func (a Alipay) Sign(params url.Values) (url.Values, error) {
	out := url.Values{}
	for k, vs := range params {
		out[k] = append([]string(nil), vs...)
	}
	if strings.EqualFold(a.Charset, "GBK") {
		enc := simplifiedchinese.GBK.NewEncoder()
		for k, vs := range out {
			for i, v := range vs {
				g, err := enc.String(v)
				if err != nil {
					return nil, fmt.Errorf("signer: %s=%q has no GBK form: %w", k, v, err)
				}
				vs[i] = g
			}
		}
		out.Set("charset", "GBK")
	} else if a.Charset != "" {
		out.Set("charset", a.Charset)
	}
	signType, h := "RSA2", crypto.SHA256
	if a.SignType == "RSA" {
		signType, h = "RSA", crypto.SHA1
	}
	sig, err := SignPKCS1(a.Key, h, AlipayContent(out))
	if err != nil {
		return nil, err
	}
	out.Set("sign", base64.StdEncoding.EncodeToString(sig))
	out.Set("sign_type", signType)
	return out, nil
}

// Body is Sign's result form-encoded, the body of a notify POST
// (Content-Type application/x-www-form-urlencoded).
func (a Alipay) Body(params url.Values) (string, error) {
	signed, err := a.Sign(params)
	if err != nil {
		return "", err
	}
	return signed.Encode(), nil
}

// AlipayContent is the string Alipay signs for params.
func AlipayContent(params url.Values) []byte {
	var names []string
	for k, vs := range params {
		if k == "sign" || k == "sign_type" || len(vs) == 0 || vs[0] == "" {
			continue
		}
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + "=" + params[k][0]
	}
	return []byte(strings.Join(parts, "&"))
}
