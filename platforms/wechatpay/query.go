package wechatpay

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// APIServer is WeChat Pay's API, the read API's default address.
const APIServer = "https://api.mch.weixin.qq.com"

// defaultTimeout bounds a call when neither the HTTP client nor the
// context does (a variable for the tests).
var defaultTimeout = 10 * time.Second

// maxAnswer bounds what is read of an answer: an order's is a few KiB.
const maxAnswer = 1 << 20

// AuthScheme is the Authorization scheme of a v3 request.
const AuthScheme = "WECHATPAY2-SHA256-RSA2048"

// Querier asks WeChat Pay API v3 about one order: 查询订单 by
// out_trade_no (GET /v3/pay/transactions/out-trade-no/{out_trade_no}?mchid=…)
// or by transaction_id (…/transactions/id/{transaction_id}?mchid=…); for a
// service provider (服务商), when the query names a SubMerchant, the
// partner URLs (/v3/pay/partner/transactions/…?sp_mchid=…&sub_mchid=…).
//
// Request: Authorization: WECHATPAY2-SHA256-RSA2048 mchid, nonce_str,
// signature, timestamp and serial_no (the merchant certificate's serial,
// APIConfig.KeyID), the signature SHA256withRSA with the merchant private
// key over "GET\n<path?query>\n<timestamp>\n<nonce>\n\n" (an empty body).
//
// Answer: verified exactly as a notification is (WechatPay.verify, the
// same code): Wechatpay-Signature over "<timestamp>\n<nonce>\n<body>\n"
// with the platform key Wechatpay-Serial names (APIConfig.PlatformKey: the
// platform public key answering to PlatformKeyID, or platform
// certificates), Wechatpay-Timestamp within 5 minutes. Only a verified
// 200 or 404 ORDER_NOT_EXIST is an answer; a 200 or 404 that fails
// verification is keying.ErrUnverified. 401 (SIGN_ERROR: the merchant key
// or serial is not accepted) and 403 (NO_AUTH…) are keying.ErrAPIRefused,
// whatever their signature: a refusal says nothing of the order. Anything
// else is an error.
//
// trade_state: SUCCESS and REFUND are paid (REFUND, 转入退款, is a trade
// that was paid and then refunded in part or whole: the payment did
// happen, so a paid notification the backend never had is still missing;
// its refund is an event of its own); NOTPAY, CLOSED, REVOKED,
// USERPAYING and PAYERROR are not paid.
type Querier struct {
	base    string
	mchID   string
	serial  string
	key     *rsa.PrivateKey
	verify  *WechatPay
	hc      *http.Client
	now     func() time.Time
	nonceFn func() string
}

// NewReadAPI builds the read API client: cfg.Merchant is the mchid (a
// service provider's sp_mchid), cfg.Key the merchant private key (PEM),
// cfg.KeyID its certificate's serial number, cfg.PlatformKey WeChat Pay's
// platform public key (with cfg.PlatformKeyID, PUB_KEY_ID_…) or platform
// certificate(s), cfg.BaseURL the API (APIServer when empty).
func NewReadAPI(cfg keying.APIConfig) (any, error) {
	return NewQuerier(cfg)
}

