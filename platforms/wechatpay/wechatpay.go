// Package wechatpay is the WeChat Pay API v3 preset: the signed JSON
// notification, its resource decrypted with the APIv3 key and classified
// into the order's business events. Its retry schedule, bill traits and
// order naming serve the v2 preset too (package wechatpayv2).
package wechatpay

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// Preset is WeChat Pay API v3's: answered 200, an order's
// business events read from the encrypted resource, pinned by mchid, a
// signed time the SDKs hold to 5 minutes.
var Preset = &keying.Preset{
	Name: "wechatpay", Title: "WeChat Pay",
	Ack: keying.Ack{Status: 200},
	// WeChat Pay API v3, 支付通知 (pay.weixin.qq.com/docs/merchant/apis/
	// jsapi-payment/payment-notice.html): "通知频率为
	// 15s/15s/30s/3m/10m/20m/30m/30m/30m/60m/3h/3h/3h/6h/6h - 总计 24h4m".
	Schedule: Schedule,
	Orders:   true, Extra: true, SecretFor: "the APIv3 key",
	// wechatpay-go's notify handler accepts 5 minutes.
	SignedFor: 5 * time.Minute,
	SignedAt:  signedAt,
}

// WechatPay verifies WeChat Pay API v3 notifications.
//
// Signature: Wechatpay-Signature is SHA256withRSA over
// "<Wechatpay-Timestamp>\n<Wechatpay-Nonce>\n<body>\n" with the key that
// Wechatpay-Serial names: Config.PublicKey answering to Config.PublicKeyID
// (WeChat Pay's platform public key), or one of Config.Certificates (platform
// certificates, named by their serial number in hex). An unknown serial, a
// timestamp outside the tolerance (5 min) or a WECHATPAY/SIGNTEST/ probe
// fails like any bad signature.
//
// With Config.Secret (the 32-byte APIv3 key) the resource is decrypted
// (AEAD_AES_256_GCM) and:
//
//   - Key: the business event of the order, {mchid}:{transaction_id}:<event>
//     (Order {mchid}:{transaction_id}); in service-provider (服务商) mode,
//     whose resources carry sp_mchid/sub_mchid (and sp_appid/sub_appid)
//     instead of mchid, the order is the sub-merchant's,
//     {sub_mchid}:{transaction_id}. The event by event_type, as WeChat
//     Pay's notification documentation names them (pay.weixin.qq.com, "支付
//     结果通知" and "退款结果通知"): paid for TRANSACTION.SUCCESS (a payment
//     re-sent later, under a new notification id, is the same event);
//     refund:{out_refund_no} for REFUND.SUCCESS, and the other refund
//     outcomes as that refund's own events, refund:{out_refund_no}:abnormal
//     (REFUND.ABNORMAL) and refund:{out_refund_no}:closed (REFUND.CLOSED).
//     Another event_type, or a resource without a merchant (mchid or
//     sub_mchid), transaction_id or (for refunds) out_refund_no, is
//     ErrMalformed naming what is missing.
//
//   - Money: amount.refund for refunds, else amount.total, both in fen,
//     with amount.currency (CNY when absent).
//
//   - Fingerprint: amount.refund and refund_status for refunds, else
//     amount.total and trade_state.
//
//   - Extra: dot paths into the decrypted resource
//     ({idempotency.wechatpay.transaction_id}, …amount.total).
//
//   - Config.MchIDs, when set, pins the resource's mchid, or in
//     service-provider mode its sp_mchid or sub_mchid (either may be
//     pinned): another merchant's notification is ErrMerchant, a
//     resource that names no merchant ErrMalformed (mchid needs Secret).
//
// Without Secret: Key {id} (the notification id, the same on every retry),
// fingerprint event_type, no Extra.
//
// Success: 200 or 204.
type WechatPay struct {
	// keys maps a normalised serial (normSerial) to its verification key.
	keys     map[string]*rsa.PublicKey
	info     []keying.KeyInfo // the keys as configured (keys.go)
	aead     cipher.AEAD
	noVerify bool
	tol      time.Duration
	mchIDs   []string
}

// Config is what a route configures WeChat Pay's (API v3) check with.
// Files are read by the caller; PEM blocks arrive as bytes.
type Config struct {
	// Secret is the APIv3 key, which opens the encrypted resource.
	Secret string
	// PublicKey is WeChat Pay's platform public key (PEM), which answers
	// to PublicKeyID (PUB_KEY_ID_…).
	PublicKey   []byte
	PublicKeyID string
	// Certificates are platform certificates (PEM), the older way.
	Certificates [][]byte
	// MchIDs pins notifications to these merchants (the decrypted
	// resource's mchid, which needs Secret); empty accepts any.
	MchIDs []string
	// NoVerify runs the check without signatures (`verify off`).
	NoVerify bool
	// Tolerance for Wechatpay-Timestamp; 0 means keying.DefaultTolerance.
	Tolerance time.Duration
}

