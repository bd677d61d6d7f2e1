package alipay

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// Gateway is Alipay's open API gateway, the read API's default address.
const Gateway = "https://openapi.alipay.com/gateway.do"

// QueryMethod is the API the read API calls: 统一收单交易查询.
const QueryMethod = "alipay.trade.query"

// defaultTimeout bounds a call when neither the HTTP client nor the
// context does (a variable for the tests).
var defaultTimeout = 10 * time.Second

// maxAnswer bounds what is read of an answer: a trade query's is a few
// hundred bytes.
const maxAnswer = 1 << 20

// Querier asks Alipay about one order with alipay.trade.query
// (opendocs.alipay.com/open/02e7gm, 统一收单交易查询).
//
// Request: a form POST to the gateway with the public parameters app_id,
// method, format=JSON, charset=utf-8, sign_type=RSA2, timestamp (Beijing
// time), version=1.0 and biz_content ({"out_trade_no":…} or
// {"trade_no":…}), signed with the application private key: SHA256withRSA
// over every non-empty parameter but sign, sorted by name, k=v joined by
// "&" (Alipay's 自行实现签名 rule; sign_type is signed in a request, unlike
// in a notification, where it is left out).
//
// Answer: {"alipay_trade_query_response":{…},"sign":"…"}. The sign is
// SHA256withRSA by Alipay's public key over the response value's raw bytes
// as they stand in the body, which are verified before anything is read
// from them. Only a verified answer is returned: a paid trade
// (TRADE_SUCCESS, TRADE_FINISHED), one not paid (WAIT_BUYER_PAY,
// TRADE_CLOSED) or ACQ.TRADE_NOT_EXIST. A refusal of the app's credential
// (20001, 40006, or 40002 isv.invalid-signature / isv.invalid-app-id,
// which Alipay answers unsigned when it cannot tell whose the call is) is
// keying.ErrAPIRefused; an answer that fails verification, or an answer
// that would say something of the trade with no sign, keying.ErrUnverified;
// anything else an error. TRADE_CLOSED also ends a trade refunded in full
// after payment; keying counts only TRADE_SUCCESS and TRADE_FINISHED as
// paid, and such a trade's paid notify was due long before its refund.
type Querier struct {
	gateway string
	appID   string
	key     *rsa.PrivateKey
	pub     *rsa.PublicKey
	hc      *http.Client
	now     func() time.Time
}

// NewReadAPI builds the read API client: cfg.Merchant is the app_id,
// cfg.Key the application private key (PEM, PKCS#1 or PKCS#8),
// cfg.PlatformKey Alipay's public key, cfg.BaseURL the gateway (Gateway
// when empty).
func NewReadAPI(cfg keying.APIConfig) (any, error) {
	return NewQuerier(cfg)
}

// NewQuerier is NewReadAPI with its concrete type.
func NewQuerier(cfg keying.APIConfig) (*Querier, error) {
	q := &Querier{gateway: cfg.BaseURL, appID: strings.TrimSpace(cfg.Merchant), hc: cfg.HTTPClient, now: cfg.Now}
	if q.gateway == "" {
		q.gateway = Gateway
	}
	if u, err := url.Parse(q.gateway); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, errors.New("alipay read API: the gateway must be an http(s) URL")
	}
	if q.appID == "" {
		return nil, errors.New("alipay read API: the app_id (merchant) is required")
	}
	if len(bytes.TrimSpace(cfg.Key)) == 0 {
		return nil, errors.New("alipay read API: the application private key is required")
	}
	k, err := keying.ParseRSAPrivateKey(cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("alipay read API: application private key: %v", err)
	}
	q.key = k
	if len(bytes.TrimSpace(cfg.PlatformKey)) == 0 {
		return nil, errors.New("alipay read API: Alipay's public key is required to verify its answers")
	}
	if q.pub, err = keying.ParseRSAPublicKey(cfg.PlatformKey); err != nil {
		return nil, fmt.Errorf("alipay read API: Alipay's public key: %v", err)
	}
	if q.hc == nil {
		q.hc = &http.Client{Timeout: defaultTimeout}
	}
	if q.now == nil {
		q.now = time.Now
	}
	return q, nil
}

