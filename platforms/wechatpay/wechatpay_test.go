package wechatpay

import (
	"crypto/rsa"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

const (
	wxAPIv3Key  = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4" // 32 bytes
	wxPubKeyID  = "PUB_KEY_ID_0114232134912410000000000000"
	wxSerialHex = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"
	wxTxID      = "1217752501201407033233368018"
)

// wxTransaction is the decrypted resource of a TRANSACTION.SUCCESS
// notification for transaction (and out_trade_no) wxTxID.
func wxTransaction(state string, total int) string {
	return platformtest.WechatPayTransaction(wxTxID, wxTxID, state, total)
}

// wxEvent is a notification created at testNow, its resource encrypted
// with a fixed nonce.
func wxEvent(id, eventType, resource string) platformtest.WechatPayEvent {
	return platformtest.WechatPayEvent{ID: id, EventType: eventType, Resource: resource, Nonce: "fdasflkja484", CreateTime: presettest.Now}
}

// wxBody is ev's envelope, the resource encrypted with wxAPIv3Key.
func wxBody(t testing.TB, ev platformtest.WechatPayEvent) []byte {
	t.Helper()
	return platformtest.WechatPay{APIv3Key: wxAPIv3Key}.Body(t, ev)
}

// wxRequest is body signed by k as WeChat Pay signs it at ts with nonce,
// under serial.
func wxRequest(t testing.TB, k *rsa.PrivateKey, serial string, ts time.Time, nonce string, body []byte) *keying.Request {
	t.Helper()
	return presettest.Post(body, platformtest.WechatPay{Key: k, Serial: serial}.HeaderWithNonce(t, body, ts, nonce))
}

func withMch(c Config, ids ...string) Config {
	c.MchIDs = ids
	return c
}

func TestWechatPayMchIDNeedsSecret(t *testing.T) {
	k, _ := platformtest.Keys(t)
	_, err := New(Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey), PublicKeyID: wxPubKeyID, MchIDs: []string{"1"}})
	if err == nil || !strings.Contains(err.Error(), "mchid needs secret") {
		t.Fatalf("New = %v", err)
	}
}