// New returns WeChat Pay's check configured with cfg. Errors read
// "wechatpay: <what>" and wrap keying.ErrNeedsSecret when no platform key
// is given.
func New(cfg Config) (keying.Platform, error) {
	w := &WechatPay{keys: map[string]*rsa.PublicKey{}, noVerify: cfg.NoVerify, tol: keying.TimeTolerance(cfg.Tolerance), mchIDs: cfg.MchIDs}
	if len(cfg.MchIDs) > 0 && cfg.Secret == "" {
		return nil, errors.New("wechatpay: mchid needs secret (the APIv3 key): the merchant is read from the decrypted resource")
	}
	if len(bytes.TrimSpace(cfg.PublicKey)) > 0 {
		if strings.TrimSpace(cfg.PublicKeyID) == "" {
			return nil, errors.New("wechatpay: public_key needs public_key_id (the Wechatpay-Serial it answers to, PUB_KEY_ID_…)")
		}
		k, err := keying.ParseRSAPublicKey(cfg.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("wechatpay: public_key: %v", err)
		}
		w.keys[keying.NormSerial(cfg.PublicKeyID)] = k
		w.info = append(w.info, keying.KeyInfo{ID: strings.TrimSpace(cfg.PublicKeyID), NotAfter: keying.KeyInfoOf(cfg.PublicKey, "").NotAfter})
	}
	for _, pemData := range cfg.Certificates {
		certs, err := keying.ParseCertificates(pemData)
		if err != nil {
			return nil, fmt.Errorf("wechatpay: certificate: %v", err)
		}
		for _, c := range certs {
			k, err := keying.CertRSAKey(c)
			if err != nil {
				return nil, fmt.Errorf("wechatpay: certificate: %v", err)
			}
			w.keys[keying.NormSerial(keying.CertSerial(c))] = k
			w.info = append(w.info, keying.KeyInfo{ID: keying.CertSerial(c), NotAfter: c.NotAfter})
		}
	}
	if len(w.keys) == 0 && !cfg.NoVerify {
		return nil, keying.NeedsSecret("wechatpay", "public_key with public_key_id, or the platform certificate(s)")
	}
	if cfg.Secret != "" {
		if len(cfg.Secret) != 32 {
			return nil, fmt.Errorf("wechatpay: the APIv3 key (secret) must be 32 bytes, got %d", len(cfg.Secret))
		}
		block, err := aes.NewCipher([]byte(cfg.Secret))
		if err != nil {
			return nil, fmt.Errorf("wechatpay: %v", err)
		}
		if w.aead, err = cipher.NewGCM(block); err != nil {
			return nil, fmt.Errorf("wechatpay: %v", err)
		}
	}
	return w, nil
}

func (*WechatPay) Name() string { return "wechatpay" }

// wechatSigntestPrefix marks WeChat Pay's probes that check whether a
// merchant verifies signatures at all.
const wechatSigntestPrefix = "WECHATPAY/SIGNTEST/"

