package keying

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"fmt"
	"net/http"
	"strings"
	"time"
)

func init() { register("alipay", newAlipay) }

// Alipay verifies Alipay's asynchronous notify (a form POST) and the
// browser's synchronous return (a signed GET query).
//
// Signature: RSA2 (SHA256withRSA) or RSA (SHA1withRSA) as sign_type says
// (RSA2 when absent) with Config.PublicKey, over the parameters other than
// sign and sign_type and other than empty ones, sorted by name, as k=v
// joined by "&", values URL-decoded once. For a non-UTF-8 charset (GBK) the
// decoded bytes are verified as they are: Alipay signs the charset's bytes.
// The form is read strictly (parseStrictForm): a parameter given twice, a
// name a backend would rename, a ";" or a broken escape is ErrSignature,
// since the backend could act on a value that was not verified.
//
// Config.AppIDs, when set, pins app_id: another app's notification, even
// validly signed, is ErrSignature.
//
// Key: {app_id}:{trade_no}:{trade_status}:{out_biz_no}; app_id and
// trade_no are required. The return query carries no trade_status, so its
// key differs from the notify's: give both routes one key template (see the
// design's "two channels, one order").
//
// Fingerprint: total_amount, refund_fee. Success: 200 with body "success".
// Extra: every verified parameter by name ({idempotency.alipay.out_trade_no}),
// as decoded: in the request's charset, not converted to UTF-8.
// Timestamps are not checked: notify_time is informative, and Alipay
// re-signs each retry for about 25 hours.
type Alipay struct {
	key      *rsa.PublicKey
	info     KeyInfo // the key as configured (keys.go)
	noVerify bool
	appIDs   []string
}

func newAlipay(cfg Config) (Platform, error) {
	a := &Alipay{noVerify: cfg.NoVerify, appIDs: cfg.AppIDs}
	if len(bytes.TrimSpace(cfg.PublicKey)) == 0 {
		if cfg.NoVerify {
			return a, nil
		}
		return nil, needsSecret("alipay", "public_key (Alipay's public key)")
	}
	k, err := ParseRSAPublicKey(cfg.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("alipay: public_key: %v", err)
	}
	a.key = k
	a.info = keyInfoOf(cfg.PublicKey, "public_key")
	return a, nil
}

func (*Alipay) Name() string { return "alipay" }

func (a *Alipay) Verify(r *Request) (*Notification, error) {
	raw := string(r.Body)
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		raw = ""
		if r.URL != nil {
			raw = r.URL.RawQuery
		}
	}
	params, err := parseStrictForm(raw)
	if err != nil {
		return nil, sigErr("alipay", "%v", err)
	}
	if len(params) == 0 {
		return nil, malformed("alipay", "no parameters")
	}
	if !a.noVerify {
		if err := a.verify(params); err != nil {
			return nil, err
		}
	}
	appID, tradeNo := params["app_id"], params["trade_no"]
	if appID == "" || tradeNo == "" {
		return nil, malformed("alipay", "app_id and trade_no are required")
	}
	if !pinned(a.appIDs, appID) {
		return nil, sigErr("alipay", "app_id %s is not one of the configured app_id", clip(appID))
	}
	return &Notification{
		Fields:      NewFields(r),
		Key:         appID + ":" + tradeNo + ":" + params["trade_status"] + ":" + params["out_biz_no"],
		Fingerprint: Material(params["total_amount"], params["refund_fee"]),
		Extra: func(path string) (string, bool) {
			v, ok := params[path]
			return v, ok
		},
	}, nil
}

func (a *Alipay) verify(params map[string]string) error {
	signB64 := params["sign"]
	if signB64 == "" {
		return sigErr("alipay", "no sign")
	}
	// Base64 has no spaces: a space is a "+" that reached us unencoded
	// (a GET query copied by hand or re-encoded by a browser) and was
	// decoded as form encoding says.
	signB64 = strings.ReplaceAll(signB64, " ", "+")
	sig, ok := decodeB64Sig(strings.Join(strings.Fields(signB64), ""))
	if !ok {
		return sigErr("alipay", "sign is not base64")
	}
	var h crypto.Hash
	switch st := strings.ToUpper(strings.TrimSpace(params["sign_type"])); st {
	case "RSA2", "":
		h = crypto.SHA256
	case "RSA":
		h = crypto.SHA1
	default:
		return sigErr("alipay", "unsupported sign_type %s", clip(st))
	}
	if !verifyPKCS1(a.key, h, AlipaySignContent(params), sig) {
		return sigErr("alipay", "sign does not match")
	}
	return nil
}

// AlipaySignContent is the string Alipay signs: parameters other than sign,
// sign_type and empty ones, sorted by name, k=v joined by "&", values as
// decoded (raw charset bytes, no re-encoding).
func AlipaySignContent(params map[string]string) []byte {
	fields := make(map[string]string, len(params))
	for k, v := range params {
		if k != "sign" && k != "sign_type" {
			fields[k] = v
		}
	}
	return sortedPairs(fields)
}

// Success: Alipay stops retrying only on a 200 whose body is "success".
func (*Alipay) Success(status int, _ http.Header, body []byte) bool {
	return status == http.StatusOK && string(bytes.TrimSpace(body)) == "success"
}

// RetryWindow: 8 notifications over 4m, 10m, 10m, 1h, 2h, 6h, 15h (~25h).
func (*Alipay) RetryWindow() time.Duration { return 25 * time.Hour }