func TestWechatPay(t *testing.T) {
	k, other := platformtest.Keys(t)
	pub := platformtest.PublicKeyPEM(t, &k.PublicKey)
	serial, _ := new(big.Int).SetString(wxSerialHex, 16)
	byKey := Config{PublicKey: pub, PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key}
	byCert := Config{Certificates: [][]byte{presettest.Cert(t, other, presettest.BigInt(99), "old"), presettest.Cert(t, k, serial, "wechatpay")}, Secret: wxAPIv3Key}
	noSecret := Config{PublicKey: pub, PublicKeyID: wxPubKeyID}

	pay := wxEvent("EV-2018022511223320873", "TRANSACTION.SUCCESS", wxTransaction("SUCCESS", 100))
	payBody := wxBody(t, pay)
	valid := wxRequest(t, k, wxPubKeyID, presettest.Now, "5K8264ILTKCH16CQ2502SI8ZNMTM67VS", payBody)
	const payKey = "1230000109:1217752501201407033233368018:paid"
	const refundKey = "1230000109:1008450740201411110005820873:refund:R20150806125346"

	// A retry: re-signed later, new nonce, resource re-encrypted.
	retryEvent := pay
	retryEvent.Nonce = "0123456789ab"
	retry := wxRequest(t, k, wxPubKeyID, presettest.Now.Add(-time.Minute), "OTHERNONCE", wxBody(t, retryEvent))
	refund := wxEvent("EV-2", "REFUND.SUCCESS", platformtest.WechatPayRefund("1008450740201411110005820873", "20150806125346", "50200207182018070300011301001", "SUCCESS", 999, 999))
	noIDs := wxEvent("EV-3", "PROFITSHARING.SUCCESS", `{"order_id":"3008450740201411110007820472"}`)
	wrongAPIKey := platformtest.WechatPay{APIv3Key: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}.Body(t, pay)

	cases := []struct {
		name    string
		cfg     Config
		req     *keying.Request
		wantErr error
		key     string
		fp      string
	}{
		{"public key", byKey, valid, nil, payKey, `["100","SUCCESS"]`},
		{"certificate serial", byCert, wxRequest(t, k, wxSerialHex, presettest.Now, "n", payBody), nil, payKey, ""},
		{"certificate serial lower case", byCert, wxRequest(t, k, strings.ToLower(wxSerialHex), presettest.Now, "n", payBody), nil, payKey, ""},
		{"retry: new timestamp, nonce, ciphertext", byKey, retry, nil, payKey, `["100","SUCCESS"]`},
		{"timestamp 4 min ahead", byKey, wxRequest(t, k, wxPubKeyID, presettest.Now.Add(4*time.Minute), "n", payBody), nil, payKey, ""},
		{"event type no business event names", byKey, wxRequest(t, k, wxPubKeyID, presettest.Now, "n", wxBody(t, wxEvent("EV-9", "TRANSACTION.REFUND", wxTransaction("REFUND", 100)))),
			keying.ErrMalformed, "", ""},
		{"refund", byKey, wxRequest(t, k, wxPubKeyID, presettest.Now, "n", wxBody(t, refund)), nil,
			refundKey, `["999","SUCCESS"]`},
		{"unknown event type", byKey, wxRequest(t, k, wxPubKeyID, presettest.Now, "n", wxBody(t, noIDs)), keying.ErrMalformed, "", ""},
		{"no secret: notification id", noSecret, valid, nil, "EV-2018022511223320873", `["TRANSACTION.SUCCESS"]`},
		{"tampered body", byKey, presettest.WithBody(valid, []byte(strings.Replace(string(valid.Body), "EV-2018", "EV-2019", 1))), keying.ErrSignature, "", ""},
		{"tampered nonce", byKey, presettest.Hdr(valid, "Wechatpay-Nonce", "other"), keying.ErrSignature, "", ""},
		{"wrong key", byKey, wxRequest(t, other, wxPubKeyID, presettest.Now, "n", payBody), keying.ErrSignature, "", ""},
		{"unknown serial", byKey, presettest.Hdr(valid, "Wechatpay-Serial", "PUB_KEY_ID_0000"), keying.ErrSignature, "", ""},
		{"key of another certificate", byCert, wxRequest(t, k, "63", presettest.Now, "n", payBody), keying.ErrSignature, "", ""},
		{"stale timestamp", byKey, wxRequest(t, k, wxPubKeyID, presettest.Now.Add(-6*time.Minute), "n", payBody), keying.ErrSignature, "", ""},
		{"future timestamp", byKey, wxRequest(t, k, wxPubKeyID, presettest.Now.Add(6*time.Minute), "n", payBody), keying.ErrSignature, "", ""},
		{"SIGNTEST probe", byKey, presettest.Hdr(valid, "Wechatpay-Signature", "WECHATPAY/SIGNTEST/"+valid.Header.Get("Wechatpay-Signature")), keying.ErrSignature, "", ""},
		{"no signature", byKey, presettest.Hdr(valid, "Wechatpay-Signature", ""), keying.ErrSignature, "", ""},
		{"no signature type", byKey, presettest.Hdr(valid, "Wechatpay-Signature-Type", ""), nil, payKey, ""},
		{"SM2 signature type", byKey, presettest.Hdr(valid, "Wechatpay-Signature-Type", "WECHATPAY2-SM2-WITH-SM3"), keying.ErrSignature, "", ""},
		{"no serial", byKey, presettest.Hdr(valid, "Wechatpay-Serial", ""), keying.ErrSignature, "", ""},
		{"no timestamp", byKey, presettest.Hdr(valid, "Wechatpay-Timestamp", ""), keying.ErrSignature, "", ""},
		{"no nonce", byKey, presettest.Hdr(valid, "Wechatpay-Nonce", ""), keying.ErrSignature, "", ""},
		{"bad timestamp", byKey, presettest.Hdr(valid, "Wechatpay-Timestamp", "soon"), keying.ErrSignature, "", ""},
		{"signature not base64", byKey, presettest.Hdr(valid, "Wechatpay-Signature", "%%%"), keying.ErrSignature, "", ""},
		{"wrong APIv3 key", byKey, wxRequest(t, k, wxPubKeyID, presettest.Now, "n", wrongAPIKey), keying.ErrMalformed, "", ""},
		{"signed garbage", byKey, wxRequest(t, k, wxPubKeyID, presettest.Now, "n", []byte("not json")), keying.ErrMalformed, "", ""},
		{"signed JSON without resource", byKey, wxRequest(t, k, wxPubKeyID, presettest.Now, "n", []byte(`{"id":"EV-1"}`)), keying.ErrMalformed, "", ""},
		{"signed JSON without id", noSecret, wxRequest(t, k, wxPubKeyID, presettest.Now, "n", []byte(`{"event_type":"X"}`)), keying.ErrMalformed, "", ""},
		{"verify off", Config{NoVerify: true, Secret: wxAPIv3Key}, presettest.Hdr(valid, "Wechatpay-Signature", ""), nil, payKey, ""},
		{"pinned mchid", withMch(byKey, "1900000109", "1230000109"), valid, nil, payKey, ""},
		{"pinned mchid, refund", withMch(byKey, "1230000109"), wxRequest(t, k, wxPubKeyID, presettest.Now, "n", wxBody(t, refund)), nil,
			refundKey, ""},
		{"another merchant's notification", withMch(byKey, "1900000109"), valid, keying.ErrMerchant, "", ""},
		{"another merchant's, verify off", withMch(Config{NoVerify: true, Secret: wxAPIv3Key}, "1900000109"), valid, keying.ErrMerchant, "", ""},
		{"resource without mchid, pinned", withMch(byKey, "1230000109"), wxRequest(t, k, wxPubKeyID, presettest.Now, "n", wxBody(t, noIDs)), keying.ErrMalformed, "", ""},
		{"within a configured tolerance", Config{PublicKey: pub, PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key, Tolerance: 10 * time.Minute},
			wxRequest(t, k, wxPubKeyID, presettest.Now.Add(-8*time.Minute), "n", payBody), nil, payKey, ""},
		{"beyond a configured tolerance", Config{PublicKey: pub, PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key, Tolerance: time.Minute},
			wxRequest(t, k, wxPubKeyID, presettest.Now.Add(-2*time.Minute), "n", payBody), keying.ErrSignature, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := presettest.Verifies(t, New, c.cfg, c.req, c.wantErr, c.key)
			if n == nil {
				return
			}
			if c.fp != "" && n.Fingerprint != c.fp {
				t.Fatalf("Fingerprint = %s, want %s", n.Fingerprint, c.fp)
			}
			if c.cfg.Secret != "" && strings.HasSuffix(c.key, ":paid") {
				if v, ok := n.Extra("transaction_id"); !ok || v != "1217752501201407033233368018" {
					t.Fatalf("Extra(transaction_id) = %q, %v", v, ok)
				}
				if v, ok := n.Extra("amount.currency"); !ok || v != "CNY" {
					t.Fatalf("Extra(amount.currency) = %q, %v", v, ok)
				}
				if _, ok := n.Extra("nope.nope"); ok {
					t.Fatal("Extra found a missing path")
				}
			}
			if c.cfg.Secret == "" && n.Extra != nil {
				t.Fatal("Extra without a secret")
			}
		})
	}
}

