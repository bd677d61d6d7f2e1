package sdkbackend

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/go-pay/gopay"
	gopaywechat "github.com/go-pay/gopay/wechat"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
	"github.com/wechatpay-apiv3/wechatpay-go/core"
	"github.com/wechatpay-apiv3/wechatpay-go/core/auth"
	"github.com/wechatpay-apiv3/wechatpay-go/core/auth/verifiers"
	"github.com/wechatpay-apiv3/wechatpay-go/core/notify"
	"github.com/wechatpay-apiv3/wechatpay-go/services/partnerpayments"
)

// Stripe verifies with stripe-go's webhook.ConstructEventWithOptions and
// its default five-minute tolerance, as the Stripe docs' Go handler does
// (the API version check off: the samples carry none). Events are named by
// the event id.
func Stripe(secret string) *Backend {
	return newBackend(func(r *http.Request, body []byte) (string, error) {
		ev, err := webhook.ConstructEventWithOptions(body, r.Header.Get("Stripe-Signature"), secret,
			webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
		if err != nil {
			return "", err
		}
		return ev.ID, nil
	}, ok2xx, plainFailure(http.StatusBadRequest))
}

// StandardWebhooks verifies with the Standard Webhooks library's
// Webhook.Verify (its own five-minute tolerance). Events are named by the
// webhook-id header.
func StandardWebhooks(secret string) *Backend {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		panic(fmt.Sprintf("sdkbackend: standard webhooks secret: %v", err))
	}
	return newBackend(func(r *http.Request, body []byte) (string, error) {
		if err := wh.Verify(body, r.Header); err != nil {
			return "", err
		}
		return r.Header.Get("webhook-id"), nil
	}, ok2xx, plainFailure(http.StatusBadRequest))
}

// WechatPayPublicKey verifies with wechatpay-go's notify handler in
// public-key mode (WeChat Pay's platform public key and its id), the mode
// WeChat Pay gives new merchants.
func WechatPayPublicKey(apiV3Key, keyID string, pub *rsa.PublicKey) *Backend {
	return wechatPay(apiV3Key, verifiers.NewSHA256WithRSAPubkeyVerifier(keyID, *pub))
}

// WechatPayCertificates verifies with wechatpay-go's notify handler in
// platform-certificate mode.
func WechatPayCertificates(apiV3Key string, certs ...*x509.Certificate) *Backend {
	return wechatPay(apiV3Key, verifiers.NewSHA256WithRSAVerifier(core.NewCertificateMapWithList(certs)))
}

// wechatPay runs the SDK's ParseNotifyRequest (signature, five-minute
// timestamp window, AES-GCM decryption). Events: "<transaction_id>:paid"
// for a payment, "refund:<out_refund_no>:<refund_status>" for a refund, in
// direct and service-provider (服务商) mode alike; a service provider's
// payment is read into wechatpay-go's partnerpayments.Transaction, and a
// partner resource without sub_mchid is refused.
func wechatPay(apiV3Key string, v auth.Verifier) *Backend {
	h, err := notify.NewRSANotifyHandler(apiV3Key, v)
	if err != nil {
		panic(fmt.Sprintf("sdkbackend: wechatpay handler: %v", err))
	}
	return newBackend(func(r *http.Request, body []byte) (string, error) {
		r.Body = io.NopCloser(bytes.NewReader(body))
		var content map[string]any
		req, err := h.ParseNotifyRequest(context.Background(), r, &content)
		if err != nil {
			return "", err
		}
		str := func(k string) string { s, _ := content[k].(string); return s }
		if str("sp_mchid") != "" && str("sub_mchid") == "" {
			return "", errors.New("a service provider's notification without sub_mchid")
		}
		switch req.EventType {
		case "TRANSACTION.SUCCESS":
			if str("sp_mchid") != "" {
				// A service provider's payment, read as its backend does:
				// wechatpay-go's partnerpayments.Transaction.
				var tx partnerpayments.Transaction
				if err := json.Unmarshal([]byte(req.Resource.Plaintext), &tx); err != nil {
					return "", err
				}
				if tx.SubMchid == nil || tx.TransactionId == nil || *tx.TransactionId == "" {
					return "", errors.New("partner transaction without sub_mchid or transaction_id")
				}
				return *tx.TransactionId + ":paid", nil
			}
			if str("transaction_id") == "" {
				return "", errors.New("transaction without transaction_id")
			}
			return str("transaction_id") + ":paid", nil
		case "REFUND.SUCCESS", "REFUND.ABNORMAL", "REFUND.CLOSED":
			if str("out_refund_no") == "" {
				return "", errors.New("refund without out_refund_no")
			}
			return "refund:" + str("out_refund_no") + ":" + str("refund_status"), nil
		}
		return "", fmt.Errorf("unexpected event_type %q", req.EventType)
	}, func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) },
		func(w http.ResponseWriter, err error) {
			// What WeChat Pay's docs ask a merchant to answer on failure.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"code": "FAIL", "message": "verification failed"})
		})
}

