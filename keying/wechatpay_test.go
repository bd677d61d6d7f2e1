package keying

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	wxAPIv3Key  = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4" // 32 bytes
	wxPubKeyID  = "PUB_KEY_ID_0114232134912410000000000000"
	wxSerialHex = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"
)

// wxTransaction is the decrypted resource of a TRANSACTION.SUCCESS
// notification, shaped as WeChat Pay's documentation shows it.
func wxTransaction(state string, total int) string {
	return fmt.Sprintf(`{"transaction_id":"1217752501201407033233368018","amount":{"payer_total":%d,"total":%d,"currency":"CNY","payer_currency":"CNY"},"mchid":"1230000109","trade_state":%q,"bank_type":"CMC","success_time":"2026-03-14T17:26:32+08:00","payer":{"openid":"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},"out_trade_no":"1217752501201407033233368018","appid":"wxd678efh567hg6787","trade_state_desc":"支付成功","trade_type":"MICROPAY","attach":"自定义数据"}`, total, total, state)
}

func wxRefund(status string) string {
	return fmt.Sprintf(`{"mchid":"1900000100","transaction_id":"1008450740201411110005820873","out_trade_no":"20150806125346","refund_id":"50200207182018070300011301001","out_refund_no":"7752501201407033233368018","refund_status":%q,"success_time":"2026-03-14T17:30:00+08:00","user_received_account":"招商银行信用卡0403","amount":{"total":999,"refund":999,"payer_total":999,"payer_refund":999}}`, status)
}

// wxEncrypt encrypts a resource as WeChat Pay does: AEAD_AES_256_GCM with
// the APIv3 key, a 12-character nonce and the associated data.
func wxEncrypt(t testing.TB, key, nonce, ad, plain string) map[string]string {
	t.Helper()
	block, err := aes.NewCipher([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	ct := gcm.Seal(nil, []byte(nonce), []byte(plain), []byte(ad))
	return map[string]string{
		"original_type":   "transaction",
		"algorithm":       "AEAD_AES_256_GCM",
		"ciphertext":      base64.StdEncoding.EncodeToString(ct),
		"associated_data": ad,
		"nonce":           nonce,
	}
}

type wxNote struct {
	id, event, plain string
	encNonce         string // resource nonce
	key              string // APIv3 key used to encrypt
}

func (n wxNote) body(t testing.TB) []byte {
	if n.encNonce == "" {
		n.encNonce = "fdasflkja484"
	}
	if n.key == "" {
		n.key = wxAPIv3Key
	}
	return mustJSON(t, map[string]any{
		"id":            n.id,
		"create_time":   "2026-03-14T17:26:33+08:00",
		"resource_type": "encrypt-resource",
		"event_type":    n.event,
		"summary":       "支付成功",
		"resource":      wxEncrypt(t, n.key, n.encNonce, "transaction", n.plain),
	})
}

// wxRequest signs body as WeChat Pay's docs describe: SHA256withRSA over
// "ts\nnonce\nbody\n", base64, with the serial of the signing key.
func wxRequest(t testing.TB, k *rsa.PrivateKey, serial string, ts time.Time, nonce string, body []byte) *Request {
	t.Helper()
	tsS := strconv.FormatInt(ts.Unix(), 10)
	msg := tsS + "\n" + nonce + "\n" + string(body) + "\n"
	sig := base64.StdEncoding.EncodeToString(signPKCS1(t, k, crypto.SHA256, []byte(msg)))
	return &Request{
		Method: http.MethodPost,
		Header: http.Header{
			"Wechatpay-Timestamp":      {tsS},
			"Wechatpay-Nonce":          {nonce},
			"Wechatpay-Signature":      {sig},
			"Wechatpay-Serial":         {serial},
			"Wechatpay-Signature-Type": {"WECHATPAY2-SHA256-RSA2048"},
		},
		Body: body,
		Now:  testNow,
	}
}

func hdr(r *Request, kv ...string) *Request {
	c := *r
	c.Header = r.Header.Clone()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			c.Header.Del(kv[i])
		} else {
			c.Header.Set(kv[i], kv[i+1])
		}
	}
	return &c
}

