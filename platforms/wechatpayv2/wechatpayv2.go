// Package wechatpayv2 is the WeChat Pay API v2 preset: the MD5 or
// HMAC-SHA256 signed XML notification (and the encrypted refund
// notification), classified into the order's business events.
package wechatpayv2

import (
	"bytes"
	"crypto/aes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/wechatpay"
)

// Preset is WeChat Pay API v2's: answered with the SUCCESS
// XML, an order's business events, pinned by mchid.
var Preset = &keying.Preset{
	Name: "wechatpay_v2", Title: "WeChat Pay",
	Ack: keying.Ack{Status: 200, Body: "<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>", ContentType: "application/xml"},
	// The v2 notify (pay.weixin.qq.com/wiki/doc/api/jsapi.php?chapter=9_7)
	// publishes v3's frequencies.
	Schedule: wechatpay.Schedule,
	Orders:   true, Extra: true,
}

// Bill is v3's (WeChat Pay has one bill for both API versions), but a
// service provider's route that pins its own mch_id keys its
// sub-merchants' orders under that mch_id, not the 特约商户号 a row names:
// reconciliation looks them up there, and tells a sub-merchant's from the
// sub_mch_id its notifications carried.
var Bill = func() *bill.Traits {
	b := *wechatpay.Bill
	b.SubMerchant = subMerchant
	return &b
}()

// subMerchant is the sub_mch_id of a journaled notification: signed in a
// payment's, the envelope's in a refund's (whose req_info decrypted under
// the provider's key, and whose envelope checkMchID let through).
func subMerchant(body []byte) string {
	fields, err := keying.ParseStrictXML(body)
	if err != nil {
		return ""
	}
	return fields["sub_mch_id"]
}

// WechatPayV2 verifies WeChat Pay API v2 payment result notifications (XML).
//
// Signature: sign is the upper-case hex MD5 (32 digits) or HMAC-SHA256 keyed
// by the API key (64 digits) of the direct children of <xml> other than sign
// and other than empty ones, sorted by name, k=v joined by "&", followed by
// "&key=<Config.Secret>". sign_type, when present, must agree with the
// length. The comparison is constant-time. The XML is read strictly
// (ParseStrictXML): a repeated element, an element inside a field, a
// DOCTYPE, a comment or text outside the root is ErrSignature, since the
// backend's XML parser could read a value that was not verified.
//
// Config.MchIDs pins mch_id, or in service-provider (服务商) mode, where a
// notification carries the sub-merchant's sub_mch_id beside the service
// provider's mch_id, either of them: another merchant's notification is
// ErrMerchant, one that names no mch_id ErrMalformed. Verifying, exactly one mchid is required: it is the
// merchant of every order's key (below), since a refund notification
// authenticates no merchant.
//
// Key: the business event of the order, {mchid}:{transaction_id}:<event>
// (Order {mchid}:{transaction_id}; transaction_id required), mchid being
// the route's one: a direct merchant's mch_id, a service provider's own,
// or the sub_mch_id a route is pinned to (with verify off and no single
// mchid, the notification's sub_mch_id, else its mch_id): paid for a payment
// notification with result_code SUCCESS, failed for FAIL. Money: total_fee
// (fen) with fee_type (CNY when absent). Fingerprint: total_fee,
// result_code. Success: a 2xx whose body is XML with return_code SUCCESS.
// Extra: every verified field by name.
//
// Refund notifications carry no sign but an encrypted req_info: AES-256-ECB
// keyed by the lower-case hex MD5 of the API key, PKCS #7 padded, holding
// an XML <root>. Being able to decrypt it into a refund is what WeChat Pay
// offers as authentication (it has no MAC), so any failure is ErrSignature.
// Its envelope's mch_id, sub_mch_id and appid are not signed, so they
// never make the key: a captured req_info replayed under another envelope
// is the same refund. Key: {mchid}:{transaction_id}:refund:{out_refund_no}
// (the route's mchid, as a payment's) for refund_status
// SUCCESS, and the other outcomes as that refund's own events,
// …:refund:{out_refund_no}:abnormal (CHANGE) and …:closed (REFUNDCLOSE),
// as v3 names them (WeChat Pay's "退款结果通知": refund_status SUCCESS,
// CHANGE, REFUNDCLOSE). Money: refund_fee (fen). Fingerprint: refund_fee,
// total_fee. Extra: the decrypted fields, then the outer ones.
// Decrypting needs Config.Secret even with NoVerify.
type WechatPayV2 struct {
	secret   []byte
	noVerify bool
	// refundKey is the AES-256 key for req_info; nil without a secret.
	refundKey []byte
	mchIDs    []string
}