var _ keying.OrderQuerier = (*Querier)(nil)

// QueryForm is the signed form of an alipay.trade.query call for order,
// as it is posted: exported for the local stand-in's tests.
func (c *Querier) QueryForm(order keying.OrderQuery) (url.Values, error) {
	biz := map[string]string{}
	switch {
	case order.OutTradeNo != "":
		biz["out_trade_no"] = order.OutTradeNo
	case order.TradeNo != "":
		biz["trade_no"] = order.TradeNo
	default:
		return nil, errors.New("alipay read API: the query names neither out_trade_no nor trade_no")
	}
	bizJSON, err := json.Marshal(biz)
	if err != nil {
		return nil, err
	}
	params := map[string]string{
		"app_id": c.appID, "method": QueryMethod, "format": "JSON", "charset": "utf-8",
		"sign_type": "RSA2", "timestamp": c.now().In(keying.Beijing).Format(time.DateTime),
		"version": "1.0", "biz_content": string(bizJSON),
	}
	sum := sha256.Sum256(RequestSignContent(params))
	sig, err := rsa.SignPKCS1v15(rand.Reader, c.key, crypto.SHA256, sum[:])
	if err != nil {
		return nil, fmt.Errorf("alipay read API: signing: %v", err)
	}
	form := url.Values{}
	for k, v := range params {
		form.Set(k, v)
	}
	form.Set("sign", base64.StdEncoding.EncodeToString(sig))
	return form, nil
}

// RequestSignContent is what an API request's sign covers: every
// non-empty parameter but sign, sorted, k=v joined by "&" (sign_type
// included, unlike AlipaySignContent's notification rule).
func RequestSignContent(params map[string]string) []byte {
	fields := make(map[string]string, len(params))
	for k, v := range params {
		if k != "sign" {
			fields[k] = v
		}
	}
	return keying.SortedPairs(fields)
}

// Query asks Alipay about order (see Querier).
func (c *Querier) Query(ctx context.Context, order keying.OrderQuery) (keying.TradeAnswer, error) {
	if _, ok := ctx.Deadline(); !ok && c.hc.Timeout == 0 {
		// An HTTPClient without a timeout and a context without a
		// deadline: the call is bounded all the same.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	form, err := c.QueryForm(order)
	if err != nil {
		return keying.TradeAnswer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway, strings.NewReader(form.Encode()))
	if err != nil {
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %v", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded;charset=utf-8")
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %s: %w", QueryMethod, cleanErr(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: reading the answer: %w", cleanErr(err))
	}
	if len(body) > maxAnswer {
		return keying.TradeAnswer{}, errors.New("alipay read API: the answer is over 1 MiB")
	}
	if resp.StatusCode != http.StatusOK {
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: the gateway answered HTTP %d", resp.StatusCode)
	}
	return c.answer(order, body)
}

// cleanErr drops the URL a transport error quotes: the gateway is no
// secret, but the error should read the same against a stand-in.
func cleanErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// queryResponse is the part of alipay_trade_query_response the read API
// uses.
type queryResponse struct {
	Code          string `json:"code"`
	Msg           string `json:"msg"`
	SubCode       string `json:"sub_code"`
	SubMsg        string `json:"sub_msg"`
	TradeNo       string `json:"trade_no"`
	OutTradeNo    string `json:"out_trade_no"`
	TradeStatus   string `json:"trade_status"`
	TotalAmount   string `json:"total_amount"`
	TransCurrency string `json:"trans_currency"`
	SendPayDate   string `json:"send_pay_date"`
}

const responseField = "alipay_trade_query_response"

