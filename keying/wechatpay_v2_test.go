package keying

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
)

const wxV2Key = "192006250b4c09247ec02edce69f6a2d"

// wxV2Fields is a payment result notification as WeChat Pay v2's
// documentation shows it, with nonce_str and time_end fixed, a coupon and
// no cash_fee (the fields the fuzz seeds built from it have always had).
func wxV2Fields() map[string]string {
	return set(platformtest.WechatPayV2Payment("1004400740201409030005092168", "1409811653", 1),
		"nonce_str", "5d2b6c2a8db53831f7eda20af46e531c", "time_end", "20140903131540", "cash_fee", "\x00",
		"sub_mch_id", "10000100", "coupon_fee", "10", "coupon_count", "1", "coupon_type", "CASH", "coupon_id", "10000")
}

// The API v2 signers: MD5 (the default) and HMAC-SHA256.
var (
	wxV2MD5  = platformtest.WechatPayV2{APIKey: wxV2Key}
	wxV2HMAC = platformtest.WechatPayV2{APIKey: wxV2Key, SignType: "HMAC-SHA256"}
)

// wxV2XML writes fields as WeChat Pay's documentation lays them out: <xml>,
// CDATA text, one element a line.
var wxV2XML = platformtest.WechatPayV2XMLIndented

func v2req(body []byte) *Request {
	return &Request{Method: http.MethodPost, Header: http.Header{"Content-Type": {"text/xml"}}, Body: body, Now: testNow}
}

// smuggle inserts extra elements just before the closing </xml>.
func smuggle(doc []byte, extra string) []byte {
	s := string(doc)
	i := strings.LastIndex(s, "</xml>")
	return []byte(s[:i] + extra + s[i:])
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
	const wantKey = "10000100:1004400740201409030005092168:paid"
	md5Signed := wxV2MD5.Sign(base)
	cases := []verifyCase{
		{"MD5", cfg, v2req(wxV2XML(md5Signed)), nil, wantKey},
		{"MD5 with sign_type", cfg, v2req(wxV2XML(wxV2MD5.Sign(set(base, "sign_type", "MD5")))), nil, wantKey},
		{"HMAC-SHA256", cfg, v2req(wxV2XML(wxV2HMAC.Sign(base))), nil, wantKey},
		{"lower-case sign", cfg, v2req(wxV2XML(set(md5Signed, "sign", strings.ToLower(md5Signed["sign"])))), nil, wantKey},
		{"retry with new nonce_str", cfg, v2req(wxV2XML(wxV2MD5.Sign(set(base, "nonce_str", "abc")))), nil, wantKey},
		{"empty field not signed", cfg, v2req(wxV2XML(set(md5Signed, "device_info", ""))), nil, wantKey},
		{"other transaction", cfg, v2req(wxV2XML(wxV2MD5.Sign(set(base, "transaction_id", "42")))), nil, "10000100:42:paid"},
		{"tampered fee", cfg, v2req(wxV2XML(set(md5Signed, "total_fee", "100"))), ErrSignature, ""},
		{"added field", cfg, v2req(wxV2XML(set(md5Signed, "device_info", "X"))), ErrSignature, ""},
		{"wrong key", cfg, v2req(wxV2XML(platformtest.WechatPayV2{APIKey: "00000000000000000000000000000000"}.Sign(base))), ErrSignature, ""},
		{"sign_type contradicts length", cfg, v2req(wxV2XML(set(wxV2MD5.Sign(set(base, "sign_type", "HMAC-SHA256"))))), ErrSignature, ""},
		{"odd sign length", cfg, v2req(wxV2XML(set(md5Signed, "sign", "ABC"))), ErrSignature, ""},
		{"no sign", cfg, v2req(wxV2XML(base)), ErrSignature, ""},
		{"second root with another id", cfg, v2req(append(wxV2XML(md5Signed), "<xml><transaction_id>1</transaction_id></xml>"...)), ErrSignature, ""},
		{"smuggled second out_trade_no and total_fee", cfg, v2req(smuggle(wxV2XML(md5Signed), "<out_trade_no>ATTACKER</out_trade_no><total_fee>100000</total_fee>")), ErrSignature, ""},
		{"smuggled element inside total_fee", cfg, v2req([]byte(strings.Replace(string(wxV2XML(md5Signed)), "<total_fee><![CDATA[1]]></total_fee>", "<total_fee>1<x>00000</x></total_fee>", 1))), ErrSignature, ""},
		{"smuggled empty (unsigned) duplicate", cfg, v2req(smuggle(wxV2XML(md5Signed), "<total_fee></total_fee>")), ErrSignature, ""},
		{"DOCTYPE", cfg, v2req(append([]byte("<!DOCTYPE xml>"), wxV2XML(md5Signed)...)), ErrSignature, ""},
		{"comment in a value", cfg, v2req([]byte(strings.Replace(string(wxV2XML(md5Signed)), "<total_fee><![CDATA[1]]>", "<total_fee><![CDATA[1]]><!-- -->", 1))), ErrSignature, ""},
		{"text after the root", cfg, v2req(append(wxV2XML(md5Signed), "<total_fee>100000</total_fee>"...)), ErrSignature, ""},
		{"pinned mch_id", Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}, v2req(wxV2XML(md5Signed)), nil, wantKey},
		{"another merchant's notification", Config{Secret: wxV2Key, MchIDs: []string{"1900000109"}}, v2req(wxV2XML(md5Signed)), ErrSignature, ""},
		{"signed without transaction_id", cfg, v2req(wxV2XML(wxV2MD5.Sign(set(base, "transaction_id", "\x00")))), ErrMalformed, ""},
		{"not XML", cfg, v2req([]byte("return_code=SUCCESS")), ErrMalformed, ""},
		{"truncated XML", cfg, v2req(wxV2XML(md5Signed)[:40]), ErrMalformed, ""},
		{"empty", cfg, v2req(nil), ErrMalformed, ""},
		{"verify off", Config{NoVerify: true}, v2req(wxV2XML(base)), nil, wantKey},
	}
	runVerifyCases(t, "wechatpay_v2", cases, func(t *testing.T, c verifyCase, n *Notification) {
		if v, ok := n.Extra("out_trade_no"); !ok || v != "1409811653" {
			t.Fatalf("Extra(out_trade_no) = %q, %v", v, ok)
		}
		if c.key == wantKey && n.Fingerprint != `["1","SUCCESS"]` {
			t.Fatalf("Fingerprint = %s", n.Fingerprint)
		}
	})
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

