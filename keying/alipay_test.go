package keying

import (
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// alipayNotify is an asynchronous notify with the parameters of Alipay's
// documented trade_status_sync example, its times and notify_id fixed.
func alipayNotify() url.Values {
	n := platformtest.AlipayNotify("2016091800538339", "20260314172606001", "2026031422001437971000029351", "TRADE_SUCCESS", "88.88")
	return with(n, "subject", "订单 Order #42", "notify_id", "2026031400222172632037971437810102",
		"gmt_create", "2026-03-14 17:26:31", "gmt_payment", "2026-03-14 17:26:32", "notify_time", "2026-03-14 17:26:33")
}

// alipayReturn is the browser's synchronous return query (return_url),
// its timestamp fixed.
func alipayReturn() url.Values {
	r := platformtest.AlipayReturn("2016091800538339", "20260314172606001", "2026031422001437971000029351", "88.88")
	return with(r, "timestamp", "2026-03-14 17:26:40")
}

func alipayPost(form url.Values) *Request {
	return &Request{
		Method: http.MethodPost,
		URL:    &url.URL{Path: "/alipay/notify"},
		Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}},
		Body:   []byte(form.Encode()),
		Now:    testNow,
	}
}

func alipayGet(rawQuery string) *Request {
	return &Request{
		Method: http.MethodGet,
		URL:    &url.URL{Path: "/alipay/return", RawQuery: rawQuery},
		Header: http.Header{},
		Now:    testNow,
	}
}

func with(v url.Values, kv ...string) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "\x00" {
			out.Del(kv[i])
			continue
		}
		out.Set(kv[i], kv[i+1])
	}
	return out
}

