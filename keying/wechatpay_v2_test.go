package keying

import (
	"bytes"
	"crypto/aes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"sort"
	"strings"
	"testing"
)

const wxV2Key = "192006250b4c09247ec02edce69f6a2d"

// wxV2Fields is a payment result notification as WeChat Pay v2's
// documentation shows it.
func wxV2Fields() map[string]string {
	return map[string]string{
		"appid":          "wx2421b1c4370ec43b",
		"attach":         "支付测试",
		"bank_type":      "CFT",
		"fee_type":       "CNY",
		"is_subscribe":   "Y",
		"mch_id":         "10000100",
		"nonce_str":      "5d2b6c2a8db53831f7eda20af46e531c",
		"openid":         "oUpF8uMEb4qRXf22hE3X68TekukE",
		"out_trade_no":   "1409811653",
		"result_code":    "SUCCESS",
		"return_code":    "SUCCESS",
		"sub_mch_id":     "10000100",
		"time_end":       "20140903131540",
		"total_fee":      "1",
		"coupon_fee":     "10",
		"coupon_count":   "1",
		"coupon_type":    "CASH",
		"coupon_id":      "10000",
		"trade_type":     "JSAPI",
		"transaction_id": "1004400740201409030005092168",
	}
}

// wxV2Sign signs as WeChat Pay v2's docs describe: sorted non-empty fields
// but sign, k=v joined by &, then &key=<API key>; MD5 or HMAC-SHA256 (keyed
// by the API key), upper-case hex.
func wxV2Sign(fields map[string]string, key, signType string) map[string]string {
	out := map[string]string{}
	var names []string
	for k, v := range fields {
		out[k] = v
		if k != "sign" && v != "" {
			names = append(names, k)
		}
	}
	if signType == "HMAC-SHA256" {
		out["sign_type"] = signType
		names = append(names, "sign_type")
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, n+"="+out[n])
	}
	s := strings.Join(parts, "&") + "&key=" + key
	var sum []byte
	if signType == "HMAC-SHA256" {
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte(s))
		sum = m.Sum(nil)
	} else {
		d := md5.Sum([]byte(s))
		sum = d[:]
	}
	out["sign"] = strings.ToUpper(hex.EncodeToString(sum))
	return out
}

// wxV2XML writes fields the way WeChat Pay does: <xml> with CDATA text.
func wxV2XML(fields map[string]string) []byte {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("<xml>\n")
	for _, k := range names {
		b.WriteString("  <" + k + "><![CDATA[" + fields[k] + "]]></" + k + ">\n")
	}
	b.WriteString("</xml>")
	return []byte(b.String())
}

func v2req(body []byte) *Request {
	return &Request{Method: http.MethodPost, Header: http.Header{"Content-Type": {"text/xml"}}, Body: body, Now: testNow}
}

