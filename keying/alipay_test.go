package keying

import (
	"crypto"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// alipayNotify is an asynchronous notify with the parameters of Alipay's
// documented trade_status_sync example (values are illustrative).
func alipayNotify() url.Values {
	return url.Values{
		"gmt_create":       {"2026-03-14 17:26:31"},
		"charset":          {"utf-8"},
		"seller_email":     {"merchant@example.com"},
		"subject":          {"订单 Order #42"},
		"buyer_id":         {"2088102122524333"},
		"invoice_amount":   {"88.88"},
		"notify_id":        {"2026031400222172632037971437810102"},
		"fund_bill_list":   {`[{"amount":"88.88","fundChannel":"ALIPAYACCOUNT"}]`},
		"notify_type":      {"trade_status_sync"},
		"trade_status":     {"TRADE_SUCCESS"},
		"receipt_amount":   {"88.88"},
		"app_id":           {"2016091800538339"},
		"buyer_pay_amount": {"88.88"},
		"seller_id":        {"2088102177296610"},
		"gmt_payment":      {"2026-03-14 17:26:32"},
		"notify_time":      {"2026-03-14 17:26:33"},
		"version":          {"1.0"},
		"out_trade_no":     {"20260314172606001"},
		"total_amount":     {"88.88"},
		"trade_no":         {"2026031422001437971000029351"},
		"auth_app_id":      {"2016091800538339"},
		"buyer_logon_id":   {"csq***@sandbox.com"},
		"point_amount":     {"0.00"},
	}
}

// alipayReturn is the browser's synchronous return query (return_url).
func alipayReturn() url.Values {
	return url.Values{
		"charset":      {"utf-8"},
		"out_trade_no": {"20260314172606001"},
		"method":       {"alipay.trade.page.pay.return"},
		"total_amount": {"88.88"},
		"trade_no":     {"2026031422001437971000029351"},
		"auth_app_id":  {"2016091800538339"},
		"version":      {"1.0"},
		"app_id":       {"2016091800538339"},
		"seller_id":    {"2088102177296610"},
		"timestamp":    {"2026-03-14 17:26:40"},
	}
}

// alipaySign signs params as Alipay's docs describe, independently of the
// code under test: drop sign, sign_type and empty values, sort by name,
// join k=v with &, SHA256withRSA (RSA2) or SHA1withRSA (RSA), base64.
func alipaySign(t testing.TB, k *rsa.PrivateKey, signType string, params url.Values) url.Values {
	t.Helper()
	out := url.Values{}
	var names []string
	for n, vs := range params {
		out[n] = append([]string(nil), vs...)
		if n != "sign" && n != "sign_type" && vs[0] != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, n+"="+params[n][0])
	}
	h := crypto.SHA256
	if signType == "RSA" {
		h = crypto.SHA1
	}
	sig := signPKCS1(t, k, h, []byte(strings.Join(parts, "&")))
	out.Set("sign", base64.StdEncoding.EncodeToString(sig))
	out.Set("sign_type", signType)
	return out
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
	k, other := testKeys(t)
	cfg := Config{PublicKey: pkixPEM(t, &k.PublicKey)}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	bare := []byte(base64.StdEncoding.EncodeToString(der)) // as Alipay's console shows it

	const wantKey = "alipay:2016091800538339:2026031422001437971000029351:TRADE_SUCCESS:"
	base := alipayNotify()

	// A GBK notify: Alipay signs and percent-encodes the GBK bytes.
	gbkSubject, err := simplifiedchinese.GBK.NewEncoder().String("测试订单：月度会员")
	if err != nil {
		t.Fatal(err)
	}
	gbk := with(base, "charset", "GBK", "subject", gbkSubject)
	gbkAsUTF8 := alipaySign(t, k, "RSA2", with(base, "charset", "GBK", "subject", "测试订单：月度会员"))
	gbkAsUTF8.Set("subject", gbkSubject) // signed over UTF-8, sent as GBK

	// A return query whose sign carries an unencoded "+".
	var plusQuery string
	for i := 0; ; i++ {
		ret := alipaySign(t, k, "RSA2", with(alipayReturn(), "timestamp", "2026-03-14 17:26:4"+string(rune('0'+i%10))))
		if strings.Contains(ret.Get("sign"), "+") {
			plusQuery = strings.ReplaceAll(ret.Encode(), "%2B", "+")
			break
		}
		if i > 50 {
			t.Fatal("no signature with a + in 50 tries")
		}
	}

	cases := []struct {
		name    string
		cfg     Config
		req     *Request
		wantErr error
		key     string
	}{
		{"RSA2 notify", cfg, alipayPost(alipaySign(t, k, "RSA2", base)), nil, wantKey},
		{"RSA (SHA1) notify", cfg, alipayPost(alipaySign(t, k, "RSA", base)), nil, wantKey},
		{"bare base64 public key", Config{PublicKey: bare}, alipayPost(alipaySign(t, k, "RSA2", base)), nil, wantKey},
		{"certificate as public key", Config{PublicKey: testCert(t, k, bigInt(7), "alipay")}, alipayPost(alipaySign(t, k, "RSA2", base)), nil, wantKey},
		{"retry with later notify_time", cfg, alipayPost(alipaySign(t, k, "RSA2", with(base, "notify_time", "2026-03-15 09:00:00", "notify_id", "n2"))), nil, wantKey},
		{"refund", cfg, alipayPost(alipaySign(t, k, "RSA2", with(base, "trade_status", "TRADE_CLOSED", "out_biz_no", "R1", "refund_fee", "88.88"))), nil,
			"alipay:2016091800538339:2026031422001437971000029351:TRADE_CLOSED:R1"},
		{"empty values are not signed", cfg, alipayPost(with(alipaySign(t, k, "RSA2", base), "passback_params", "")), nil, wantKey},
		{"GBK charset", cfg, alipayPost(alipaySign(t, k, "RSA2", gbk)), nil, wantKey},
		{"GBK bytes verified as sent, not re-encoded", cfg, alipayPost(gbkAsUTF8), ErrSignature, ""},
		{"return query with unencoded +", cfg, alipayGet(plusQuery), nil, "alipay:2016091800538339:2026031422001437971000029351::"},
		{"tampered amount", cfg, alipayPost(with(alipaySign(t, k, "RSA2", base), "total_amount", "0.01")), ErrSignature, ""},
		{"tampered trade_status", cfg, alipayPost(with(alipaySign(t, k, "RSA2", base), "trade_status", "TRADE_FINISHED")), ErrSignature, ""},
		{"added field", cfg, alipayPost(with(alipaySign(t, k, "RSA2", base), "out_biz_no", "X")), ErrSignature, ""},
		{"wrong key", cfg, alipayPost(alipaySign(t, other, "RSA2", base)), ErrSignature, ""},
		{"RSA2 sign labelled RSA", cfg, alipayPost(with(alipaySign(t, k, "RSA2", base), "sign_type", "RSA")), ErrSignature, ""},
		{"unknown sign_type", cfg, alipayPost(with(alipaySign(t, k, "RSA2", base), "sign_type", "MD5")), ErrSignature, ""},
		{"no sign", cfg, alipayPost(base), ErrSignature, ""},
		{"sign not base64", cfg, alipayPost(with(base, "sign", "!!!")), ErrSignature, ""},
		{"signed without trade_no", cfg, alipayPost(alipaySign(t, k, "RSA2", with(base, "trade_no", "\x00"))), ErrMalformed, ""},
		{"repeated parameter", cfg, alipayPost(alipaySign(t, k, "RSA2", base)).withBody("&app_id=1"), ErrMalformed, ""},
		{"not a form", cfg, alipayPost(nil).withBody("%zz"), ErrMalformed, ""},
		{"empty body", cfg, alipayPost(nil), ErrMalformed, ""},
		{"verify off", Config{NoVerify: true}, alipayPost(base), nil, wantKey},
		{"verify off still needs trade_no", Config{NoVerify: true}, alipayPost(with(base, "trade_no", "\x00")), ErrMalformed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := mustNew(t, "alipay", c.cfg).Verify(c.req)
			wantErr(t, err, c.wantErr)
			if err != nil {
				return
			}
			if n.Key != c.key {
				t.Fatalf("Key = %q, want %q", n.Key, c.key)
			}
			if v, ok := n.Extra("out_trade_no"); !ok || v != "20260314172606001" {
				t.Fatalf("Extra(out_trade_no) = %q, %v", v, ok)
			}
			if v, ok, err := n.Fields.Form("app_id"); err != nil || !ok || v != "2016091800538339" {
				t.Fatalf("Fields.Form(app_id) = %q, %v, %v", v, ok, err)
			}
		})
	}
}