func TestWechatPayConfig(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.PublicKeyPEM(t, &k.PublicKey)
	cases := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"public key without id", Config{PublicKey: pub}, false},
		{"short APIv3 key", Config{PublicKey: pub, PublicKeyID: "X", Secret: "short"}, false},
		{"garbage certificate", Config{Certificates: [][]byte{[]byte("nope")}}, false},
		{"garbage public key", Config{PublicKey: []byte("nope"), PublicKeyID: "X"}, false},
		{"verify off without anything", Config{NoVerify: true}, true},
		{"certificate only", Config{Certificates: [][]byte{presettest.Cert(t, k, presettest.BigInt(5), "c")}}, true},
	}
	for _, c := range cases {
		_, err := New(c.cfg)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v", c.name, err)
		}
		if err != nil && strings.Contains(err.Error(), c.cfg.Secret) && c.cfg.Secret != "" {
			t.Errorf("%s: error leaks the secret", c.name)
		}
	}
}

func TestWechatPaySuccess(t *testing.T) {
	const ok = `{"code":"SUCCESS"}`
	presettest.CheckSuccess(t, presettest.MustNew(t, New, Config{NoVerify: true}), http.Header{}, []presettest.SuccessCase{
		{Status: 200, Body: ok, Want: true}, {Status: 204, Body: ok, Want: true}, {Status: 201, Body: ok, Want: false}, {Status: 202, Body: ok, Want: false}, {Status: 400, Body: ok, Want: false}, {Status: 500, Body: ok, Want: false},
	})
}