// wxV2Refund is a refund notification with nonce_str nonce whose req_info
// is plain encrypted as WeChat Pay v2 does: AES-256-ECB keyed by the
// lower-case hex MD5 of apiKey.
func wxV2Refund(t testing.TB, apiKey, nonce, plain string) []byte {
	t.Helper()
	return wxV2XML(platformtest.WechatPayV2{APIKey: apiKey}.RefundFields(t, plain, nonce))
}

func TestWechatPayV2Refund(t *testing.T) {
	cfg := Config{Secret: wxV2Key}
	const key = "10000100:4200000215201811190261405420:refund:131811191610442717309"
	cases := []verifyCase{
		{"refund", cfg, v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS"))), nil, key},
		{"retry", cfg, v2req(wxV2Refund(t, wxV2Key, "n2", wxV2RefundInfo("SUCCESS"))), nil, key},
		{"new status", cfg, v2req(wxV2Refund(t, wxV2Key, "n3", wxV2RefundInfo("REFUNDCLOSE"))), nil, "10000100:4200000215201811190261405420:refund:131811191610442717309:closed"},
		{"verify off with secret", Config{Secret: wxV2Key, NoVerify: true}, v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS"))), nil, key},
		{"other API key", cfg, v2req(wxV2Refund(t, "ffffffffffffffffffffffffffffffff", "n1", wxV2RefundInfo("SUCCESS"))), ErrSignature, ""},
		{"decrypts to something else", cfg, v2req(wxV2Refund(t, wxV2Key, "n1", "<root><a>1</a></root>")), ErrSignature, ""},
		{"decrypts to garbage", cfg, v2req(wxV2Refund(t, wxV2Key, "n1", "not xml")), ErrSignature, ""},
		{"req_info not base64", cfg, v2req([]byte("<xml><req_info>%%%</req_info></xml>")), ErrSignature, ""},
		{"req_info not whole blocks", cfg, v2req([]byte("<xml><req_info>AAAA</req_info></xml>")), ErrSignature, ""},
		{"no secret", Config{NoVerify: true}, v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS"))), ErrMalformed, ""},
	}
	runVerifyCases(t, "wechatpay_v2", cases, func(t *testing.T, _ verifyCase, n *Notification) {
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

func TestWechatPayV2Success(t *testing.T) {
	checkSuccess(t, mustNew(t, "wechatpay_v2", Config{NoVerify: true}), http.Header{}, []successCase{
		{200, `<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>`, true},
		{200, `<xml><return_code>SUCCESS</return_code></xml>`, true},
		{200, `<xml><return_code><![CDATA[FAIL]]></return_code></xml>`, false},
		{200, `SUCCESS`, false},
		{200, ``, false},
		{500, `<xml><return_code>SUCCESS</return_code></xml>`, false},
	})
}

func FuzzWechatPayV2(f *testing.F) {
	f.Add(wxV2XML(wxV2MD5.Sign(wxV2Fields())))
	f.Add(wxV2XML(wxV2HMAC.Sign(wxV2Fields())))
	f.Add([]byte(`<xml><sign>x</sign><a><b>c</b></a></xml><xml/>`))
	f.Add([]byte(`<?xml version="1.0" encoding="GBK"?><xml></xml>`))
	f.Add(wxV2Refund(f, wxV2Key, "n", wxV2RefundInfo("SUCCESS")))
	f.Add([]byte(`<xml><req_info>AAAAAAAAAAAAAAAAAAAAAA==</req_info></xml>`))
	verifying := mustNew(f, "wechatpay_v2", Config{Secret: wxV2Key})
	open := mustNew(f, "wechatpay_v2", Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzVerify(t, v2req(body), func(n *Notification) {
			if n.Key == "" {
				t.Fatal("empty transaction_id accepted")
			}
		}, verifying, open)
		// What verifies is what a backend's XML binding reads: every
		// field it sees once, with the value the signature covered.
		n, err := verifying.Verify(v2req(body))
		if err != nil {
			return
		}
		other, err := otherXMLReading(body)
		if err != nil {
			t.Fatalf("verified a body encoding/xml cannot read: %v", err)
		}
		seen := map[string]bool{}
		for _, kv := range other {
			if seen[kv[0]] {
				t.Fatalf("verified a body with %s twice", kv[0])
			}
			seen[kv[0]] = true
			if v, ok := n.Extra(kv[0]); !ok || v != kv[1] && kv[0] != "req_info" {
				t.Fatalf("field %s: verified %q, a backend reads %q", kv[0], v, kv[1])
			}
		}
		p := open.(*WechatPayV2)
		p.Success(200, nil, body)
	})
}