func TestWechatPay(t *testing.T) {
	k, other := testKeys(t)
	serial, _ := new(big.Int).SetString(wxSerialHex, 16)
	byKey := Config{PublicKey: pkixPEM(t, &k.PublicKey), PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key}
	byCert := Config{Certificates: [][]byte{testCert(t, other, bigInt(99), "old"), testCert(t, k, serial, "wechatpay")}, Secret: wxAPIv3Key}
	noSecret := Config{PublicKey: pkixPEM(t, &k.PublicKey), PublicKeyID: wxPubKeyID}

	pay := wxNote{id: "EV-2018022511223320873", event: "TRANSACTION.SUCCESS", plain: wxTransaction("SUCCESS", 100)}
	valid := wxRequest(t, k, wxPubKeyID, testNow, "5K8264ILTKCH16CQ2502SI8ZNMTM67VS", pay.body(t))
	const payKey = "wechatpay:TRANSACTION.SUCCESS:1217752501201407033233368018"

	// A retry: re-signed later, new nonce, resource re-encrypted.
	retryNote := pay
	retryNote.encNonce = "0123456789ab"
	retry := wxRequest(t, k, wxPubKeyID, testNow.Add(-time.Minute), "OTHERNONCE", retryNote.body(t))
	refund := wxNote{id: "EV-2", event: "REFUND.SUCCESS", plain: wxRefund("SUCCESS")}
	noIDs := wxNote{id: "EV-3", event: "PROFITSHARING.SUCCESS", plain: `{"order_id":"3008450740201411110007820472"}`}
	wrongAPIKey := pay
	wrongAPIKey.key = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

	cases := []struct {
		name    string
		cfg     Config
		req     *Request
		wantErr error
		key     string
		fp      string
	}{
		{"public key", byKey, valid, nil, payKey, `["100","SUCCESS"]`},
		{"certificate serial", byCert, wxRequest(t, k, wxSerialHex, testNow, "n", pay.body(t)), nil, payKey, ""},
		{"certificate serial lower case", byCert, wxRequest(t, k, strings.ToLower(wxSerialHex), testNow, "n", pay.body(t)), nil, payKey, ""},
		{"retry: new timestamp, nonce, ciphertext", byKey, retry, nil, payKey, `["100","SUCCESS"]`},
		{"timestamp 4 min ahead", byKey, wxRequest(t, k, wxPubKeyID, testNow.Add(4*time.Minute), "n", pay.body(t)), nil, payKey, ""},
		{"new event", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", wxNote{id: "EV-9", event: "TRANSACTION.REFUND", plain: wxTransaction("REFUND", 100)}.body(t)), nil,
			"wechatpay:TRANSACTION.REFUND:1217752501201407033233368018", `["100","REFUND"]`},
		{"refund", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", refund.body(t)), nil,
			"wechatpay:REFUND.SUCCESS:50200207182018070300011301001", `["999","SUCCESS"]`},
		{"resource without ids", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", noIDs.body(t)), nil, "wechatpay:EV-3", ""},
		{"no secret: notification id", noSecret, valid, nil, "wechatpay:EV-2018022511223320873", `["TRANSACTION.SUCCESS"]`},
		{"tampered body", byKey, withReqBody(valid, []byte(strings.Replace(string(valid.Body), "EV-2018", "EV-2019", 1))), ErrSignature, "", ""},
		{"tampered nonce", byKey, hdr(valid, "Wechatpay-Nonce", "other"), ErrSignature, "", ""},
		{"wrong key", byKey, wxRequest(t, other, wxPubKeyID, testNow, "n", pay.body(t)), ErrSignature, "", ""},
		{"unknown serial", byKey, hdr(valid, "Wechatpay-Serial", "PUB_KEY_ID_0000"), ErrSignature, "", ""},
		{"key of another certificate", byCert, wxRequest(t, k, "63", testNow, "n", pay.body(t)), ErrSignature, "", ""},
		{"stale timestamp", byKey, wxRequest(t, k, wxPubKeyID, testNow.Add(-6*time.Minute), "n", pay.body(t)), ErrSignature, "", ""},
		{"future timestamp", byKey, wxRequest(t, k, wxPubKeyID, testNow.Add(6*time.Minute), "n", pay.body(t)), ErrSignature, "", ""},
		{"SIGNTEST probe", byKey, hdr(valid, "Wechatpay-Signature", "WECHATPAY/SIGNTEST/"+valid.Header.Get("Wechatpay-Signature")), ErrSignature, "", ""},
		{"no signature", byKey, hdr(valid, "Wechatpay-Signature", ""), ErrSignature, "", ""},
		{"no signature type", byKey, hdr(valid, "Wechatpay-Signature-Type", ""), nil, payKey, ""},
		{"SM2 signature type", byKey, hdr(valid, "Wechatpay-Signature-Type", "WECHATPAY2-SM2-WITH-SM3"), ErrSignature, "", ""},
		{"no serial", byKey, hdr(valid, "Wechatpay-Serial", ""), ErrSignature, "", ""},
		{"no timestamp", byKey, hdr(valid, "Wechatpay-Timestamp", ""), ErrSignature, "", ""},
		{"no nonce", byKey, hdr(valid, "Wechatpay-Nonce", ""), ErrSignature, "", ""},
		{"bad timestamp", byKey, hdr(valid, "Wechatpay-Timestamp", "soon"), ErrSignature, "", ""},
		{"signature not base64", byKey, hdr(valid, "Wechatpay-Signature", "%%%"), ErrSignature, "", ""},
		{"wrong APIv3 key", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", wrongAPIKey.body(t)), ErrMalformed, "", ""},
		{"signed garbage", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", []byte("not json")), ErrMalformed, "", ""},
		{"signed JSON without resource", byKey, wxRequest(t, k, wxPubKeyID, testNow, "n", []byte(`{"id":"EV-1"}`)), ErrMalformed, "", ""},
		{"signed JSON without id", noSecret, wxRequest(t, k, wxPubKeyID, testNow, "n", []byte(`{"event_type":"X"}`)), ErrMalformed, "", ""},
		{"verify off", Config{NoVerify: true, Secret: wxAPIv3Key}, hdr(valid, "Wechatpay-Signature", ""), nil, payKey, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := mustNew(t, "wechatpay", c.cfg).Verify(c.req)
			wantErr(t, err, c.wantErr)
			if err != nil {
				return
			}
			if n.Key != c.key {
				t.Fatalf("Key = %q, want %q", n.Key, c.key)
			}
			if c.fp != "" && n.Fingerprint != c.fp {
				t.Fatalf("Fingerprint = %s, want %s", n.Fingerprint, c.fp)
			}
			if c.cfg.Secret != "" && strings.Contains(c.key, "TRANSACTION") {
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

func withReqBody(r *Request, body []byte) *Request {
	c := *r
	c.Body = body
	return &c
}

func TestWechatPayConfig(t *testing.T) {
	k, _ := testKeys(t)
	cases := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"public key without id", Config{PublicKey: pkixPEM(t, &k.PublicKey)}, false},
		{"short APIv3 key", Config{PublicKey: pkixPEM(t, &k.PublicKey), PublicKeyID: "X", Secret: "short"}, false},
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
	p := mustNew(t, "wechatpay", Config{NoVerify: true})
	for status, want := range map[int]bool{200: true, 204: true, 201: false, 202: false, 400: false, 500: false} {
		if got := p.Success(status, http.Header{}, []byte(`{"code":"SUCCESS"}`)); got != want {
			t.Errorf("Success(%d) = %v", status, got)
		}
	}
}

func FuzzWechatPay(f *testing.F) {
	k, _ := testKeys(f)
	pay := wxNote{id: "EV-1", event: "TRANSACTION.SUCCESS", plain: wxTransaction("SUCCESS", 1)}
	good := wxRequest(f, k, wxPubKeyID, testNow, "nonce", pay.body(f))
	f.Add(good.Body, good.Header.Get("Wechatpay-Signature"), good.Header.Get("Wechatpay-Timestamp"), "nonce", wxPubKeyID)
	f.Add([]byte(`{"id":"x","resource":{"nonce":"123456789012","ciphertext":"AAAA"}}`), "WECHATPAY/SIGNTEST/abc", "0", "", "")
	f.Add([]byte(`{"resource":null}`), "", "99999999999999999999", "n", "0")
	verifying := mustNew(f, "wechatpay", Config{PublicKey: pkixPEM(f, &k.PublicKey), PublicKeyID: wxPubKeyID, Secret: wxAPIv3Key})
	open := mustNew(f, "wechatpay", Config{NoVerify: true, Secret: wxAPIv3Key})
	openNoSecret := mustNew(f, "wechatpay", Config{NoVerify: true})
	f.Fuzz(func(t *testing.T, body []byte, sig, ts, nonce, serial string) {
		r := &Request{Method: http.MethodPost, Body: body, Now: testNow, Header: http.Header{
			"Wechatpay-Signature": {sig}, "Wechatpay-Timestamp": {ts}, "Wechatpay-Nonce": {nonce}, "Wechatpay-Serial": {serial},
		}}
		for _, p := range []Platform{verifying, open, openNoSecret} {
			n, err := p.Verify(r)
			if err != nil {
				if !isSigOrMalformed(err) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				continue
			}
			if !strings.HasPrefix(n.Key, "wechatpay:") || len(n.Key) == len("wechatpay:") {
				t.Fatalf("key %q", n.Key)
			}
			if n.Extra != nil {
				n.Extra("amount.total")
			}
		}
	})
}
