package keying

import (
	"crypto/rsa"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
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
	return platformtest.WechatPayEvent{ID: id, EventType: eventType, Resource: resource, Nonce: "fdasflkja484", CreateTime: testNow}
}

// wxBody is ev's envelope, the resource encrypted with wxAPIv3Key.
func wxBody(t testing.TB, ev platformtest.WechatPayEvent) []byte {
	t.Helper()
	return platformtest.WechatPay{APIv3Key: wxAPIv3Key}.Body(t, ev)
}

// wxRequest is body signed by k as WeChat Pay signs it at ts with nonce,
// under serial.
func wxRequest(t testing.TB, k *rsa.PrivateKey, serial string, ts time.Time, nonce string, body []byte) *Request {
	t.Helper()
	return post(body, platformtest.WechatPay{Key: k, Serial: serial}.HeaderWithNonce(t, body, ts, nonce))
}

func withMch(c Config, ids ...string) Config {
	c.MchIDs = ids
	return c
}

func TestWechatPayMchIDNeedsSecret(t *testing.T) {
	k, _ := platformtest.Keys(t)
	_, err := New("wechatpay", Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey), PublicKeyID: wxPubKeyID, MchIDs: []string{"1"}})
	if err == nil || !strings.Contains(err.Error(), "mchid needs secret") {
		t.Fatalf("New = %v", err)
	}
}