func (c *Querier) answer(order keying.OrderQuery, body []byte) (keying.TradeAnswer, error) {
	// json.RawMessage keeps a value's bytes exactly as they stand in the
	// body: the signed substring, never re-encoded.
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil {
		return keying.TradeAnswer{}, errors.New("alipay read API: the answer is not JSON")
	}
	raw, ok := env[responseField]
	if !ok {
		raw, ok = env["error_response"]
	}
	if !ok || len(raw) == 0 || raw[0] != '{' {
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: the answer has no %s", responseField)
	}
	var r queryResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %s does not parse", responseField)
	}
	var signB64 string
	if s, ok := env["sign"]; ok {
		if err := json.Unmarshal(s, &signB64); err != nil {
			return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %w: sign is not a string", keying.ErrUnverified)
		}
	}
	if signB64 == "" {
		// Unsigned: Alipay's answer to a call it cannot attribute. It may
		// say the call was refused, never anything of the trade.
		if refused(r) {
			return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %w: %s", keying.ErrAPIRefused, describe(r))
		}
		if r.Code == "10000" || r.SubCode == "ACQ.TRADE_NOT_EXIST" {
			return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %w: the answer carries no sign", keying.ErrUnverified)
		}
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %s", describe(r))
	}
	sig, ok := keying.DecodeB64Sig(signB64)
	if !ok || !keying.VerifyPKCS1(c.pub, crypto.SHA256, raw, sig) {
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %w: the sign does not match Alipay's public key", keying.ErrUnverified)
	}
	switch {
	case r.Code == "10000":
	case r.SubCode == "ACQ.TRADE_NOT_EXIST":
		return keying.TradeAnswer{State: keying.TradeNotExist, Status: r.SubCode, OutTradeNo: r.OutTradeNo, TradeNo: r.TradeNo, Merchant: c.appID}, nil
	case refused(r):
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %w: %s", keying.ErrAPIRefused, describe(r))
	default:
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: %s", describe(r))
	}
	if (order.OutTradeNo != "" && r.OutTradeNo != order.OutTradeNo) || (order.OutTradeNo == "" && r.TradeNo != order.TradeNo) {
		return keying.TradeAnswer{}, errors.New("alipay read API: the answer is about another order")
	}
	a := keying.TradeAnswer{Status: r.TradeStatus, TradeNo: r.TradeNo, OutTradeNo: r.OutTradeNo, Merchant: c.appID}
	switch r.TradeStatus {
	case "TRADE_SUCCESS", "TRADE_FINISHED":
		a.State = keying.TradePaid
		a.At = keying.BeijingTime(r.SendPayDate)
	case "WAIT_BUYER_PAY", "TRADE_CLOSED":
		a.State = keying.TradeNotPaid
	default:
		return keying.TradeAnswer{}, fmt.Errorf("alipay read API: unknown trade_status %s", keying.Clip(r.TradeStatus))
	}
	if r.TotalAmount != "" {
		currency := r.TransCurrency
		if currency == "" {
			currency = "CNY"
		}
		m, err := keying.Major(r.TotalAmount, currency)
		if err != nil {
			return keying.TradeAnswer{}, fmt.Errorf("alipay read API: total_amount: %v", err)
		}
		a.Money = m
	}
	return a, nil
}

// refused: Alipay did not accept the app's credential or its rights
// (20001 授权权限不足, 40006 权限不足, 40002 with an invalid signature or
// app_id).
func refused(r queryResponse) bool {
	switch r.Code {
	case "20001", "40006":
		return true
	case "40002":
		return r.SubCode == "isv.invalid-signature" || r.SubCode == "isv.invalid-app-id"
	}
	return false
}

func describe(r queryResponse) string {
	s := "code " + keying.Clip(r.Code)
	if r.SubCode != "" {
		s += " " + keying.Clip(r.SubCode)
	}
	if msg := r.SubMsg; msg != "" {
		s += " (" + keying.Clip(msg) + ")"
	} else if r.Msg != "" {
		s += " (" + keying.Clip(r.Msg) + ")"
	}
	return s
}

// OrderNumbers are ans's numbers as Alipay names them: app_id, trade_no,
// out_trade_no and total_amount (keying.OrderNamer).
func (c *Querier) OrderNumbers(ans keying.TradeAnswer) map[string]string {
	b := map[string]string{"app_id": ans.Merchant, "trade_no": ans.TradeNo, "out_trade_no": ans.OutTradeNo}
	if b["app_id"] == "" {
		b["app_id"] = c.appID
	}
	if ans.Money.Amount != "" {
		b["total_amount"] = ans.Money.Amount
	}
	return b
}

// SubMerchant is "": an app has no sub-merchants.
func (*Querier) SubMerchant(string) string { return "" }