func (w *WechatPay) Verify(r *keying.Request) (*keying.Notification, error) {
	if !w.noVerify {
		if err := w.verify(r); err != nil {
			return nil, err
		}
	}
	var env struct {
		ID        string `json:"id"`
		EventType string `json:"event_type"`
		Resource  *struct {
			Algorithm      string `json:"algorithm"`
			Ciphertext     string `json:"ciphertext"`
			AssociatedData string `json:"associated_data"`
			Nonce          string `json:"nonce"`
		} `json:"resource"`
	}
	if err := json.Unmarshal(r.Body, &env); err != nil {
		return nil, keying.Malformed("wechatpay", "body is not a notification: %v", err)
	}
	n := &keying.Notification{Fields: keying.NewFields(r)}
	if w.aead == nil {
		if env.ID == "" {
			return nil, keying.Malformed("wechatpay", "no id in the notification")
		}
		n.Key = env.ID
		n.Fingerprint = keying.Material(env.EventType)
		return n, nil
	}
	if env.Resource == nil {
		return nil, keying.Malformed("wechatpay", "no resource to decrypt")
	}
	res := env.Resource
	if res.Algorithm != "" && res.Algorithm != "AEAD_AES_256_GCM" {
		return nil, keying.Malformed("wechatpay", "unsupported resource algorithm %s", keying.Clip(res.Algorithm))
	}
	if len(res.Nonce) != w.aead.NonceSize() {
		return nil, keying.Malformed("wechatpay", "resource nonce must be %d bytes", w.aead.NonceSize())
	}
	ct, err := base64.StdEncoding.DecodeString(res.Ciphertext)
	if err != nil {
		return nil, keying.Malformed("wechatpay", "resource ciphertext is not base64")
	}
	plain, err := w.aead.Open(nil, []byte(res.Nonce), ct, []byte(res.AssociatedData))
	if err != nil {
		return nil, keying.Malformed("wechatpay", "resource does not decrypt (wrong APIv3 key?)")
	}
	n.Decrypted = plain
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.UseNumber()
	var resource any
	if err := dec.Decode(&resource); err != nil {
		return nil, keying.Malformed("wechatpay", "decrypted resource is not JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, keying.Malformed("wechatpay", "decrypted resource is not JSON: trailing data")
	}
	get := func(path string) string {
		v, ok := keying.JSONPath(resource, path)
		if !ok {
			return ""
		}
		return keying.JSONString(v)
	}
	n.Extra = func(path string) (string, bool) {
		v, ok := keying.JSONPath(resource, path)
		if !ok {
			return "", false
		}
		return keying.JSONString(v), true
	}
	if err := w.checkMchID(get); err != nil {
		return nil, err
	}
	if err := w.classify(n, env.EventType, get); err != nil {
		return nil, err
	}
	// The decrypted resource is the signed content (without the APIv3
	// key, above, only the envelope is read: it names none).
	n.MerchantRefs = keying.SearchRefs(get("out_trade_no"), get("out_refund_no"))
	return n, nil
}

// checkMchID refuses another merchant's notification when mchid is set: a
// direct merchant's resource names it in mchid, a service provider's
// (服务商) in sp_mchid and sub_mchid, either of which may be pinned.
func (w *WechatPay) checkMchID(get func(string) string) error {
	if len(w.mchIDs) == 0 {
		return nil
	}
	named := []string{}
	for _, f := range []string{"mchid", "sp_mchid", "sub_mchid"} {
		if v := get(f); v != "" {
			if keying.Pinned(w.mchIDs, v) {
				return nil
			}
			named = append(named, f+" "+keying.Clip(v))
		}
	}
	if len(named) == 0 {
		return keying.Malformed("wechatpay", "the resource names no merchant (mchid, or sp_mchid and sub_mchid) to match the configured mchid")
	}
	return keying.MerchantErr("wechatpay", "%s: not one of the configured mchid", strings.Join(named, ", "))
}

// Merchant is whose order a decrypted resource is: mchid for a direct
// merchant, sub_mchid in service-provider (服务商) mode, where the resource
// carries sp_mchid and sub_mchid instead of mchid.
func Merchant(get func(string) string) string {
	if sub := get("sub_mchid"); sub != "" {
		return sub
	}
	return get("mchid")
}

// classify names the business event of a decrypted resource (see
// WechatPay), and the key, money and fingerprint with it.
func (w *WechatPay) classify(n *keying.Notification, eventType string, get func(string) string) error {
	const p = "wechatpay"
	mchid, txID := Merchant(get), get("transaction_id")
	var event, amount string
	switch eventType {
	case "TRANSACTION.SUCCESS":
		event, amount = keying.EventPaid, get("amount.total")
		n.Fingerprint = keying.Material(get("amount.total"), get("trade_state"))
	case "REFUND.SUCCESS", "REFUND.ABNORMAL", "REFUND.CLOSED":
		refundNo := get("out_refund_no")
		if refundNo == "" {
			return keying.Malformed(p, "%s without out_refund_no: which refund of the order it is cannot be told", eventType)
		}
		outcome := ""
		switch eventType {
		case "REFUND.ABNORMAL":
			outcome = "abnormal"
		case "REFUND.CLOSED":
			outcome = "closed"
		}
		event, amount = keying.RefundEvent(refundNo, outcome), get("amount.refund")
		n.Fingerprint = keying.Material(get("amount.refund"), get("refund_status"))
	default:
		return keying.Malformed(p, "unknown event_type %s: not a business event this preset knows", keying.Clip(eventType))
	}
	switch {
	case mchid == "":
		return keying.Malformed(p, "the resource names no merchant: neither mchid nor (service-provider mode) sub_mchid")
	case txID == "":
		return keying.Malformed(p, "the resource has no transaction_id")
	}
	if err := Order(n, p, mchid, txID, event, amount, get("amount.currency")); err != nil {
		return err
	}
	n.At = keying.RFC3339Time(get("success_time"))
	return nil
}

func (w *WechatPay) verify(r *keying.Request) error {
	const p = "wechatpay"
	sigB64, err := keying.SignatureHeader(p, r, "Wechatpay-Signature")
	if err != nil {
		return err
	}
	if strings.HasPrefix(sigB64, wechatSigntestPrefix) {
		return keying.SigErr(p, "signature probe (WECHATPAY/SIGNTEST)")
	}
	// Absent means RSA; the SM2 (national cryptography) variant is not
	// supported and must not be mistaken for a bad RSA signature silently.
	if st := r.Header.Get("Wechatpay-Signature-Type"); st != "" && st != "WECHATPAY2-SHA256-RSA2048" {
		return keying.SigErr(p, "unsupported Wechatpay-Signature-Type %s", keying.Clip(st))
	}
	serial, err := keying.SignatureHeader(p, r, "Wechatpay-Serial")
	if err != nil {
		return err
	}
	ts, err := keying.SignatureHeader(p, r, "Wechatpay-Timestamp")
	if err != nil {
		return err
	}
	nonce, err := keying.SignatureHeader(p, r, "Wechatpay-Nonce")
	if err != nil {
		return err
	}
	if _, err := keying.UnixTimestamp(p, "Wechatpay-Timestamp", ts, r.Now, w.tol, false); err != nil {
		return err
	}
	key, ok := w.keys[keying.NormSerial(serial)]
	if !ok {
		return keying.SigErr(p, "unknown Wechatpay-Serial %s", keying.Clip(serial))
	}
	sig, ok := keying.DecodeB64Sig(sigB64)
	if !ok {
		return keying.SigErr(p, "Wechatpay-Signature is not base64")
	}
	msg := make([]byte, 0, len(ts)+len(nonce)+len(r.Body)+3)
	msg = append(msg, ts...)
	msg = append(msg, '\n')
	msg = append(msg, nonce...)
	msg = append(msg, '\n')
	msg = append(msg, r.Body...)
	msg = append(msg, '\n')
	if !keying.VerifyPKCS1(key, crypto.SHA256, msg, sig) {
		return keying.SigErr(p, "Wechatpay-Signature does not match")
	}
	return nil
}

// Success: WeChat Pay v3 takes 200 or 204 as received.
func (*WechatPay) Success(status int, _ http.Header, _ []byte) bool {
	return status == http.StatusOK || status == http.StatusNoContent
}

// RetryWindow: 15 notifications over 15s, 15s, 30s, 3m, 10m, 20m, 30m, 30m,
// 30m, 60m, 3h, 3h, 3h, 6h, 6h (24h4m).
func (*WechatPay) RetryWindow() time.Duration { return 24*time.Hour + 4*time.Minute }

// Order sets n's order (<merchant>:<transaction>), event, key and
// settlement, and its money from an amount in fen (currency CNY unless
// named), for both WeChat Pay presets (p).
func Order(n *keying.Notification, p, mchID, tx, event, fen, currency string) error {
	if fen != "" {
		if currency == "" {
			currency = "CNY"
		}
		m, err := keying.FromMinor(fen, currency)
		if err != nil {
			return keying.Malformed(p, "%v", err)
		}
		n.Money = m
	}
	n.Order, n.Event = mchID+":"+tx, event
	n.Key = n.Order + ":" + event
	n.Settles = keying.EventSettles(event)
	return nil
}

func (w *WechatPay) Keys() []keying.KeyInfo { return w.info }

// VerifiedBy: the key Wechatpay-Serial names.
func (w *WechatPay) VerifiedBy(r *keying.Request) string {
	serial := keying.NormSerial(r.Header.Get("Wechatpay-Serial"))
	for _, k := range w.info {
		if keying.NormSerial(k.ID) == serial {
			return k.ID
		}
	}
	return ""
}

var _ keying.KeyReporter = (*WechatPay)(nil)

// Schedule is WeChat Pay's retry schedule, the same for both API versions.
var Schedule = keying.Schedule{15 * time.Second, 15 * time.Second, 30 * time.Second, 3 * time.Minute, 10 * time.Minute, 20 * time.Minute,
	30 * time.Minute, 30 * time.Minute, 30 * time.Minute, time.Hour, 3 * time.Hour, 3 * time.Hour, 3 * time.Hour, 6 * time.Hour, 6 * time.Hour}