func TestWechatPay(t *testing.T) {
	k, other := platformtest.Keys(t)
	pub := platformtest.PublicKeyPEM(t, &k.PublicKey)
	serial, _ := new(big.Int).SetString(wxSerialHex, 16)
	byKey := Config{PublicKey: pub, PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key}
	byCert := Config{Certificates: [][]byte{testCert(t, other, bigInt(99), "old"), testCert(t, k, serial, "wechatpay")}, Secret: wxAPIv3Key}
	noSecret := Config{PublicKey: pub, PublicKeyID: wxPubKeyID}

	pay := wxEvent("EV-2018022511223320873", "TRANSACTION.SUCCESS", wxTransaction("SUCCESS", 100))
	payBody := wxBody(t, pay)
	valid := wxRequest(t, k, wxPubKeyID, testNow, "5K8264ILTKCH16CQ2502SI8ZNMTM67VS", payBody)
	const payKey = "1230000109:1217752501201407033233368018:paid"
	const refundKey = "1230000109:1008450740201411110005820873:refund:R20150806125346"

	// A retry: re-signed later, new nonce, resource re-encrypted.
	retryEvent := pay
	retryEvent.Nonce = "0123456789ab"
	retry := wxRequest(t, k, wxPubKeyID, testNow.Add(-time.Minute), "OTHERNONCE", wxBody(t, retryEvent))
	refund := wxEvent("EV-2", "REFUND.SUCCESS", platformtest.WechatPayRefund("1008450740201411110005820873", "20150806125346", "50200207182018070300011301001", "SUCCESS", 999, 999))
	noIDs := wxEvent("EV-3", "PROFITSHARING.SUCCESS", `{"order_id":"3008450740201411110007820472"}`)
	wrongAPIKey := platformtest.WechatPay{APIv3Key: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}.Body(t, pay)

	cases := []struct {
		name    string
		cfg     Config
		req     *Request
		wantErr error
		key     string
		fp      string
	}{
		{"public key", byKey, valid, nil, payKey, `["100","SUCCESS"]`},
		{"certificate serial", byCert, wxRequest(t, k, wxSerialHex, testNow, "n", payBody), nil, payKey, ""},
		{"certificate serial lower case", byCert, wxRequest(t, k, strings.ToLower(wxSerialHex), testNow, "n", payBody), nil, payKey, ""},
		{"retry: new timestamp, nonce, ciphertext", byKey, retry, nil, payKey, `["100","SUCCESS"]`},
		{"timestamp 4 min ahead", byKey, wxRequest(t, k, wxPubKeyID, testNow.Add(4*time.Minute), "n", payBody), nil, payKey, ""},
		{"event type no business event names", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", wxBody(t, wxEvent("EV-9", "TRANSACTION.REFUND", wxTransaction("REFUND", 100)))),
			ErrMalformed, "", ""},
		{"refund", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", wxBody(t, refund)), nil,
			refundKey, `["999","SUCCESS"]`},
		{"unknown event type", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", wxBody(t, noIDs)), ErrMalformed, "", ""},
		{"no secret: notification id", noSecret, valid, nil, "EV-2018022511223320873", `["TRANSACTION.SUCCESS"]`},
		{"tampered body", byKey, withReqBody(valid, []byte(strings.Replace(string(valid.Body), "EV-2018", "EV-2019", 1))), ErrSignature, "", ""},
		{"tampered nonce", byKey, hdr(valid, "Wechatpay-Nonce", "other"), ErrSignature, "", ""},
		{"wrong key", byKey, wxRequest(t, other, wxPubKeyID, testNow, "n", payBody), ErrSignature, "", ""},
		{"unknown serial", byKey, hdr(valid, "Wechatpay-Serial", "PUB_KEY_ID_0000"), ErrSignature, "", ""},
		{"key of another certificate", byCert, wxRequest(t, k, "63", testNow, "n", payBody), ErrSignature, "", ""},
		{"stale timestamp", byKey, wxRequest(t, k, wxPubKeyID, testNow.Add(-6*time.Minute), "n", payBody), ErrSignature, "", ""},
		{"future timestamp", byKey, wxRequest(t, k, wxPubKeyID, testNow.Add(6*time.Minute), "n", payBody), ErrSignature, "", ""},
		{"SIGNTEST probe", byKey, hdr(valid, "Wechatpay-Signature", "WECHATPAY/SIGNTEST/"+valid.Header.Get("Wechatpay-Signature")), ErrSignature, "", ""},
		{"no signature", byKey, hdr(valid, "Wechatpay-Signature", ""), ErrSignature, "", ""},
		{"no signature type", byKey, hdr(valid, "Wechatpay-Signature-Type", ""), nil, payKey, ""},
		{"SM2 signature type", byKey, hdr(valid, "Wechatpay-Signature-Type", "WECHATPAY2-SM2-WITH-SM3"), ErrSignature, "", ""},
		{"no serial", byKey, hdr(valid, "Wechatpay-Serial", ""), ErrSignature, "", ""},
		{"no timestamp", byKey, hdr(valid, "Wechatpay-Timestamp", ""), ErrSignature, "", ""},
		{"no nonce", byKey, hdr(valid, "Wechatpay-Nonce", ""), ErrSignature, "", ""},
		{"bad timestamp", byKey, hdr(valid, "Wechatpay-Timestamp", "soon"), ErrSignature, "", ""},
		{"signature not base64", byKey, hdr(valid, "Wechatpay-Signature", "%%%"), ErrSignature, "", ""},
		{"wrong APIv3 key", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", wrongAPIKey), ErrMalformed, "", ""},
		{"signed garbage", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", []byte("not json")), ErrMalformed, "", ""},
		{"signed JSON without resource", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", []byte(`{"id":"EV-1"}`)), ErrMalformed, "", ""},
		{"signed JSON without id", noSecret, wxRequest(t, k, wxPubKeyID, testNow, "n", []byte(`{"event_type":"X"}`)), ErrMalformed, "", ""},
		{"verify off", Config{NoVerify: true, Secret: wxAPIv3Key}, hdr(valid, "Wechatpay-Signature", ""), nil, payKey, ""},
		{"pinned mchid", withMch(byKey, "1900000109", "1230000109"), valid, nil, payKey, ""},
		{"pinned mchid, refund", withMch(byKey, "1230000109"), wxRequest(t, k, wxPubKeyID, testNow, "n", wxBody(t, refund)), nil,
			refundKey, ""},
		{"another merchant's notification", withMch(byKey, "1900000109"), valid, ErrSignature, "", ""},
		{"another merchant's, verify off", withMch(Config{NoVerify: true, Secret: wxAPIv3Key}, "1900000109"), valid, ErrSignature, "", ""},
		{"resource without mchid, pinned", withMch(byKey, "1230000109"), wxRequest(t, k, wxPubKeyID, testNow, "n", wxBody(t, noIDs)), ErrSignature, "", ""},
		{"within a configured tolerance", Config{PublicKey: pub, PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key, Tolerance: 10 * time.Minute},
			wxRequest(t, k, wxPubKeyID, testNow.Add(-8*time.Minute), "n", payBody), nil, payKey, ""},
		{"beyond a configured tolerance", Config{PublicKey: pub, PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key, Tolerance: time.Minute},
			wxRequest(t, k, wxPubKeyID, testNow.Add(-2*time.Minute), "n", payBody), ErrSignature, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := verifies(t, "wechatpay", c.cfg, c.req, c.wantErr, c.key)
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
		{"certificate only", Config{Certificates: [][]byte{testCert(t, k, bigInt(5), "c")}}, true},
	}
	for _, c := range cases {
		_, err := New("wechatpay", c.cfg)
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
	checkSuccess(t, mustNew(t, "wechatpay", Config{NoVerify: true}), http.Header{}, []successCase{
		{200, ok, true}, {204, ok, true}, {201, ok, false}, {202, ok, false}, {400, ok, false}, {500, ok, false},
	})
}

func FuzzWechatPay(f *testing.F) {
	k, _ := platformtest.Keys(f)
	pay := wxEvent("EV-1", "TRANSACTION.SUCCESS", wxTransaction("SUCCESS", 1))
	good := wxRequest(f, k, wxPubKeyID, testNow, "nonce", wxBody(f, pay))
	f.Add(good.Body, good.Header.Get("Wechatpay-Signature"), good.Header.Get("Wechatpay-Timestamp"), "nonce", wxPubKeyID)
	f.Add([]byte(`{"id":"x","resource":{"nonce":"123456789012","ciphertext":"AAAA"}}`), "WECHATPAY/SIGNTEST/abc", "0", "", "")
	f.Add([]byte(`{"resource":null}`), "", "99999999999999999999", "n", "0")
	verifying := mustNew(f, "wechatpay", Config{PublicKey: platformtest.PublicKeyPEM(f, &k.PublicKey), PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key})
	open := mustNew(f, "wechatpay", Config{NoVerify: true, Secret: wxAPIv3Key})
	openNoSecret := mustNew(f, "wechatpay", Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte, sig, ts, nonce, serial string) {
		r := &Request{Method: http.MethodPost, Body: body, Now: testNow, Header: http.Header{
			"Wechatpay-Signature": {sig}, "Wechatpay-Timestamp": {ts}, "Wechatpay-Nonce": {nonce}, "Wechatpay-Serial": {serial},
		}}
		fuzzVerify(t, r, func(n *Notification) {
			if n.Key == "" {
				t.Fatalf("key %q", n.Key)
			}
			if n.Extra != nil {
				n.Extra("amount.total")
			}
		}, verifying, open, openNoSecret)
	})
}
