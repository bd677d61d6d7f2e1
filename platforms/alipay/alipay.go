// Package alipay is the Alipay preset: the RSA2-signed form of an
// asynchronous notification or a browser return, classified into the
// trade's business events, and what Alipay takes as "received".
package alipay

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// Preset is Alipay's: answered `success`, notifications of an
// order's business events, pinned by app_id, a bill in Beijing time.
var Preset = &keying.Preset{
	Name: "alipay", Title: "Alipay",
	Ack: keying.Ack{Status: 200, Body: "success", ContentType: "text/plain; charset=utf-8"},
	// Alipay, 异步通知说明 (opendocs.alipay.com/open/203/105286): "程序执
	// 行完后必须打印输出 success … 如果商户反馈给支付宝的字符不是 success
	// 这 7 个字符，支付宝服务器会不断重发通知，直到超过 24 小时 22 分钟。
	// 一般情况下，25 小时以内完成 8 次通知（通知的间隔频率一般是：4m、10m、
	// 10m、1h、2h、6h、15h）".
	Schedule: keying.Schedule{4 * time.Minute, 10 * time.Minute, 10 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 15 * time.Hour},
	Orders:   true, Extra: true,
	// Alipay's two channels: its server's notify, and the buyer's browser
	// sent to return_url with the signed result (电脑网站支付 "同步通知"),
	// which the shop answers with its result page or a redirect: it never
	// says `success`, and judged by the notify's rule it would release
	// the order's paid event for the notify to run again.
	Channels: []keying.Channel{
		{Name: "notify", Methods: []string{http.MethodPost}, Rule: "200 with body `success`", Success: notifySuccess},
		{Name: "browser return", Methods: []string{http.MethodGet, http.MethodHead},
			Rule: "2xx or 3xx (the shop's result page or a redirect)", Success: returnSuccess, Page: true},
	},
}

// Alipay verifies Alipay's asynchronous notify (a form POST) and the
// browser's synchronous return (a signed GET query).
//
// Signature: RSA2 (SHA256withRSA) or RSA (SHA1withRSA) as sign_type says
// (RSA2 when absent) with Config.PublicKey, over the parameters other than
// sign and sign_type and other than empty ones, sorted by name, as k=v
// joined by "&", values URL-decoded once. For a non-UTF-8 charset (GBK) the
// decoded bytes are verified as they are: Alipay signs the charset's bytes.
// The form is read strictly (keying.ParseStrictForm): a parameter given twice, a
// name a backend would rename, a ";" or a broken escape is ErrSignature,
// since the backend could act on a value that was not verified.
//
// Config.AppIDs, when set, pins app_id: another app's notification, even
// validly signed, is ErrMerchant.
//
// Key: the business event of the order, {app_id}:{trade_no}:<event>
// (Order {app_id}:{trade_no}; app_id and trade_no are required, the signed
// return carries both). The event, following Alipay's notify documentation
// (opendocs.alipay.com/open/203/105286, "异步通知参数说明" and the
// trade_status table) and its sample code, which treats TRADE_SUCCESS and
// TRADE_FINISHED alike as "paid: process if not yet processed":
//
//   - refund:{out_biz_no} when the notification carries out_biz_no or
//     refund_fee (a partial refund comes with TRADE_SUCCESS, a full one
//     with TRADE_CLOSED): a refund without out_biz_no is ErrMalformed, as
//     it cannot be told from another refund of the order;
//   - paid for TRADE_SUCCESS or TRADE_FINISHED, and for the signed browser
//     return (no trade_status) on a route with `return business`: return
//     and notify share one key, and the return's run names its channel
//     (Notification.Via);
//   - closed for TRADE_CLOSED; created for WAIT_BUYER_PAY;
//   - any other trade_status is ErrMalformed.
//
// The browser return (GET, HEAD) is what Config.Return says, as Alipay
// tells merchants to run the business on the notify only and many
// backends run it on both, which the gateway cannot tell apart:
// "business" as above; "display" its own key, {app_id}:{trade_no}:return,
// with no order state (Notification.Page), so that reloads are replayed
// and the notify still runs the payment; "refuse" (the default) a
// keying.ChannelError once verified, which the gateway answers 405.
//
// Money: refund_fee for a refund (Alipay's cumulative refunded amount of
// the trade, so RefundTotal: the refund's own amount is its increase over
// the trade's other refunds), else total_amount; currency CNY unless
// trans_currency says.
// Fingerprint: total_amount, refund_fee. Success: 200 with body "success"
// for the notify (POST), 2xx or 3xx for the browser return (GET).
// Extra: every verified parameter by name ({idempotency.alipay.out_trade_no}),
// as decoded: in the request's charset, not converted to UTF-8.
// Timestamps are not checked: notify_time is informative, and Alipay
// re-signs each retry for about 25 hours.
type Alipay struct {
	key      *rsa.PublicKey
	info     keying.KeyInfo // the key as configured (keys.go)
	noVerify bool
	appIDs   []string
	ret      string // Config.Return: "business", "display" or "refuse"
}