func set(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "\x00" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

func TestWechatPayV2(t *testing.T) {
	cfg := Config{Secret: wxV2Key}
	base := wxV2Fields()
	const wantKey = "wechatpay_v2:1004400740201409030005092168"
	md5Signed := wxV2Sign(base, wxV2Key, "MD5")
	cases := []struct {
		name    string
		cfg     Config
		body    []byte
		wantErr error
		key     string
	}{
		{"MD5", cfg, wxV2XML(md5Signed), nil, wantKey},
		{"MD5 with sign_type", cfg, wxV2XML(wxV2Sign(set(base, "sign_type", "MD5"), wxV2Key, "MD5")), nil, wantKey},
		{"HMAC-SHA256", cfg, wxV2XML(wxV2Sign(base, wxV2Key, "HMAC-SHA256")), nil, wantKey},
		{"lower-case sign", cfg, wxV2XML(set(md5Signed, "sign", strings.ToLower(md5Signed["sign"]))), nil, wantKey},
		{"retry with new nonce_str", cfg, wxV2XML(wxV2Sign(set(base, "nonce_str", "abc"), wxV2Key, "MD5")), nil, wantKey},
		{"empty field not signed", cfg, wxV2XML(set(md5Signed, "device_info", "")), nil, wantKey},
		{"other transaction", cfg, wxV2XML(wxV2Sign(set(base, "transaction_id", "42"), wxV2Key, "MD5")), nil, "wechatpay_v2:42"},
		{"tampered fee", cfg, wxV2XML(set(md5Signed, "total_fee", "100")), ErrSignature, ""},
		{"added field", cfg, wxV2XML(set(md5Signed, "device_info", "X")), ErrSignature, ""},
		{"wrong key", cfg, wxV2XML(wxV2Sign(base, "00000000000000000000000000000000", "MD5")), ErrSignature, ""},
		{"sign_type contradicts length", cfg, wxV2XML(set(wxV2Sign(set(base, "sign_type", "HMAC-SHA256"), wxV2Key, "MD5"))), ErrSignature, ""},
		{"odd sign length", cfg, wxV2XML(set(md5Signed, "sign", "ABC")), ErrSignature, ""},
		{"no sign", cfg, wxV2XML(base), ErrSignature, ""},
		{"second root with another id", cfg, append(wxV2XML(md5Signed), "<xml><transaction_id>1</transaction_id></xml>"...), ErrMalformed, ""},
		{"signed without transaction_id", cfg, wxV2XML(wxV2Sign(set(base, "transaction_id", "\x00"), wxV2Key, "MD5")), ErrMalformed, ""},
		{"not XML", cfg, []byte("return_code=SUCCESS"), ErrMalformed, ""},
		{"truncated XML", cfg, wxV2XML(md5Signed)[:40], ErrMalformed, ""},
		{"empty", cfg, nil, ErrMalformed, ""},
		{"verify off", Config{NoVerify: true}, wxV2XML(base), nil, wantKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := mustNew(t, "wechatpay_v2", c.cfg).Verify(v2req(c.body))
			wantErr(t, err, c.wantErr)
			if err != nil {
				return
			}
			if n.Key != c.key {
				t.Fatalf("Key = %q, want %q", n.Key, c.key)
			}
			if v, ok := n.Extra("out_trade_no"); !ok || v != "1409811653" {
				t.Fatalf("Extra(out_trade_no) = %q, %v", v, ok)
			}
			if c.key == wantKey && n.Fingerprint != `["1","SUCCESS"]` {
				t.Fatalf("Fingerprint = %s", n.Fingerprint)
			}
		})
	}
}

// wxV2RefundInfo is a decrypted refund notification as WeChat Pay v2's
// documentation lists its fields.
func wxV2RefundInfo(status string) string {
	return "<root>" +
		"<out_refund_no><![CDATA[131811191610442717309]]></out_refund_no>" +
		"<out_trade_no><![CDATA[71106718111915575302817]]></out_trade_no>" +
		"<refund_account><![CDATA[REFUND_SOURCE_RECHARGE_FUNDS]]></refund_account>" +
		"<refund_fee><![CDATA[3960]]></refund_fee>" +
		"<refund_id><![CDATA[50000408942018111907145868882]]></refund_id>" +
		"<refund_recv_accout><![CDATA[支付用户零钱]]></refund_recv_accout>" +
		"<refund_request_source><![CDATA[API]]></refund_request_source>" +
		"<refund_status><![CDATA[" + status + "]]></refund_status>" +
		"<settlement_refund_fee><![CDATA[3960]]></settlement_refund_fee>" +
		"<settlement_total_fee><![CDATA[3960]]></settlement_total_fee>" +
		"<success_time><![CDATA[2018-11-19 16:24:13]]></success_time>" +
		"<total_fee><![CDATA[3960]]></total_fee>" +
		"<transaction_id><![CDATA[4200000215201811190261405420]]></transaction_id>" +
		"</root>"
}

// wxV2ReqInfo encrypts as WeChat Pay v2 does: AES-256-ECB keyed by the
// lower-case hex MD5 of the API key, PKCS #7 padding, base64.
func wxV2ReqInfo(t testing.TB, apiKey, plain string) string {
	t.Helper()
	sum := md5.Sum([]byte(apiKey))
	block, err := aes.NewCipher([]byte(hex.EncodeToString(sum[:])))
	if err != nil {
		t.Fatal(err)
	}
	n := aes.BlockSize - len(plain)%aes.BlockSize
	padded := append([]byte(plain), bytes.Repeat([]byte{byte(n)}, n)...)
	ct := make([]byte, len(padded))
	for i := 0; i < len(padded); i += aes.BlockSize {
		block.Encrypt(ct[i:i+aes.BlockSize], padded[i:i+aes.BlockSize])
	}
	return base64.StdEncoding.EncodeToString(ct)
}

func wxV2Refund(t testing.TB, apiKey, nonce, plain string) []byte {
	return wxV2XML(map[string]string{
		"return_code": "SUCCESS",
		"appid":       "wx2421b1c4370ec43b",
		"mch_id":      "10000100",
		"nonce_str":   nonce,
		"req_info":    wxV2ReqInfo(t, apiKey, plain),
	})
}

