package signer

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// WechatPay signs WeChat Pay API v3 notifications: the resource is
// encrypted with AEAD_AES_256_GCM under the APIv3 key, and the envelope is
// signed with SHA256withRSA over "<timestamp>\n<nonce>\n<body>\n".
type WechatPay struct {
	// Key is WeChat Pay's platform key (its public half is the merchant's
	// public_key or is in the platform certificate).
	Key *rsa.PrivateKey
	// Serial goes in Wechatpay-Serial: the public key id (PUB_KEY_ID_…)
	// or the platform certificate's serial (SerialHex).
	Serial string
	// APIv3Key is the merchant's 32-byte APIv3 key.
	APIv3Key string
}

// WechatPayEvent is one notification before encryption.
type WechatPayEvent struct {
	// ID is the notification id, the same on every retry.
	ID string
	// EventType is TRANSACTION.SUCCESS, REFUND.SUCCESS, …
	EventType string
	// Resource is the plaintext JSON of the resource
	// (WechatPayTransaction, WechatPayRefund).
	Resource string
	// Summary is the human summary; optional.
	Summary string
	// Nonce is the 12-character nonce the resource is encrypted with;
	// default: a fresh one on each Body, as each retry has.
	Nonce string
	// CreateTime is the envelope's create_time; default: now.
	CreateTime time.Time
	// OriginalType is the resource's original_type and associated_data:
	// "transaction" (the default) or "refund".
	OriginalType string
}

// WechatPayTransaction is the decrypted resource of a TRANSACTION.SUCCESS
// notification, shaped as WeChat Pay's documentation shows it.
func WechatPayTransaction(transactionID, outTradeNo, tradeState string, total int) string {
	return fmt.Sprintf(`{"transaction_id":%q,"amount":{"payer_total":%d,"total":%d,"currency":"CNY","payer_currency":"CNY"},"mchid":"1230000109","trade_state":%q,"bank_type":"CMC","success_time":"2026-03-14T17:26:32+08:00","payer":{"openid":"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},"out_trade_no":%q,"appid":"wxd678efh567hg6787","trade_state_desc":"支付成功","trade_type":"NATIVE","attach":""}`,
		transactionID, total, total, tradeState, outTradeNo)
}

// Body is the notification envelope with the resource freshly encrypted
// (a new 12-character nonce each call, as each retry has, unless ev.Nonce
// is set).
func (w WechatPay) Body(ev WechatPayEvent) ([]byte, error) {
	block, err := aes.NewCipher([]byte(w.APIv3Key))
	if err != nil {
		return nil, fmt.Errorf("signer: APIv3 key: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("signer: %w", err)
	}
	nonce := ev.Nonce
	if nonce == "" {
		nonce = Nonce(12)
	}
	if len(nonce) != gcm.NonceSize() {
		// gcm.Seal would panic.
		return nil, fmt.Errorf("signer: resource nonce %q is not %d bytes", nonce, gcm.NonceSize())
	}
	created := ev.CreateTime
	if created.IsZero() {
		created = time.Now()
	}
	ad := ev.OriginalType
	if ad == "" {
		ad = "transaction"
	}
	if ev.Summary == "" {
		ev.Summary = "支付成功"
	}
	body, err := json.Marshal(map[string]any{
		"id":            ev.ID,
		"create_time":   created.Format(time.RFC3339),
		"resource_type": "encrypt-resource",
		"event_type":    ev.EventType,
		"summary":       ev.Summary,
		"resource": map[string]string{
			"original_type":   ad,
			"algorithm":       "AEAD_AES_256_GCM",
			"ciphertext":      base64.StdEncoding.EncodeToString(gcm.Seal(nil, []byte(nonce), []byte(ev.Resource), []byte(ad))),
			"associated_data": ad,
			"nonce":           nonce,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("signer: %w", err)
	}
	return body, nil
}

// Header signs body at ts with a fresh nonce: Wechatpay-Timestamp,
// -Nonce, -Signature, -Serial and -Signature-Type.
func (w WechatPay) Header(body []byte, ts time.Time) (http.Header, error) {
	return w.HeaderWithNonce(body, ts, Nonce(32))
}

// HeaderWithNonce is Header with the given Wechatpay-Nonce, for callers that
// need the same header on every run or name the nonce themselves.
func (w WechatPay) HeaderWithNonce(body []byte, ts time.Time, nonce string) (http.Header, error) {
	tsS := strconv.FormatInt(ts.Unix(), 10)
	msg := tsS + "\n" + nonce + "\n" + string(body) + "\n"
	sig, err := SignPKCS1(w.Key, crypto.SHA256, []byte(msg))
	if err != nil {
		return nil, err
	}
	return http.Header{
		"Wechatpay-Timestamp":      {tsS},
		"Wechatpay-Nonce":          {nonce},
		"Wechatpay-Signature":      {base64.StdEncoding.EncodeToString(sig)},
		"Wechatpay-Serial":         {w.Serial},
		"Wechatpay-Signature-Type": {"WECHATPAY2-SHA256-RSA2048"},
		"Content-Type":             {"application/json"},
	}, nil
}

// Notification is Body and Header at the current time: one delivery.
func (w WechatPay) Notification(ev WechatPayEvent) ([]byte, http.Header, error) {
	body, err := w.Body(ev)
	if err != nil {
		return nil, nil, err
	}
	h, err := w.Header(body, time.Now())
	if err != nil {
		return nil, nil, err
	}
	return body, h, nil
}
