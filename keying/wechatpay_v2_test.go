package keying

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
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