func TestWechatPayV2Refund(t *testing.T) {
	cfg := Config{Secret: wxV2Key}
	const key = "wechatpay_v2:refund:50000408942018111907145868882:SUCCESS"
	cases := []struct {
		name    string
		cfg     Config
		body    []byte
		wantErr error
		key     string
	}{
		{"refund", cfg, wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS")), nil, key},
		{"retry", cfg, wxV2Refund(t, wxV2Key, "n2", wxV2RefundInfo("SUCCESS")), nil, key},
		{"new status", cfg, wxV2Refund(t, wxV2Key, "n3", wxV2RefundInfo("REFUNDCLOSE")), nil, "wechatpay_v2:refund:50000408942018111907145868882:REFUNDCLOSE"},
		{"verify off with secret", Config{Secret: wxV2Key, NoVerify: true}, wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS")), nil, key},
		{"other API key", cfg, wxV2Refund(t, "ffffffffffffffffffffffffffffffff", "n1", wxV2RefundInfo("SUCCESS")), ErrSignature, ""},
		{"decrypts to something else", cfg, wxV2Refund(t, wxV2Key, "n1", "<root><a>1</a></root>"), ErrSignature, ""},
		{"decrypts to garbage", cfg, wxV2Refund(t, wxV2Key, "n1", "not xml"), ErrSignature, ""},
		{"req_info not base64", cfg, []byte("<xml><req_info>%%%</req_info></xml>"), ErrSignature, ""},
		{"req_info not whole blocks", cfg, []byte("<xml><req_info>AAAA</req_info></xml>"), ErrSignature, ""},
		{"no secret", Config{NoVerify: true}, wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS")), ErrMalformed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := mustNew(t, "wechatpay_v2", c.cfg).Verify(v2req(c.body))
			wantErr(t, err, c.wantErr)
			if err != nil {
				return
			}
			if n.Key != c.key {
				t.Fatalf("Key = %q, want %q", n.Key, c.key)
			}
			if n.Fingerprint != `["3960","3960"]` {
				t.Fatalf("Fingerprint = %s", n.Fingerprint)
			}
			if v, ok := n.Extra("out_refund_no"); !ok || v != "131811191610442717309" {
				t.Fatalf("Extra(out_refund_no) = %q, %v", v, ok)
			}
			if v, ok := n.Extra("mch_id"); !ok || v != "10000100" {
				t.Fatalf("Extra(mch_id) = %q, %v", v, ok)
			}
		})
	}
}

func TestWechatPayV2Success(t *testing.T) {
	p := mustNew(t, "wechatpay_v2", Config{NoVerify: true})
	cases := []struct {
		status int
		body   string
		want   bool
	}{
		{200, `<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>`, true},
		{200, `<xml><return_code>SUCCESS</return_code></xml>`, true},
		{200, `<xml><return_code><![CDATA[FAIL]]></return_code></xml>`, false},
		{200, `SUCCESS`, false},
		{200, ``, false},
		{500, `<xml><return_code>SUCCESS</return_code></xml>`, false},
	}
	for _, c := range cases {
		if got := p.Success(c.status, http.Header{}, []byte(c.body)); got != c.want {
			t.Errorf("Success(%d, %q) = %v, want %v", c.status, c.body, got, c.want)
		}
	}
}

func FuzzWechatPayV2(f *testing.F) {
	f.Add(wxV2XML(wxV2Sign(wxV2Fields(), wxV2Key, "MD5")))
	f.Add(wxV2XML(wxV2Sign(wxV2Fields(), wxV2Key, "HMAC-SHA256")))
	f.Add([]byte(`<xml><sign>x</sign><a><b>c</b></a></xml><xml/>`))
	f.Add([]byte(`<?xml version="1.0" encoding="GBK"?><xml></xml>`))
	f.Add(wxV2Refund(f, wxV2Key, "n", wxV2RefundInfo("SUCCESS")))
	f.Add([]byte(`<xml><req_info>AAAAAAAAAAAAAAAAAAAAAA==</req_info></xml>`))
	verifying := mustNew(f, "wechatpay_v2", Config{Secret: wxV2Key})
	open := mustNew(f, "wechatpay_v2", Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range []Platform{verifying, open} {
			n, err := p.Verify(v2req(body))
			if err != nil {
				if !isSigOrMalformed(err) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				continue
			}
			if n.Key == "wechatpay_v2:" {
				t.Fatal("empty transaction_id accepted")
			}
		}
		p := open.(*WechatPayV2)
		p.Success(200, nil, body)
	})
}