func TestAlipay(t *testing.T) {
	k, other := platformtest.Keys(t)
	rsa2 := platformtest.Alipay{Key: k}
	rsa1 := platformtest.Alipay{Key: k, SignType: "RSA"}
	cfg := Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey)}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	bare := []byte(base64.StdEncoding.EncodeToString(der)) // as Alipay's console shows it

	const wantKey = "2016091800538339:2026031422001437971000029351:paid"
	base := alipayNotify()

	// A GBK notify: Alipay signs and percent-encodes the GBK bytes.
	gbk := platformtest.Alipay{Key: k, Charset: "GBK"}.Sign(t, with(base, "subject", "测试订单：月度会员"))
	gbkAsUTF8 := rsa2.Sign(t, with(base, "charset", "GBK", "subject", "测试订单：月度会员"))
	gbkAsUTF8.Set("subject", gbk.Get("subject")) // signed over UTF-8, sent as GBK

	// A return query whose sign carries an unencoded "+".
	var plusQuery string
	for i := 0; ; i++ {
		ret := rsa2.Sign(t, with(alipayReturn(), "timestamp", "2026-03-14 17:26:4"+string(rune('0'+i%10))))
		if strings.Contains(ret.Get("sign"), "+") {
			plusQuery = strings.ReplaceAll(ret.Encode(), "%2B", "+")
			break
		}
		if i > 50 {
			t.Fatal("no signature with a + in 50 tries")
		}
	}

	cases := []verifyCase{
		{"RSA2 notify", cfg, alipayPost(rsa2.Sign(t, base)), nil, wantKey},
		{"RSA (SHA1) notify", cfg, alipayPost(rsa1.Sign(t, base)), nil, wantKey},
		{"bare base64 public key", Config{PublicKey: bare}, alipayPost(rsa2.Sign(t, base)), nil, wantKey},
		{"certificate as public key", Config{PublicKey: testCert(t, k, bigInt(7), "alipay")}, alipayPost(rsa2.Sign(t, base)), nil, wantKey},
		{"retry with later notify_time", cfg, alipayPost(rsa2.Sign(t, with(base, "notify_time", "2026-03-15 09:00:00", "notify_id", "n2"))), nil, wantKey},
		{"refund", cfg, alipayPost(rsa2.Sign(t, with(base, "trade_status", "TRADE_CLOSED", "out_biz_no", "R1", "refund_fee", "88.88"))), nil,
			"2016091800538339:2026031422001437971000029351:refund:R1"},
		{"empty values are not signed", cfg, alipayPost(with(rsa2.Sign(t, base), "passback_params", "")), nil, wantKey},
		{"GBK charset", cfg, alipayPost(gbk), nil, wantKey},
		{"GBK bytes verified as sent, not re-encoded", cfg, alipayPost(gbkAsUTF8), ErrSignature, ""},
		{"return query with unencoded +", cfg, alipayGet(plusQuery), nil, wantKey},
		{"tampered amount", cfg, alipayPost(with(rsa2.Sign(t, base), "total_amount", "0.01")), ErrSignature, ""},
		{"tampered trade_status", cfg, alipayPost(with(rsa2.Sign(t, base), "trade_status", "TRADE_FINISHED")), ErrSignature, ""},
		{"added field", cfg, alipayPost(with(rsa2.Sign(t, base), "out_biz_no", "X")), ErrSignature, ""},
		{"wrong key", cfg, alipayPost(platformtest.Alipay{Key: other}.Sign(t, base)), ErrSignature, ""},
		{"RSA2 sign labelled RSA", cfg, alipayPost(with(rsa2.Sign(t, base), "sign_type", "RSA")), ErrSignature, ""},
		{"unknown sign_type", cfg, alipayPost(with(rsa2.Sign(t, base), "sign_type", "MD5")), ErrSignature, ""},
		{"no sign", cfg, alipayPost(base), ErrSignature, ""},
		{"sign not base64", cfg, alipayPost(with(base, "sign", "!!!")), ErrSignature, ""},
		{"signed without trade_no", cfg, alipayPost(rsa2.Sign(t, with(base, "trade_no", "\x00"))), ErrMalformed, ""},
		{"repeated parameter", cfg, alipayPost(rsa2.Sign(t, base)).withBody("&app_id=1"), ErrSignature, ""},
		{"repeated amount, empty (unsigned) copy", cfg, alipayPost(rsa2.Sign(t, base)).withBody("&total_amount="), ErrSignature, ""},
		{"repeated sign_type (unsigned)", cfg, alipayPost(rsa2.Sign(t, base)).withBody("&sign_type=RSA2"), ErrSignature, ""},
		{"name PHP renames, empty so unsigned", cfg, alipayPost(rsa2.Sign(t, base)).withBody("&total.amount="), ErrSignature, ""},
		{"array name", cfg, alipayPost(rsa2.Sign(t, base)).withBody("&total_amount[]="), ErrSignature, ""},
		{"semicolon separator", cfg, alipayPost(rsa2.Sign(t, base)).withBody(";total_amount=0.01"), ErrSignature, ""},
		{"broken escape", cfg, alipayPost(nil).withBody("%zz"), ErrSignature, ""},
		{"pinned app_id", Config{PublicKey: cfg.PublicKey, AppIDs: []string{"1", "2016091800538339"}}, alipayPost(rsa2.Sign(t, base)), nil, wantKey},
		{"another app's notification", Config{PublicKey: cfg.PublicKey, AppIDs: []string{"2016000000000001"}}, alipayPost(rsa2.Sign(t, base)), ErrSignature, ""},
		{"another app's, verify off", Config{NoVerify: true, AppIDs: []string{"2016000000000001"}}, alipayPost(base), ErrSignature, ""},
		{"empty body", cfg, alipayPost(nil), ErrMalformed, ""},
		{"verify off", Config{NoVerify: true}, alipayPost(base), nil, wantKey},
		{"verify off still needs trade_no", Config{NoVerify: true}, alipayPost(with(base, "trade_no", "\x00")), ErrMalformed, ""},
	}
	runVerifyCases(t, "alipay", cases, func(t *testing.T, _ verifyCase, n *Notification) {
		if v, ok := n.Extra("out_trade_no"); !ok || v != "20260314172606001" {
			t.Fatalf("Extra(out_trade_no) = %q, %v", v, ok)
		}
		if v, ok, err := n.Fields.Form("app_id"); err != nil || !ok || v != "2016091800538339" {
			t.Fatalf("Fields.Form(app_id) = %q, %v, %v", v, ok, err)
		}
	})
}