// Return's settings: what the browser's signed return is on a route.
const (
	ReturnBusiness = "business"
	ReturnDisplay  = "display"
	ReturnRefuse   = "refuse"
)

// Config is what a route configures Alipay's check with. Files are read
// by the caller; PEM blocks arrive as bytes.
type Config struct {
	// PublicKey is Alipay's public key (PEM).
	PublicKey []byte
	// AppIDs pins notifications to these app_ids; empty accepts any.
	AppIDs []string
	// Return is what Alipay's signed browser return is on this route:
	// ReturnBusiness (the order's paid event, shared with the notify),
	// ReturnDisplay (a page, its own key, never the paid event) or
	// ReturnRefuse ("" too: the default, 405).
	Return string
	// NoVerify runs the check without signatures (`verify off`).
	NoVerify bool
}

// New returns Alipay's check configured with cfg. Errors read
// "alipay: <what>" and wrap keying.ErrNeedsSecret when the public key is
// missing.
func New(cfg Config) (keying.Platform, error) {
	a := &Alipay{noVerify: cfg.NoVerify, appIDs: cfg.AppIDs, ret: cfg.Return}
	switch cfg.Return {
	case "":
		a.ret = ReturnRefuse
	case ReturnBusiness, ReturnDisplay, ReturnRefuse:
	default:
		return nil, fmt.Errorf("alipay: return must be business, display or refuse, not %q", cfg.Return)
	}
	if len(bytes.TrimSpace(cfg.PublicKey)) == 0 {
		if cfg.NoVerify {
			return a, nil
		}
		return nil, keying.NeedsSecret("alipay", "public_key (Alipay's public key)")
	}
	k, err := keying.ParseRSAPublicKey(cfg.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("alipay: public_key: %v", err)
	}
	a.key = k
	a.info = keying.KeyInfoOf(cfg.PublicKey, "public_key")
	return a, nil
}

func (*Alipay) Name() string { return "alipay" }

// alipayFields are the notify's names a backend acts on, refused in the
// query of a POST even when the body lacks them.
var alipayFields = []string{"sign", "sign_type", "app_id", "trade_no", "out_trade_no", "total_amount", "trade_status",
	"refund_fee", "out_biz_no", "gmt_payment", "gmt_refund", "seller_id", "buyer_id", "notify_id", "notify_type",
	"charset", "receipt_amount", "buyer_pay_amount", "trans_currency", "passback_params"}

// alipayQueryCollides refuses the query of a notify POST that names a
// field the signed body carries, or one of Alipay's fields: a backend that
// reads the query first (a Java servlet's getParameter) would act on
// ?out_trade_no=VICTIM&total_amount=8888.00 rather than on what was
// verified. A query of the merchant's own (?channel=alipay) passes.
func alipayQueryCollides(rawQuery string, signed map[string]string) error {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return keying.Malformed("alipay", "the URL's query does not parse: a backend may read it otherwise")
	}
	for name := range q {
		if _, ok := signed[name]; ok || slices.Contains(alipayFields, name) {
			return keying.Malformed("alipay", "the URL's query names %s, a field of the signed notification: a backend reading the query first would act on an unsigned value", keying.Clip(name))
		}
	}
	return nil
}