// NewQuerier is NewReadAPI with its concrete type.
func NewQuerier(cfg keying.APIConfig) (*Querier, error) {
	q := &Querier{base: strings.TrimRight(cfg.BaseURL, "/"), mchID: strings.TrimSpace(cfg.Merchant),
		serial: strings.TrimSpace(cfg.KeyID), hc: cfg.HTTPClient, now: cfg.Now, nonceFn: nonce}
	if q.base == "" {
		q.base = APIServer
	}
	if u, err := url.Parse(q.base); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, errors.New("wechatpay read API: the base URL must be an http(s) URL")
	}
	if q.mchID == "" {
		return nil, errors.New("wechatpay read API: the mchid (merchant) is required")
	}
	if q.serial == "" {
		return nil, errors.New("wechatpay read API: the merchant certificate's serial number (key id) is required")
	}
	if len(bytes.TrimSpace(cfg.Key)) == 0 {
		return nil, errors.New("wechatpay read API: the merchant private key is required")
	}
	k, err := keying.ParseRSAPrivateKey(cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("wechatpay read API: merchant private key: %v", err)
	}
	q.key = k
	vc := Config{}
	if bytes.Contains(cfg.PlatformKey, []byte("CERTIFICATE")) {
		vc.Certificates = [][]byte{cfg.PlatformKey}
	} else {
		vc.PublicKey, vc.PublicKeyID = cfg.PlatformKey, cfg.PlatformKeyID
	}
	p, err := New(vc)
	if err != nil {
		return nil, fmt.Errorf("wechatpay read API: the platform key: %v", err)
	}
	q.verify = p.(*WechatPay)
	if id := strings.TrimSpace(cfg.PlatformKeyID); id != "" && vc.Certificates != nil {
		if _, ok := q.verify.keys[keying.NormSerial(id)]; !ok {
			return nil, errors.New("wechatpay read API: the platform key id names none of the platform certificates")
		}
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

func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

// QueryURL is the URL of the query of order.
func (c *Querier) QueryURL(order keying.OrderQuery) (string, error) {
	var by, id string
	switch {
	case order.OutTradeNo != "":
		by, id = "out-trade-no", order.OutTradeNo
	case order.TradeNo != "":
		by, id = "id", order.TradeNo
	default:
		return "", errors.New("wechatpay read API: the query names neither out_trade_no nor transaction_id")
	}
	path := "/v3/pay/transactions/" + by + "/" + url.PathEscape(id)
	if order.SubMerchant != "" {
		path = "/v3/pay/partner/transactions/" + by + "/" + url.PathEscape(id)
		return c.base + path + "?sp_mchid=" + url.QueryEscape(c.mchID) + "&sub_mchid=" + url.QueryEscape(order.SubMerchant), nil
	}
	return c.base + path + "?mchid=" + url.QueryEscape(c.mchID), nil
}

// Authorization is the Authorization header of a request: method, the
// URL's path and query, and body, signed at ts with nonce.
func (c *Querier) Authorization(method, pathQuery string, body []byte, ts int64, nonceStr string) (string, error) {
	msg := method + "\n" + pathQuery + "\n" + strconv.FormatInt(ts, 10) + "\n" + nonceStr + "\n" + string(body) + "\n"
	sum := sha256.Sum256([]byte(msg))
	sig, err := rsa.SignPKCS1v15(rand.Reader, c.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("wechatpay read API: signing: %v", err)
	}
	return fmt.Sprintf(`%s mchid="%s",nonce_str="%s",signature="%s",timestamp="%d",serial_no="%s"`,
		AuthScheme, c.mchID, nonceStr, base64.StdEncoding.EncodeToString(sig), ts, c.serial), nil
}

// Query asks WeChat Pay about order (see Querier).
func (c *Querier) Query(ctx context.Context, order keying.OrderQuery) (keying.TradeAnswer, error) {
	if _, ok := ctx.Deadline(); !ok && c.hc.Timeout == 0 {
		// An HTTPClient without a timeout and a context without a
		// deadline: the call is bounded all the same.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	u, err := c.QueryURL(order)
	if err != nil {
		return keying.TradeAnswer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return keying.TradeAnswer{}, fmt.Errorf("wechatpay read API: %v", err)
	}
	auth, err := c.Authorization(http.MethodGet, req.URL.RequestURI(), nil, c.now().Unix(), c.nonceFn())
	if err != nil {
		return keying.TradeAnswer{}, err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "idemgate")
	resp, err := c.hc.Do(req)
	if err != nil {
		return keying.TradeAnswer{}, fmt.Errorf("wechatpay read API: query: %w", cleanErr(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return keying.TradeAnswer{}, fmt.Errorf("wechatpay read API: reading the answer: %w", cleanErr(err))
	}
	if len(body) > maxAnswer {
		return keying.TradeAnswer{}, errors.New("wechatpay read API: the answer is over 1 MiB")
	}
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNotFound:
	case http.StatusUnauthorized, http.StatusForbidden:
		_ = json.Unmarshal(body, &e)
		return keying.TradeAnswer{}, fmt.Errorf("wechatpay read API: %w: HTTP %d %s", keying.ErrAPIRefused, resp.StatusCode, keying.Clip(e.Code))
	default:
		_ = json.Unmarshal(body, &e)
		return keying.TradeAnswer{}, fmt.Errorf("wechatpay read API: HTTP %d %s", resp.StatusCode, keying.Clip(e.Code))
	}
	// The same check as a notification's: one code for both.
	if err := c.verify.verify(&keying.Request{Method: http.MethodGet, Header: resp.Header, Body: body, Now: c.now(), Context: ctx}); err != nil {
		return keying.TradeAnswer{}, fmt.Errorf("wechatpay read API: %w: %v", keying.ErrUnverified, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		if err := json.Unmarshal(body, &e); err != nil || e.Code != "ORDER_NOT_EXIST" {
			return keying.TradeAnswer{}, fmt.Errorf("wechatpay read API: HTTP 404 %s", keying.Clip(e.Code))
		}
		return keying.TradeAnswer{State: keying.TradeNotExist, Status: e.Code, OutTradeNo: order.OutTradeNo, TradeNo: order.TradeNo,
			Merchant: c.merchantOf(order)}, nil
	}
	return c.answer(order, body)
}

func (c *Querier) merchantOf(order keying.OrderQuery) string {
	if order.SubMerchant != "" {
		return order.SubMerchant
	}
	return c.mchID
}

func (c *Querier) answer(order keying.OrderQuery, body []byte) (keying.TradeAnswer, error) {
	var t struct {
		TradeState    string `json:"trade_state"`
		TransactionID string `json:"transaction_id"`
		OutTradeNo    string `json:"out_trade_no"`
		MchID         string `json:"mchid"`
		SubMchID      string `json:"sub_mchid"`
		SuccessTime   string `json:"success_time"`
		Amount        *struct {
			Total    json.Number `json:"total"`
			Currency string      `json:"currency"`
		} `json:"amount"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&t); err != nil {
		return keying.TradeAnswer{}, errors.New("wechatpay read API: the answer is not an order")
	}
	if (order.OutTradeNo != "" && t.OutTradeNo != order.OutTradeNo) || (order.OutTradeNo == "" && t.TransactionID != order.TradeNo) {
		return keying.TradeAnswer{}, errors.New("wechatpay read API: the answer is about another order")
	}
	a := keying.TradeAnswer{Status: t.TradeState, TradeNo: t.TransactionID, OutTradeNo: t.OutTradeNo, Merchant: t.MchID}
	if t.SubMchID != "" {
		a.Merchant = t.SubMchID
	}
	switch t.TradeState {
	case "SUCCESS", "REFUND":
		// REFUND (转入退款): paid, then refunded. The payment happened,
		// and its notification is what the backend may have missed.
		a.State = keying.TradePaid
		a.At = keying.RFC3339Time(t.SuccessTime)
	case "NOTPAY", "CLOSED", "REVOKED", "USERPAYING", "PAYERROR":
		a.State = keying.TradeNotPaid
	default:
		return keying.TradeAnswer{}, fmt.Errorf("wechatpay read API: unknown trade_state %s", keying.Clip(t.TradeState))
	}
	if t.Amount != nil && t.Amount.Total != "" {
		currency := t.Amount.Currency
		if currency == "" {
			currency = "CNY"
		}
		m, err := keying.FromMinor(t.Amount.Total.String(), currency)
		if err != nil {
			return keying.TradeAnswer{}, fmt.Errorf("wechatpay read API: amount.total: %v", err)
		}
		a.Money = m
	}
	return a, nil
}

// cleanErr drops the URL a transport error quotes (it holds the mchid).
func cleanErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// OrderNumbers are ans's numbers as WeChat Pay names them: mchid (a
// service provider's sub-merchant's order: sp_mchid and sub_mchid, and
// mchid the sub-merchant's, whose order it is), transaction_id and
// out_trade_no (keying.OrderNamer).
func (c *Querier) OrderNumbers(ans keying.TradeAnswer) map[string]string {
	b := map[string]string{"transaction_id": ans.TradeNo, "out_trade_no": ans.OutTradeNo, "mchid": ans.Merchant}
	if sub := c.SubMerchant(ans.Merchant); sub != "" {
		b["sp_mchid"], b["sub_mchid"] = c.mchID, sub
	}
	if b["mchid"] == "" {
		b["mchid"] = c.mchID
	}
	return b
}

// SubMerchant is merchant when it is not the querier's own mchid: a
// service provider (its sp_mchid) queries its sub-merchants' orders.
func (c *Querier) SubMerchant(merchant string) string {
	if merchant == "" || merchant == c.mchID {
		return ""
	}
	return merchant
}
