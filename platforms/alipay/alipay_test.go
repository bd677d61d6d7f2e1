package alipay

import (
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
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

func alipayPost(form url.Values) *keying.Request {
	return &keying.Request{
		Method: http.MethodPost,
		URL:    &url.URL{Path: "/alipay/notify"},
		Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}},
		Body:   []byte(form.Encode()),
		Now:    presettest.Now,
	}
}

func alipayGet(rawQuery string) *keying.Request {
	return &keying.Request{
		Method: http.MethodGet,
		URL:    &url.URL{Path: "/alipay/return", RawQuery: rawQuery},
		Header: http.Header{},
		Now:    presettest.Now,
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
	business := Config{PublicKey: cfg.PublicKey, Return: ReturnBusiness} // the return is the order's paid event
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

	cases := []presettest.VerifyCase[Config]{
		{Name: "RSA2 notify", Cfg: cfg, Req: alipayPost(rsa2.Sign(t, base)), WantErr: nil, Key: wantKey},
		{Name: "RSA (SHA1) notify", Cfg: cfg, Req: alipayPost(rsa1.Sign(t, base)), WantErr: nil, Key: wantKey},
		{Name: "bare base64 public key", Cfg: Config{PublicKey: bare}, Req: alipayPost(rsa2.Sign(t, base)), WantErr: nil, Key: wantKey},
		{Name: "certificate as public key", Cfg: Config{PublicKey: presettest.Cert(t, k, presettest.BigInt(7), "alipay")}, Req: alipayPost(rsa2.Sign(t, base)), WantErr: nil, Key: wantKey},
		{Name: "retry with later notify_time", Cfg: cfg, Req: alipayPost(rsa2.Sign(t, with(base, "notify_time", "2026-03-15 09:00:00", "notify_id", "n2"))), WantErr: nil, Key: wantKey},
		{Name: "refund", Cfg: cfg, Req: alipayPost(rsa2.Sign(t, with(base, "trade_status", "TRADE_CLOSED", "out_biz_no", "R1", "refund_fee", "88.88"))), WantErr: nil, Key: "2016091800538339:2026031422001437971000029351:refund:R1"},
		{Name: "empty values are not signed", Cfg: cfg, Req: alipayPost(with(rsa2.Sign(t, base), "passback_params", "")), WantErr: nil, Key: wantKey},
		{Name: "GBK charset", Cfg: cfg, Req: alipayPost(gbk), WantErr: nil, Key: wantKey},
		{Name: "GBK bytes verified as sent, not re-encoded", Cfg: cfg, Req: alipayPost(gbkAsUTF8), WantErr: keying.ErrSignature, Key: ""},
		{Name: "return query with unencoded +", Cfg: business, Req: alipayGet(plusQuery), WantErr: nil, Key: wantKey},
		{Name: "tampered amount", Cfg: cfg, Req: alipayPost(with(rsa2.Sign(t, base), "total_amount", "0.01")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "tampered trade_status", Cfg: cfg, Req: alipayPost(with(rsa2.Sign(t, base), "trade_status", "TRADE_FINISHED")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "added field", Cfg: cfg, Req: alipayPost(with(rsa2.Sign(t, base), "out_biz_no", "X")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "wrong key", Cfg: cfg, Req: alipayPost(platformtest.Alipay{Key: other}.Sign(t, base)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "RSA2 sign labelled RSA", Cfg: cfg, Req: alipayPost(with(rsa2.Sign(t, base), "sign_type", "RSA")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "unknown sign_type", Cfg: cfg, Req: alipayPost(with(rsa2.Sign(t, base), "sign_type", "MD5")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "no sign", Cfg: cfg, Req: alipayPost(base), WantErr: keying.ErrSignature, Key: ""},
		{Name: "sign not base64", Cfg: cfg, Req: alipayPost(with(base, "sign", "!!!")), WantErr: keying.ErrSignature, Key: ""},
		{Name: "signed without trade_no", Cfg: cfg, Req: alipayPost(rsa2.Sign(t, with(base, "trade_no", "\x00"))), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "repeated parameter", Cfg: cfg, Req: presettest.Append(alipayPost(rsa2.Sign(t, base)), "&app_id=1"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "repeated amount, empty (unsigned) copy", Cfg: cfg, Req: presettest.Append(alipayPost(rsa2.Sign(t, base)), "&total_amount="), WantErr: keying.ErrSignature, Key: ""},
		{Name: "repeated sign_type (unsigned)", Cfg: cfg, Req: presettest.Append(alipayPost(rsa2.Sign(t, base)), "&sign_type=RSA2"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "name PHP renames, empty so unsigned", Cfg: cfg, Req: presettest.Append(alipayPost(rsa2.Sign(t, base)), "&total.amount="), WantErr: keying.ErrSignature, Key: ""},
		{Name: "array name", Cfg: cfg, Req: presettest.Append(alipayPost(rsa2.Sign(t, base)), "&total_amount[]="), WantErr: keying.ErrSignature, Key: ""},
		{Name: "semicolon separator", Cfg: cfg, Req: presettest.Append(alipayPost(rsa2.Sign(t, base)), ";total_amount=0.01"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "broken escape", Cfg: cfg, Req: presettest.Append(alipayPost(nil), "%zz"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "pinned app_id", Cfg: Config{PublicKey: cfg.PublicKey, AppIDs: []string{"1", "2016091800538339"}}, Req: alipayPost(rsa2.Sign(t, base)), WantErr: nil, Key: wantKey},
		{Name: "another app's notification", Cfg: Config{PublicKey: cfg.PublicKey, AppIDs: []string{"2016000000000001"}}, Req: alipayPost(rsa2.Sign(t, base)), WantErr: keying.ErrMerchant, Key: ""},
		{Name: "another app's, verify off", Cfg: Config{NoVerify: true, AppIDs: []string{"2016000000000001"}}, Req: alipayPost(base), WantErr: keying.ErrMerchant, Key: ""},
		{Name: "signed without app_id, pinned", Cfg: Config{PublicKey: cfg.PublicKey, AppIDs: []string{"2016091800538339"}}, Req: alipayPost(rsa2.Sign(t, with(base, "app_id", "\x00"))), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "empty body", Cfg: cfg, Req: alipayPost(nil), WantErr: keying.ErrMalformed, Key: ""},
		{Name: "verify off", Cfg: Config{NoVerify: true}, Req: alipayPost(base), WantErr: nil, Key: wantKey},
		{Name: "verify off still needs trade_no", Cfg: Config{NoVerify: true}, Req: alipayPost(with(base, "trade_no", "\x00")), WantErr: keying.ErrMalformed, Key: ""},
	}
	presettest.RunVerifyCases(t, New, cases, func(t *testing.T, _ presettest.VerifyCase[Config], n *keying.Notification) {
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
	p := presettest.MustNew(t, New, Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey)})
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
	presettest.CheckSuccess(t, presettest.MustNew(t, New, Config{NoVerify: true}), http.Header{}, []presettest.SuccessCase{
		{Status: 200, Body: "success", Want: true},
		{Status: 200, Body: "success\r\n", Want: true},
		{Status: 200, Body: "  success ", Want: true},
		{Status: 200, Body: "Success", Want: false},
		{Status: 200, Body: "fail", Want: false},
		{Status: 200, Body: "", Want: false},
		{Status: 200, Body: "success!", Want: false},
		{Status: 500, Body: "success", Want: false},
		{Status: 302, Body: "success", Want: false},
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
		"certificate PEM": presettest.Cert(t, k, presettest.BigInt(1), "x"),
	}
	for name, in := range good {
		got, err := keying.ParseRSAPublicKey(in)
		if err != nil || !got.Equal(&k.PublicKey) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, bad := range []string{"", "-----BEGIN PUBLIC KEY-----\nxx", "not base64!", base64.StdEncoding.EncodeToString([]byte("junk"))} {
		if _, err := keying.ParseRSAPublicKey([]byte(bad)); err == nil {
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
	verifying := presettest.MustNew(f, New, Config{PublicKey: platformtest.PublicKeyPEM(f, &k.PublicKey), Return: ReturnBusiness})
	open := presettest.MustNew(f, New, Config{NoVerify: true, Return: ReturnBusiness})
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			r := &keying.Request{Method: method, URL: &url.URL{RawQuery: query}, Header: http.Header{}, Body: body, Now: presettest.Now}
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
			presettest.FuzzVerify(t, r, func(n *keying.Notification) {
				if n.Key != n.Order+":"+n.Event || !presettest.KnownEvent(n.Event) || strings.HasPrefix(n.Key, ":") {
					t.Fatalf("key %q is not the order %q and its event %q", n.Key, n.Order, n.Event)
				}
			}, open)
		}
	})
}

// TestConcurrentVerify runs the preset from several goroutines at once
// (meaningful under -race): a Platform is shared by all requests of a route.
func TestConcurrentVerify(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.PublicKeyPEM(t, &k.PublicKey)
	presettest.ConcurrentVerify(t, presettest.MustNew(t, New, Config{PublicKey: pub}), alipayPost(platformtest.Alipay{Key: k}.Sign(t, alipayNotify())))
}