// Alipay verifies with smartwalle/alipay's DecodeNotification (RSA2 over
// the sorted fields, as Alipay's own SDKs do), reading the fields the way
// a backend's framework does: r.Form, so a POST's body and the URL's query
// both count (Go puts the body's values first). The browser return (GET,
// signed query) is verified the same way. Events:
// "<trade_no>:<trade_status>" for a trade notification or return,
// "<trade_no>:refund:<out_biz_no>" when refund fields are present.
func Alipay(alipayPublicKeyPEM string) *Backend {
	client := alipayClient(alipayPublicKeyPEM)
	return newBackend(func(r *http.Request, body []byte) (string, error) {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err := r.ParseForm(); err != nil {
			return "", err
		}
		n, err := client.DecodeNotification(r.Form)
		if err != nil {
			return "", err
		}
		if n.OutBizNo != "" || n.RefundFee != "" {
			return n.TradeNo + ":refund:" + n.OutBizNo, nil
		}
		status := string(n.TradeStatus)
		if r.Method == http.MethodGet {
			status = "return" // the browser's return carries no trade_status
		}
		return n.TradeNo + ":" + status, nil
	}, func(w http.ResponseWriter) { _, _ = io.WriteString(w, "success") },
		func(w http.ResponseWriter, err error) { _, _ = io.WriteString(w, "fail") })
}

// AlipayGopay verifies with go-pay/gopay's alipay.VerifySign, the other
// SDK Chinese merchants use, reading the POST body only. Events as Alipay's.
func AlipayGopay(alipayPublicKeyPEM string) *Backend {
	// gopay takes the key as Alipay's console shows it: base64, no PEM
	// armour.
	rawKey := pemBody(alipayPublicKeyPEM)
	return newBackend(func(r *http.Request, body []byte) (string, error) {
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return "", err
		}
		bm := make(gopay.BodyMap)
		for k := range vals {
			bm.Set(k, vals.Get(k))
		}
		ok, err := gopayAlipayVerify(rawKey, bm)
		if err != nil || !ok {
			return "", fmt.Errorf("gopay alipay.VerifySign: ok=%v err=%v", ok, err)
		}
		if vals.Get("out_biz_no") != "" || vals.Get("refund_fee") != "" {
			return vals.Get("trade_no") + ":refund:" + vals.Get("out_biz_no"), nil
		}
		return vals.Get("trade_no") + ":" + vals.Get("trade_status"), nil
	}, func(w http.ResponseWriter) { _, _ = io.WriteString(w, "success") },
		func(w http.ResponseWriter, err error) { _, _ = io.WriteString(w, "fail") })
}

// WechatPayV2 verifies with go-pay/gopay's wechat package: VerifySign (MD5
// or HMAC-SHA256, as sign_type says) for a payment notification, and
// DecryptRefundNotifyReqInfo for a refund's req_info, which is all a v2
// refund notification authenticates. Events: "<transaction_id>:paid",
// "refund:<out_refund_no>:<refund_status>".
func WechatPayV2(apiKey string) *Backend {
	return newBackend(func(r *http.Request, body []byte) (string, error) {
		r.Body = io.NopCloser(bytes.NewReader(body))
		bm, err := gopaywechat.ParseNotifyToBodyMap(r)
		if err != nil {
			return "", err
		}
		if info := bm.GetString("req_info"); info != "" {
			rn, err := gopaywechat.DecryptRefundNotifyReqInfo(info, apiKey)
			if err != nil {
				return "", err
			}
			return "refund:" + rn.OutRefundNo + ":" + rn.RefundStatus, nil
		}
		signType := bm.GetString("sign_type")
		if signType == "" {
			signType = gopaywechat.SignType_MD5
		}
		ok, err := gopaywechat.VerifySign(apiKey, signType, bm)
		if err != nil || !ok {
			return "", fmt.Errorf("gopay wechat.VerifySign: ok=%v err=%v", ok, err)
		}
		return bm.GetString("transaction_id") + ":paid", nil
	}, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/xml")
		_, _ = io.WriteString(w, "<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>")
	}, func(w http.ResponseWriter, err error) {
		w.Header().Set("Content-Type", "application/xml")
		_, _ = io.WriteString(w, "<xml><return_code><![CDATA[FAIL]]></return_code><return_msg><![CDATA[verification failed]]></return_msg></xml>")
	})
}

func ok2xx(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }

func plainFailure(status int) func(http.ResponseWriter, error) {
	return func(w http.ResponseWriter, err error) { http.Error(w, "verification failed", status) }
}