// Config is what a route configures WeChat Pay's API v2 check with.
type Config struct {
	// Secret is the v2 API key (MD5 or HMAC-SHA256 signatures).
	Secret string
	// MchIDs pins notifications to these merchants (mch_id); empty
	// accepts any.
	MchIDs []string
	// NoVerify runs the check without signatures (`verify off`).
	NoVerify bool
}

// New returns WeChat Pay v2's check configured with cfg. Errors read
// "wechatpay_v2: <what>" and wrap keying.ErrNeedsSecret when the API key
// is missing.
func New(cfg Config) (keying.Platform, error) {
	if cfg.Secret == "" && !cfg.NoVerify {
		return nil, keying.NeedsSecret("wechatpay_v2", "secret (the API v2 key)")
	}
	if !cfg.NoVerify && len(cfg.MchIDs) != 1 {
		return nil, fmt.Errorf("wechatpay_v2: name exactly one mchid (got %d): the merchant whose API key secret is, "+
			"a service provider's own mch_id for all its sub-merchants; a refund notification signs no merchant, "+
			"so the merchant in its key comes from mchid", len(cfg.MchIDs))
	}
	w := &WechatPayV2{secret: []byte(cfg.Secret), noVerify: cfg.NoVerify, mchIDs: cfg.MchIDs}
	if cfg.Secret != "" {
		sum := md5.Sum([]byte(cfg.Secret))
		w.refundKey = []byte(hex.EncodeToString(sum[:])) // 32 bytes: AES-256
	}
	return w, nil
}

func (*WechatPayV2) Name() string { return "wechatpay_v2" }

func (w *WechatPayV2) Verify(r *keying.Request) (*keying.Notification, error) {
	fields, err := strictXML(r.Body)
	if err != nil {
		return nil, err
	}
	if fields["sign"] == "" && fields["req_info"] != "" {
		return w.refund(r, fields)
	}
	if !w.noVerify {
		if err := w.verify(fields); err != nil {
			return nil, err
		}
	}
	if err := w.checkMchID(fields); err != nil {
		return nil, err
	}
	tx := fields["transaction_id"]
	if tx == "" {
		return nil, keying.Malformed("wechatpay_v2", "no transaction_id")
	}
	event := keying.EventPaid
	switch rc := fields["result_code"]; rc {
	case "SUCCESS":
	case "FAIL":
		event = keying.EventFailed
	default:
		return nil, keying.Malformed("wechatpay_v2", "result_code %s is neither SUCCESS nor FAIL", keying.Clip(rc))
	}
	n := &keying.Notification{
		Fields:      keying.NewFields(r),
		Fingerprint: keying.Material(fields["total_fee"], fields["result_code"]),
		Extra: func(path string) (string, bool) {
			v, ok := fields[path]
			return v, ok
		},
	}
	if err := v2Order(n, w.merchant(fields), tx, event, fields["total_fee"], fields["fee_type"]); err != nil {
		return nil, err
	}
	n.At = keying.BeijingTime(fields["time_end"])
	n.MerchantRefs = keying.SearchRefs(fields["out_trade_no"])
	return n, nil
}