func FuzzWechatPay(f *testing.F) {
	k, _ := platformtest.Keys(f)
	pay := wxEvent("EV-1", "TRANSACTION.SUCCESS", wxTransaction("SUCCESS", 1))
	good := wxRequest(f, k, wxPubKeyID, presettest.Now, "nonce", wxBody(f, pay))
	f.Add(good.Body, good.Header.Get("Wechatpay-Signature"), good.Header.Get("Wechatpay-Timestamp"), "nonce", wxPubKeyID)
	f.Add([]byte(`{"id":"x","resource":{"nonce":"123456789012","ciphertext":"AAAA"}}`), "WECHATPAY/SIGNTEST/abc", "0", "", "")
	f.Add([]byte(`{"resource":null}`), "", "99999999999999999999", "n", "0")
	verifying := presettest.MustNew(f, New, Config{PublicKey: platformtest.PublicKeyPEM(f, &k.PublicKey), PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key})
	open := presettest.MustNew(f, New, Config{NoVerify: true, Secret: wxAPIv3Key})
	openNoSecret := presettest.MustNew(f, New, Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte, sig, ts, nonce, serial string) {
		r := &keying.Request{Method: http.MethodPost, Body: body, Now: presettest.Now, Header: http.Header{
			"Wechatpay-Signature": {sig}, "Wechatpay-Timestamp": {ts}, "Wechatpay-Nonce": {nonce}, "Wechatpay-Serial": {serial},
		}}
		presettest.FuzzVerify(t, r, func(n *keying.Notification) {
			if n.Key == "" {
				t.Fatalf("key %q", n.Key)
			}
			if n.Extra != nil {
				n.Extra("amount.total")
			}
		}, verifying, open, openNoSecret)
	})
}

// TestConcurrentVerify runs the preset from several goroutines at once
// (meaningful under -race): a Platform is shared by all requests of a route.
func TestConcurrentVerify(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.PublicKeyPEM(t, &k.PublicKey)
	wx := wxEvent("EV-1", "TRANSACTION.SUCCESS", wxTransaction("SUCCESS", 1))
	presettest.ConcurrentVerify(t, presettest.MustNew(t, New, Config{PublicKey: pub, PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key}),
		wxRequest(t, k, wxPubKeyID, presettest.Now, "n", wxBody(t, wx)))
}

// TestWechatPayPartner: a service provider's (服务商) notification carries
// sp_mchid/sub_mchid instead of mchid; the order is the sub-merchant's,
// and mchid pins either of them. Before partner mode, each was a 400 ("the
// resource has no mchid") on every one of WeChat Pay's retries.
func TestWechatPayPartner(t *testing.T) {
	k, _ := platformtest.Keys(t)
	byKey := Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey), PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key}
	const sp, sub = platformtest.WechatPaySpMchID, platformtest.WechatPaySubMchID
	req := func(eventType, resource string) *keying.Request {
		return wxRequest(t, k, wxPubKeyID, presettest.Now, "n", wxBody(t, wxEvent("EV-P", eventType, resource)))
	}
	pay := req("TRANSACTION.SUCCESS", platformtest.WechatPayPartnerTransaction(sp, sub, wxTxID, "P1", "SUCCESS", 100))
	refund := req("REFUND.SUCCESS", platformtest.WechatPayPartnerRefund(sp, sub, wxTxID, "P1", "5030P1", "SUCCESS", 60, 100))
	closed := req("REFUND.CLOSED", platformtest.WechatPayPartnerRefund(sp, sub, wxTxID, "P1", "5030P1", "CLOSED", 60, 100))
	noSub := req("TRANSACTION.SUCCESS", strings.Replace(platformtest.WechatPayPartnerTransaction(sp, "", wxTxID, "P1", "SUCCESS", 100), `"sub_mchid":"",`, "", 1))
	payKey := sub + ":" + wxTxID + ":paid"
	refundKey := sub + ":" + wxTxID + ":refund:RP1"
	cases := []struct {
		name    string
		cfg     Config
		req     *keying.Request
		wantErr error
		key     string
	}{
		{"payment", byKey, pay, nil, payKey},
		{"refund", byKey, refund, nil, refundKey},
		{"refund closed", byKey, closed, nil, refundKey + ":closed"},
		{"pinned sp_mchid", withMch(byKey, sp), pay, nil, payKey},
		{"pinned sub_mchid", withMch(byKey, sub), pay, nil, payKey},
		{"pinned sp_mchid, refund", withMch(byKey, sp), refund, nil, refundKey},
		{"pinned sub_mchid, refund", withMch(byKey, "1", sub), refund, nil, refundKey},
		{"neither pinned", withMch(byKey, "1900000999"), pay, keying.ErrMerchant, ""},
		{"neither pinned, refund", withMch(byKey, "1900000999"), refund, keying.ErrMerchant, ""},
		{"no sub_mchid", byKey, noSub, keying.ErrMalformed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := presettest.Verifies(t, New, c.cfg, c.req, c.wantErr, c.key)
			if n == nil {
				return
			}
			if n.Order != sub+":"+wxTxID {
				t.Fatalf("Order = %s, want the sub-merchant's %s:%s", n.Order, sub, wxTxID)
			}
			for f, want := range map[string]string{"sp_mchid": sp, "sub_mchid": sub} {
				if v, ok := n.Extra(f); !ok || v != want {
					t.Fatalf("Extra(%s) = %q, %v", f, v, ok)
				}
			}
		})
	}
}