func (a *Alipay) Verify(r *keying.Request) (*keying.Notification, error) {
	raw := string(r.Body)
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		raw = ""
		if r.URL != nil {
			raw = r.URL.RawQuery
		}
	}
	params, err := keying.ParseStrictForm(raw)
	if err != nil {
		return nil, keying.SigErr("alipay", "%v", err)
	}
	if len(params) == 0 {
		return nil, keying.Malformed("alipay", "no parameters")
	}
	if raw == string(r.Body) && r.URL != nil && r.URL.RawQuery != "" {
		if err := alipayQueryCollides(r.URL.RawQuery, params); err != nil {
			return nil, err
		}
	}
	if !a.noVerify {
		if err := a.verify(params); err != nil {
			return nil, err
		}
	}
	appID, tradeNo := params["app_id"], params["trade_no"]
	if appID == "" || tradeNo == "" {
		return nil, keying.Malformed("alipay", "app_id and trade_no are required")
	}
	if !keying.Pinned(a.appIDs, appID) {
		return nil, keying.MerchantErr("alipay", "app_id %s is not one of the configured app_id", keying.Clip(appID))
	}
	event, money, err := alipayEvent(params)
	if err != nil {
		return nil, err
	}
	order := appID + ":" + tradeNo
	via := ""
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		switch a.ret {
		case ReturnRefuse:
			return nil, refusedReturn(r)
		case ReturnDisplay:
			return a.display(r, params, order), nil
		}
		via = r.Method + " " + r.URL.Path
	}
	at := keying.BeijingTime(params["gmt_payment"])
	switch {
	case strings.HasPrefix(event, keying.EventRefund):
		at = keying.BeijingTime(params["gmt_refund"])
	case event == keying.EventClosed:
		at = keying.BeijingTime(params["gmt_close"])
	case at.IsZero() && params["trade_status"] == "":
		at = keying.BeijingTime(params["timestamp"]) // the signed return: sent once the trade is paid
	}
	return &keying.Notification{
		Settles:     keying.EventSettles(event),
		At:          at,
		Fields:      keying.NewFields(r),
		Key:         order + ":" + event,
		Order:       order,
		Event:       event,
		Money:       money,
		RefundTotal: strings.HasPrefix(event, keying.EventRefund) && money.Amount != "",
		Fingerprint: keying.Material(params["total_amount"], params["refund_fee"]),
		// Every param but sign and sign_type is signed.
		MerchantRefs: keying.SearchRefs(params["out_trade_no"], params["out_biz_no"], params["out_request_no"]),
		Extra:        extra(params),
		Via:          via,
	}, nil
}

func extra(params map[string]string) func(string) (string, bool) {
	return func(path string) (string, bool) {
		v, ok := params[path]
		return v, ok
	}
}

// display is a verified browser return on a route with `return display`:
// the shop's page, deduplicated against its reloads only. It is no
// business event: it never records or blocks the order's paid event, and
// moves no money in reconciliation.
func (a *Alipay) display(r *keying.Request, params map[string]string, order string) *keying.Notification {
	return &keying.Notification{
		Fields:       keying.NewFields(r),
		Key:          order + ":return",
		Page:         true,
		Fingerprint:  keying.Material(params["total_amount"], params["refund_fee"]),
		MerchantRefs: keying.SearchRefs(params["out_trade_no"]),
		Extra:        extra(params),
	}
}

// refusedReturn is the browser's signed return on a route that says
// neither `return business` nor `return display`: forwarded as the
// order's paid event, it would answer the notify of a backend that runs
// the business on the notify only (as Alipay tells merchants to) without
// running it; as a page, it would run a backend's business twice.
func refusedReturn(r *keying.Request) error {
	path := ""
	if r.URL != nil {
		path = r.URL.Path
	}
	return &keying.ChannelError{
		Msg: "Alipay's browser return is not taken on this route: it needs `return business` or `return display`",
		Detail: fmt.Sprintf("a signed return (%s %s) reached a route with `return refuse` (the default); write `return business` if the backend "+
			"runs the payment on the return as well as the notify (the return is then the order's paid event, and the notify is answered from it), "+
			"or `return display` if it runs it on the notify only and shows a page on the return (the return is then its own key, and the notify runs the payment)",
			r.Method, keying.Clip(path)),
	}
}