func TestAlipayFingerprint(t *testing.T) {
	k, _ := platformtest.Keys(t)
	p := mustNew(t, "alipay", Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey)})
	fp := func(v url.Values) string {
		n, err := p.Verify(alipayPost(platformtest.Alipay{Key: k}.Sign(t, v)))
		if err != nil {
			t.Fatal(err)
		}
		return n.Fingerprint
	}
	a := fp(alipayNotify())
	if b := fp(with(alipayNotify(), "notify_time", "2026-03-15 10:00:00")); a != b {
		t.Fatalf("a retry changed the fingerprint: %s vs %s", a, b)
	}
	if b := fp(with(alipayNotify(), "total_amount", "1.00")); a == b {
		t.Fatal("a different total_amount kept the fingerprint")
	}
	if a != `["88.88",""]` {
		t.Fatalf("fingerprint material = %s", a)
	}
}

func TestAlipaySuccess(t *testing.T) {
	checkSuccess(t, mustNew(t, "alipay", Config{NoVerify: true}), http.Header{}, []successCase{
		{200, "success", true},
		{200, "success\r\n", true},
		{200, "  success ", true},
		{200, "Success", false},
		{200, "fail", false},
		{200, "", false},
		{200, "success!", false},
		{500, "success", false},
		{302, "success", false},
	})
}

func TestParseRSAPublicKey(t *testing.T) {
	k, _ := platformtest.Keys(t)
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	b64 := base64.StdEncoding.EncodeToString(der)
	wrapped := ""
	for i := 0; i < len(b64); i += 64 {
		wrapped += b64[i:min(i+64, len(b64))] + "\n"
	}
	pkcs1 := x509.MarshalPKCS1PublicKey(&k.PublicKey)
	good := map[string][]byte{
		"PKIX PEM":        platformtest.PublicKeyPEM(t, &k.PublicKey),
		"bare base64":     []byte(b64),
		"wrapped base64":  []byte(wrapped),
		"PKCS1 base64":    []byte(base64.StdEncoding.EncodeToString(pkcs1)),
		"certificate PEM": testCert(t, k, bigInt(1), "x"),
	}
	for name, in := range good {
		got, err := ParseRSAPublicKey(in)
		if err != nil || !got.Equal(&k.PublicKey) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, bad := range []string{"", "-----BEGIN PUBLIC KEY-----\nxx", "not base64!", base64.StdEncoding.EncodeToString([]byte("junk"))} {
		if _, err := ParseRSAPublicKey([]byte(bad)); err == nil {
			t.Errorf("ParseRSAPublicKey(%q) accepted", bad)
		}
	}
}

func FuzzAlipay(f *testing.F) {
	k, _ := platformtest.Keys(f)
	signed := platformtest.Alipay{Key: k}.Sign(f, alipayNotify()).Encode()
	f.Add([]byte(signed), "")
	f.Add([]byte(""), strings.ReplaceAll(platformtest.Alipay{Key: k, SignType: "RSA"}.Sign(f, alipayReturn()).Encode(), "%2B", "+"))
	f.Add([]byte("a=1&a=2&sign=%%"), "")
	f.Add([]byte("sign=+++&sign_type=RSA2&app_id=1&trade_no=2"), "sign= ;")
	verifying := mustNew(f, "alipay", Config{PublicKey: platformtest.PublicKeyPEM(f, &k.PublicKey)})
	open := mustNew(f, "alipay", Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			r := &Request{Method: method, URL: &url.URL{RawQuery: query}, Header: http.Header{}, Body: body, Now: testNow}
			if n, err := verifying.Verify(r); err == nil && n.Key == "" {
				t.Fatal("verified with an empty key")
			}
			// What verifies is what a backend's form parser reads:
			// each name once, with the value the signature covered.
			if n, err := verifying.Verify(r); err == nil {
				raw := string(body)
				if method == http.MethodGet {
					raw = query
				}
				q, err := url.ParseQuery(raw)
				if err != nil {
					t.Fatalf("verified a form url.ParseQuery refuses: %v", err)
				}
				for k, vs := range q {
					if v, ok := n.Extra(k); len(vs) != 1 || !ok || v != vs[0] {
						t.Fatalf("field %s: verified %q, a backend reads %q", k, v, vs)
					}
				}
			}
			fuzzVerify(t, r, func(n *Notification) {
				if n.Key != n.Order+":"+n.Event || !knownEvent(n.Event) || strings.HasPrefix(n.Key, ":") {
					t.Fatalf("key %q is not the order %q and its event %q", n.Key, n.Order, n.Event)
				}
			}, open)
		}
	})
}