func TestAlipayFingerprint(t *testing.T) {
	k, _ := testKeys(t)
	p := mustNew(t, "alipay", Config{PublicKey: pkixPEM(t, &k.PublicKey)})
	fp := func(v url.Values) string {
		n, err := p.Verify(alipayPost(alipaySign(t, k, "RSA2", v)))
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
	p := mustNew(t, "alipay", Config{NoVerify: true})
	cases := []struct {
		status int
		body   string
		want   bool
	}{
		{200, "success", true},
		{200, "success\r\n", true},
		{200, "  success ", true},
		{200, "Success", false},
		{200, "fail", false},
		{200, "", false},
		{200, "success!", false},
		{500, "success", false},
		{302, "success", false},
	}
	for _, c := range cases {
		if got := p.Success(c.status, http.Header{}, []byte(c.body)); got != c.want {
			t.Errorf("Success(%d, %q) = %v, want %v", c.status, c.body, got, c.want)
		}
	}
}

func TestParseRSAPublicKey(t *testing.T) {
	k, _ := testKeys(t)
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	b64 := base64.StdEncoding.EncodeToString(der)
	wrapped := ""
	for i := 0; i < len(b64); i += 64 {
		wrapped += b64[i:min(i+64, len(b64))] + "\n"
	}
	pkcs1 := x509.MarshalPKCS1PublicKey(&k.PublicKey)
	good := map[string][]byte{
		"PKIX PEM":        pkixPEM(t, &k.PublicKey),
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

func (r *Request) withBody(extra string) *Request {
	r.Body = append(r.Body, extra...)
	return r
}

func FuzzAlipay(f *testing.F) {
	k, _ := testKeys(f)
	signed := alipaySign(f, k, "RSA2", alipayNotify()).Encode()
	f.Add([]byte(signed), "")
	f.Add([]byte(""), strings.ReplaceAll(alipaySign(f, k, "RSA", alipayReturn()).Encode(), "%2B", "+"))
	f.Add([]byte("a=1&a=2&sign=%%"), "")
	f.Add([]byte("sign=+++&sign_type=RSA2&app_id=1&trade_no=2"), "sign= ;")
	verifying := mustNew(f, "alipay", Config{PublicKey: pkixPEM(f, &k.PublicKey)})
	open := mustNew(f, "alipay", Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			r := &Request{Method: method, URL: &url.URL{RawQuery: query}, Header: http.Header{}, Body: body, Now: testNow}
			if n, err := verifying.Verify(r); err == nil && n.Key == "" {
				t.Fatal("verified with an empty key")
			}
			if n, err := open.Verify(r); err == nil {
				if !strings.HasPrefix(n.Key, "alipay:") {
					t.Fatalf("key %q", n.Key)
				}
			} else if !isSigOrMalformed(err) {
				t.Fatalf("unexpected error kind: %v", err)
			}
		}
	})
}