// alipayEvent classifies a verified notify or return (see Alipay).
func alipayEvent(params map[string]string) (string, keying.Money, error) {
	currency := params["trans_currency"]
	if currency == "" {
		currency = "CNY"
	}
	if bizNo, refundFee := params["out_biz_no"], params["refund_fee"]; bizNo != "" || refundFee != "" {
		if bizNo == "" {
			return "", keying.Money{}, keying.Malformed("alipay", "a refund (refund_fee %s) without out_biz_no: which refund of the trade it is cannot be told", keying.Clip(refundFee))
		}
		m, err := keying.Major(refundFee, currency)
		if refundFee == "" {
			m, err = keying.Money{}, nil // out_biz_no alone: a refund whose amount is not named
		}
		if err != nil {
			return "", keying.Money{}, keying.Malformed("alipay", "refund_fee: %v", err)
		}
		return keying.RefundEvent(bizNo, ""), m, nil
	}
	m, err := keying.Money{}, error(nil)
	if params["total_amount"] != "" {
		if m, err = keying.Major(params["total_amount"], currency); err != nil {
			return "", keying.Money{}, keying.Malformed("alipay", "total_amount: %v", err)
		}
	}
	switch st := params["trade_status"]; st {
	case "TRADE_SUCCESS", "TRADE_FINISHED", "":
		// "": the signed browser return, sent once the trade is paid.
		return keying.EventPaid, m, nil
	case "TRADE_CLOSED":
		return keying.EventClosed, m, nil
	case "WAIT_BUYER_PAY":
		return keying.EventCreated, m, nil
	default:
		return "", keying.Money{}, keying.Malformed("alipay", "unknown trade_status %s: not a business event this preset knows", keying.Clip(st))
	}
}

func (a *Alipay) verify(params map[string]string) error {
	signB64 := params["sign"]
	if signB64 == "" {
		return keying.SigErr("alipay", "no sign")
	}
	// Base64 has no spaces: a space is a "+" that reached us unencoded
	// (a GET query copied by hand or re-encoded by a browser) and was
	// decoded as form encoding says.
	signB64 = strings.ReplaceAll(signB64, " ", "+")
	sig, ok := keying.DecodeB64Sig(strings.Join(strings.Fields(signB64), ""))
	if !ok {
		return keying.SigErr("alipay", "sign is not base64")
	}
	var h crypto.Hash
	switch st := strings.ToUpper(strings.TrimSpace(params["sign_type"])); st {
	case "RSA2", "":
		h = crypto.SHA256
	case "RSA":
		h = crypto.SHA1
	default:
		return keying.SigErr("alipay", "unsupported sign_type %s", keying.Clip(st))
	}
	if !keying.VerifyPKCS1(a.key, h, AlipaySignContent(params), sig) {
		return keying.SigErr("alipay", "sign does not match")
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
	return keying.SortedPairs(fields)
}

// Success is the notify's rule (Preset.Channels has the browser
// return's): Alipay stops retrying only on a 200 whose body is "success".
func (*Alipay) Success(status int, h http.Header, body []byte) bool {
	return notifySuccess(status, h, body)
}

func notifySuccess(status int, _ http.Header, body []byte) bool {
	return status == http.StatusOK && string(bytes.TrimSpace(body)) == "success"
}

// returnSuccess: the browser return is handled once the shop shows its
// result page (2xx) or redirects to it (3xx).
func returnSuccess(status int, _ http.Header, _ []byte) bool { return status >= 200 && status < 400 }

// RetryWindow: 8 notifications over 4m, 10m, 10m, 1h, 2h, 6h, 15h (~25h).
func (*Alipay) RetryWindow() time.Duration { return 25 * time.Hour }

func (a *Alipay) Keys() []keying.KeyInfo {
	if a.key == nil {
		return nil
	}
	return []keying.KeyInfo{a.info}
}

// VerifiedBy: Alipay has one key.
func (a *Alipay) VerifiedBy(*keying.Request) string {
	if a.key == nil {
		return ""
	}
	return a.info.ID
}

var _ keying.KeyReporter = (*Alipay)(nil)

// billAccount is the bill's account of a notify's body: its signed
// seller_id (the seller's pid, 2088…) with the "0156" the bill's #账号
// appends (the download's userId is pid + 0156).
func billAccount(body []byte) string {
	q, err := url.ParseQuery(string(body))
	if err != nil || q.Get("seller_id") == "" {
		return ""
	}
	return q.Get("seller_id") + "0156"
}