// merchant is whose order a notification is: the route's mchid (one when
// verifying), the one merchant a refund's key can name without trusting
// its unsigned envelope, so a payment and its refunds are one order;
// with verify off and no single mchid, the notification's sub_mch_id
// (service-provider mode) or mch_id, as it says.
func (w *WechatPayV2) merchant(fields map[string]string) string {
	if len(w.mchIDs) == 1 {
		return w.mchIDs[0]
	}
	if sub := fields["sub_mch_id"]; sub != "" {
		return sub
	}
	return fields["mch_id"]
}

// v2Order sets n's order, event, key and money.
func v2Order(n *keying.Notification, mchID, tx, event, fee, feeType string) error {
	if mchID == "" {
		return keying.Malformed("wechatpay_v2", "no mch_id")
	}
	return wechatpay.Order(n, "wechatpay_v2", mchID, tx, event, fee, feeType)
}

// strictXML is ParseStrictXML with ambiguity reported as ErrSignature.
func strictXML(body []byte) (map[string]string, error) {
	fields, err := keying.ParseStrictXML(body)
	switch {
	case errors.Is(err, keying.ErrAmbiguous):
		return nil, keying.SigErr("wechatpay_v2", "%v", err)
	case err != nil:
		return nil, fmt.Errorf("wechatpay_v2: %w", err)
	}
	return fields, nil
}

// checkMchID refuses another merchant's notification when mchid is set:
// its mch_id, or in service-provider (服务商) mode its sub_mch_id, must be
// pinned.
func (w *WechatPayV2) checkMchID(fields map[string]string) error {
	if len(w.mchIDs) == 0 || keying.Pinned(w.mchIDs, fields["mch_id"]) ||
		fields["sub_mch_id"] != "" && keying.Pinned(w.mchIDs, fields["sub_mch_id"]) {
		return nil
	}
	if fields["mch_id"] == "" && fields["sub_mch_id"] == "" {
		return keying.Malformed("wechatpay_v2", "no mch_id to match the configured mchid")
	}
	if sub := fields["sub_mch_id"]; sub != "" {
		return keying.MerchantErr("wechatpay_v2", "mch_id %s, sub_mch_id %s: not one of the configured mchid", keying.Clip(fields["mch_id"]), keying.Clip(sub))
	}
	return keying.MerchantErr("wechatpay_v2", "mch_id %s is not one of the configured mchid", keying.Clip(fields["mch_id"]))
}

func (w *WechatPayV2) verify(fields map[string]string) error {
	const p = "wechatpay_v2"
	sign := strings.ToUpper(strings.TrimSpace(fields["sign"]))
	if sign == "" {
		return keying.SigErr(p, "no sign")
	}
	var h hash.Hash
	switch len(sign) {
	case 32:
		h = md5.New()
	case 64:
		h = hmac.New(sha256.New, w.secret)
	default:
		return keying.SigErr(p, "sign is neither MD5 nor HMAC-SHA256")
	}
	switch st := strings.ToUpper(strings.TrimSpace(fields["sign_type"])); {
	case st == "":
	case st == "MD5" && len(sign) == 32, st == "HMAC-SHA256" && len(sign) == 64:
	default:
		return keying.SigErr(p, "sign_type %s does not match the sign", keying.Clip(st))
	}
	h.Write(WechatPayV2SignContent(fields))
	h.Write([]byte("&key="))
	h.Write(w.secret)
	want := strings.ToUpper(hex.EncodeToString(h.Sum(nil)))
	if !hmac.Equal([]byte(want), []byte(sign)) {
		return keying.SigErr(p, "sign does not match")
	}
	return nil
}

