package wechatpayv2

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
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

func v2req(body []byte) *keying.Request {
	return &keying.Request{Method: http.MethodPost, Header: http.Header{"Content-Type": {"text/xml"}}, Body: body, Now: presettest.Now}
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
	cfg := Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}
	base := wxV2Fields()
	const wantKey = "10000100:1004400740201409030005092168:paid"
	md5Signed := wxV2MD5.Sign(base)
	cases := []presettest.VerifyCase[Config]{
		{Name: "MD5", Cfg: cfg, Req: v2req(wxV2XML(md5Signed)), WantErr: nil, Key: wantKey},
		{Name: "MD5 with sign_type", Cfg: cfg, Req: v2req(wxV2XML(wxV2MD5.Sign(set(base, "sign_type", "MD5")))), WantErr: nil, Key: wantKey},
		{Name: "HMAC-SHA256", Cfg: cfg, Req: v2req(wxV2XML(wxV2HMAC.Sign(base))), WantErr: nil, Key: wantKey},
		{Name: "lower-case sign", Cfg: cfg, Req: v2req(wxV2XML(set(md5Signed, "sign", strings.ToLower(md5Signed["sign"])))), WantErr: nil, Key: wantKey},
		{Name: "retry with new nonce_str", Cfg: cfg, Req: v2req(wxV2XML(wxV2MD5.Sign(set(base, "nonce_str", "abc")))), WantErr: nil, Key: wantKey},
		{Name: "empty field not signed", Cfg: cfg, Req: v2req(wxV2XML(set(md5Signed, "device_info", ""))), WantErr: nil, Key: wantKey},
		{Name: "other transaction", Cfg: cfg, Req: v2req(wxV2XML(wxV2MD5.Sign(set(base, "transaction_id", "42")))), WantErr: nil, Key: "10000100:42:paid"},
		{Name: "tampered fee", Cfg: cfg, Req: v2req(wxV2XML(set(md5Signed, "total_fee", "100"))), WantErr: keying.ErrSignature, Key: ""},
		{Name: "added field", Cfg: cfg, Req: v2req(wxV2XML(set(md5Signed, "device_info", "X"))), WantErr: keying.ErrSignature, Key: ""},
		{Name: "wrong key", Cfg: cfg, Req: v2req(wxV2XML(platformtest.WechatPayV2{APIKey: "00000000000000000000000000000000"}.Sign(base))), WantErr: keying.ErrSignature, Key: ""},
		{Name: "sign_type contradicts length", Cfg: cfg, Req: v2req(wxV2XML(set(wxV2MD5.Sign(set(base, "sign_type", "HMAC-SHA256"))))), WantErr: keying.ErrSignature, Key: ""},
		{Name: "odd sign length", Cfg: cfg, Req: v2req(wxV2XML(set(md5Signed, "sign", "ABC"))), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no sign", Cfg: cfg, Req: v2req(wxV2XML(base)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "second root with another id", Cfg: cfg, Req: v2req(append(wxV2XML(md5Signed), "<xml><transaction_id>1</transaction_id></xml>"...)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "smuggled second out_trade_no and total_fee", Cfg: cfg, Req: v2req(smuggle(wxV2XML(md5Signed), "<out_trade_no>ATTACKER</out_trade_no><total_fee>100000</total_fee>")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "smuggled element inside total_fee", Cfg: cfg, Req: v2req([]byte(strings.Replace(string(wxV2XML(md5Signed)), "<total_fee><![CDATA[1]]></total_fee>", "<total_fee>1<x>00000</x></total_fee>", 1))), WantErr: keying.ErrSignature, Key: ""},
		{Name: "smuggled empty (unsigned) duplicate", Cfg: cfg, Req: v2req(smuggle(wxV2XML(md5Signed), "<total_fee></total_fee>")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "DOCTYPE", Cfg: cfg, Req: v2req(append([]byte("<!DOCTYPE xml>"), wxV2XML(md5Signed)...)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "comment in a value", Cfg: cfg, Req: v2req([]byte(strings.Replace(string(wxV2XML(md5Signed)), "<total_fee><![CDATA[1]]>", "<total_fee><![CDATA[1]]><!-- -->", 1))), WantErr: keying.ErrSignature, Key: ""},
		{Name: "text after the root", Cfg: cfg, Req: v2req(append(wxV2XML(md5Signed), "<total_fee>100000</total_fee>"...)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "pinned mch_id", Cfg: Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}, Req: v2req(wxV2XML(md5Signed)), WantErr: nil, Key: wantKey},
		{Name: "another merchant's notification", Cfg: Config{Secret: wxV2Key, MchIDs: []string{"1900000109"}}, Req: v2req(wxV2XML(md5Signed)), WantErr: keying.ErrMerchant, Key: ""},
		{Name: "signed without mch_id, pinned", Cfg: Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}, Req: v2req(wxV2XML(wxV2MD5.Sign(set(base, "mch_id", "\x00", "sub_mch_id", "\x00")))), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "signed without transaction_id", Cfg: cfg, Req: v2req(wxV2XML(wxV2MD5.Sign(set(base, "transaction_id", "\x00")))), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "not XML", Cfg: cfg, Req: v2req([]byte("return_code=SUCCESS")), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "truncated XML", Cfg: cfg, Req: v2req(wxV2XML(md5Signed)[:40]), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "empty", Cfg: cfg, Req: v2req(nil), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "verify off", Cfg: Config{NoVerify: true}, Req: v2req(wxV2XML(base)), WantErr: nil, Key: wantKey},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if v, ok := n.Extra("out_trade_no"); !ok || v != "1409811653" {
			t.Fatalf("Extra(out_trade_no) = %q, %v", v, ok)
		}
		if c.Key == wantKey && n.Fingerprint != `["1","SUCCESS"]` {
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
	cfg := Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}
	const key = "10000100:4200000215201811190261405420:refund:131811191610442717309"
	cases := []presettest.VerifyCase[Config]{
		{Name: "refund", Cfg: cfg, Req: v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS"))), WantErr: nil, Key: key},
		{Name: "retry", Cfg: cfg, Req: v2req(wxV2Refund(t, wxV2Key, "n2", wxV2RefundInfo("SUCCESS"))), WantErr: nil, Key: key},
		{Name: "new status", Cfg: cfg, Req: v2req(wxV2Refund(t, wxV2Key, "n3", wxV2RefundInfo("REFUNDCLOSE"))), WantErr: nil, Key: "10000100:4200000215201811190261405420:refund:131811191610442717309:closed"},
		{Name: "verify off with secret", Cfg: Config{Secret: wxV2Key, NoVerify: true}, Req: v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS"))), WantErr: nil, Key: key},
		{Name: "other API key", Cfg: cfg, Req: v2req(wxV2Refund(t, "ffffffffffffffffffffffffffffffff", "n1", wxV2RefundInfo("SUCCESS"))), WantErr: keying.ErrSignature, Key: ""},
		{Name: "decrypts to something else", Cfg: cfg, Req: v2req(wxV2Refund(t, wxV2Key, "n1", "<root><a>1</a></root>")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "decrypts to garbage", Cfg: cfg, Req: v2req(wxV2Refund(t, wxV2Key, "n1", "not xml")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "req_info not base64", Cfg: cfg, Req: v2req([]byte("<xml><req_info>%%%</req_info></xml>")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "req_info not whole blocks", Cfg: cfg, Req: v2req([]byte("<xml><req_info>AAAA</req_info></xml>")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no secret", Cfg: Config{NoVerify: true}, Req: v2req(wxV2Refund(t, wxV2Key, "n1", wxV2RefundInfo("SUCCESS"))), WantErr: keying.ErrMalformed, Key: ""},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, _ presettest.VerifyCase[Config], n *keying.Notification) {
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
	presettest.CheckSuccess(t, presettest.MustNew(t, New, Config{NoVerify: true}), http.Header{}, []presettest.SuccessCase{
		{Status: 200, Body: `<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>`, Want: true},
		{Status: 200, Body: `<xml><return_code>SUCCESS</return_code></xml>`, Want: true},
		{Status: 200, Body: `<xml><return_code><![CDATA[FAIL]]></return_code></xml>`, Want: false},
		{Status: 200, Body: `SUCCESS`, Want: false},
		{Status: 200, Body: ``, Want: false},
		{Status: 500, Body: `<xml><return_code>SUCCESS</return_code></xml>`, Want: false},
	})
}

func FuzzWechatPayV2(f *testing.F) {
	f.Add(wxV2XML(wxV2MD5.Sign(wxV2Fields())))
	f.Add(wxV2XML(wxV2HMAC.Sign(wxV2Fields())))
	f.Add([]byte(`<xml><sign>x</sign><a><b>c</b></a></xml><xml/>`))
	f.Add([]byte(`<?xml version="1.0" encoding="GBK"?><xml></xml>`))
	f.Add(wxV2Refund(f, wxV2Key, "n", wxV2RefundInfo("SUCCESS")))
	f.Add([]byte(`<xml><req_info>AAAAAAAAAAAAAAAAAAAAAA==</req_info></xml>`))
	verifying := presettest.MustNew(f, New, Config{Secret: wxV2Key, MchIDs: []string{"10000100"}})
	open := presettest.MustNew(f, New, Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte) {
		presettest.FuzzVerify(t, v2req(body), func(n *keying.Notification) {
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
		other, err := presettest.OtherXMLReading(body)
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

// TestConcurrentVerify runs the preset from several goroutines at once
// (meaningful under -race): a Platform is shared by all requests of a route.
func TestConcurrentVerify(t *testing.T) {
	presettest.ConcurrentVerify(t, presettest.MustNew(t, New, Config{Secret: wxV2Key, MchIDs: []string{"10000100"}}), v2req(wxV2XML(wxV2MD5.Sign(wxV2Fields()))))
}

// TestWechatPayV2NeedsOneMchID: a verifying route names exactly one mchid,
// the merchant of its orders' keys, since a refund notification signs no
// merchant; verify off takes any number.
func TestWechatPayV2NeedsOneMchID(t *testing.T) {
	for _, ids := range [][]string{nil, {"10000100", "1900000109"}} {
		_, err := New(Config{Secret: wxV2Key, MchIDs: ids})
		if err == nil || !strings.Contains(err.Error(), "name exactly one mchid") || !strings.Contains(err.Error(), "refund notification signs no merchant") {
			t.Fatalf("New with mchid %v = %v, want the start-up error naming mchid", ids, err)
		}
	}
	for _, ids := range [][]string{nil, {"10000100", "1900000109"}} {
		if _, err := New(Config{Secret: wxV2Key, NoVerify: true, MchIDs: ids}); err != nil {
			t.Fatalf("verify off, mchid %v: %v", ids, err)
		}
	}
}

// TestWechatPayV2Partner: a service provider's (服务商) payment carries the
// sub-merchant's sub_mch_id, signed; mchid pins mch_id or sub_mch_id, and
// the order's merchant is the route's mchid, the same for the payment and
// its refunds.
func TestWechatPayV2Partner(t *testing.T) {
	const sp, sub, tx = platformtest.WechatPayV2SpMchID, platformtest.WechatPayV2SubMchID, "4200000215201811190261405420"
	pay := v2req(wxV2MD5.Body(platformtest.WechatPayV2PartnerPayment(sub, tx, "P1", 100)))
	info := platformtest.WechatPayV2RefundInfo(tx, "P1", "5030P1", "SUCCESS", 60, 100)
	refund := v2req(wxV2MD5.PartnerRefund(t, sub, info))
	pinSub := Config{Secret: wxV2Key, MchIDs: []string{sub}}
	pinSp := Config{Secret: wxV2Key, MchIDs: []string{sp}}
	cases := []presettest.VerifyCase[Config]{
		{Name: "payment, sub-merchant's route", Cfg: pinSub, Req: pay, Key: sub + ":" + tx + ":paid"},
		{Name: "refund, sub-merchant's route", Cfg: pinSub, Req: refund, Key: sub + ":" + tx + ":refund:RP1"},
		{Name: "payment, service provider's route", Cfg: pinSp, Req: pay, Key: sp + ":" + tx + ":paid"},
		{Name: "refund, service provider's route", Cfg: pinSp, Req: refund, Key: sp + ":" + tx + ":refund:RP1"},
		{Name: "payment, verify off: sub_mch_id", Cfg: Config{NoVerify: true}, Req: pay, Key: sub + ":" + tx + ":paid"},
		{Name: "refund, verify off: sub_mch_id", Cfg: Config{Secret: wxV2Key, NoVerify: true}, Req: refund, Key: sub + ":" + tx + ":refund:RP1"},
		{Name: "payment, another merchant's route", Cfg: Config{Secret: wxV2Key, MchIDs: []string{"1900000999"}}, Req: pay, WantErr: keying.ErrMerchant},
		{Name: "refund, another merchant's route", Cfg: Config{Secret: wxV2Key, MchIDs: []string{"1900000999"}}, Req: refund, WantErr: keying.ErrMerchant},
		{Name: "tampered sub_mch_id", Cfg: pinSp, Req: v2req([]byte(strings.Replace(string(pay.Body), sub, "1900000999", 1))), WantErr: keying.ErrSignature},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, c presettest.VerifyCase[Config], n *keying.Notification) {
		if v, ok := n.Extra("sub_mch_id"); !ok || v != sub {
			t.Fatalf("Extra(sub_mch_id) = %q, %v", v, ok)
		}
	})
}

// TestWechatPayV2RefundReplayedUnderAnotherEnvelope: only req_info is
// authenticated, so the same req_info under an envelope naming another
// mch_id (or sub_mch_id, appid) is the same refund, one key; before, the
// key's merchant came from the envelope, so it was a second key and the
// backend ran the refund twice.
func TestWechatPayV2RefundReplayedUnderAnotherEnvelope(t *testing.T) {
	p := presettest.MustNew(t, New, Config{Secret: wxV2Key, MchIDs: []string{"10000100"}})
	genuine := wxV2MD5.RefundFields(t, wxV2RefundInfo("SUCCESS"), "n1")
	var keys []string
	for _, env := range []map[string]string{
		genuine,
		set(genuine, "mch_id", "1900000999"),
		set(genuine, "sub_mch_id", "1900000999"),
		set(genuine, "sub_mch_id", "10000100", "mch_id", "1900000999", "appid", "wx0000000000000000"),
	} {
		n, err := p.Verify(v2req(wxV2XML(env)))
		if err != nil {
			// Refused (another merchant's envelope) is no second key either.
			if !errors.Is(err, keying.ErrMerchant) {
				t.Fatalf("envelope %v: %v", env, err)
			}
			continue
		}
		keys = append(keys, n.Key)
	}
	for _, k := range keys {
		if k != "10000100:4200000215201811190261405420:refund:131811191610442717309" {
			t.Fatalf("keys %v: the envelope made the key", keys)
		}
	}
	if len(keys) < 2 {
		t.Fatalf("keys %v: a replay whose envelope names the pinned merchant should be taken, as the same key", keys)
	}
}