// refund decrypts and reads a refund notification.
func (w *WechatPayV2) refund(r *keying.Request, outer map[string]string) (*keying.Notification, error) {
	const p = "wechatpay_v2"
	if w.refundKey == nil {
		return nil, keying.Malformed(p, "a refund notification needs the secret (API key) to decrypt req_info")
	}
	plain, ok := decryptReqInfo(w.refundKey, outer["req_info"])
	if !ok {
		return nil, keying.SigErr(p, "req_info does not decrypt with the API key")
	}
	inner, err := keying.ParseStrictXML(plain)
	if err != nil || inner["refund_id"] == "" {
		return nil, keying.SigErr(p, "req_info does not decrypt to a refund")
	}
	// The envelope (mch_id, sub_mch_id, appid) is not signed: req_info
	// decrypting under this merchant's API key is what binds the refund to
	// the merchant, so the key's merchant is the route's mchid, never the
	// envelope's (a captured req_info under another envelope is the same
	// refund). A genuine envelope names the pinned merchant, as the
	// backend reads it: one that does not is refused.
	if err := w.checkMchID(outer); err != nil {
		return nil, err
	}
	var outcome string
	switch st := inner["refund_status"]; st {
	case "SUCCESS":
	case "CHANGE":
		outcome = "abnormal"
	case "REFUNDCLOSE":
		outcome = "closed"
	default:
		return nil, keying.Malformed(p, "unknown refund_status %s", keying.Clip(st))
	}
	switch {
	case inner["out_refund_no"] == "":
		return nil, keying.Malformed(p, "a refund without out_refund_no: which refund of the order it is cannot be told")
	case inner["transaction_id"] == "":
		return nil, keying.Malformed(p, "a refund without transaction_id")
	}
	n := &keying.Notification{
		Fields:      keying.NewFields(r),
		Fingerprint: keying.Material(inner["refund_fee"], inner["total_fee"]),
		Extra: func(path string) (string, bool) {
			if v, ok := inner[path]; ok {
				return v, true
			}
			v, ok := outer[path]
			return v, ok
		},
	}
	if err := v2Order(n, w.merchant(outer), inner["transaction_id"], keying.RefundEvent(inner["out_refund_no"], outcome),
		inner["refund_fee"], outer["fee_type"]); err != nil {
		return nil, err
	}
	n.At = keying.BeijingTime(inner["success_time"])
	// req_info, which decrypted under the merchant's key, not the envelope.
	n.MerchantRefs = keying.SearchRefs(inner["out_trade_no"], inner["out_refund_no"])
	return n, nil
}

// decryptReqInfo undoes base64, AES-256-ECB and PKCS #7 padding.
func decryptReqInfo(key []byte, b64 string) ([]byte, bool) {
	ct, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil || len(ct) == 0 || len(ct)%aes.BlockSize != 0 {
		return nil, false
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, false
	}
	plain := make([]byte, len(ct))
	for i := 0; i < len(ct); i += aes.BlockSize {
		block.Decrypt(plain[i:i+aes.BlockSize], ct[i:i+aes.BlockSize])
	}
	n := int(plain[len(plain)-1])
	if n == 0 || n > aes.BlockSize || !bytes.Equal(plain[len(plain)-n:], bytes.Repeat([]byte{byte(n)}, n)) {
		return nil, false
	}
	return plain[:len(plain)-n], true
}

// WechatPayV2SignContent is the string WeChat Pay v2 signs before
// "&key=…": fields other than sign and empty ones, sorted, k=v joined by "&".
func WechatPayV2SignContent(fields map[string]string) []byte {
	signed := make(map[string]string, len(fields))
	for k, v := range fields {
		if k != "sign" {
			signed[k] = v
		}
	}
	return keying.SortedPairs(signed)
}

// Success: WeChat Pay v2 reads the answer's XML return_code.
func (*WechatPayV2) Success(status int, _ http.Header, body []byte) bool {
	if !keying.Is2xx(status) {
		return false
	}
	f, err := keying.ParseFlatXML(body)
	return err == nil && strings.TrimSpace(f["return_code"]) == "SUCCESS"
}

// RetryWindow: the same schedule as v3, 15 notifications over 24h4m.
func (*WechatPayV2) RetryWindow() time.Duration { return 24*time.Hour + 4*time.Minute }
