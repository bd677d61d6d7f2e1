// Package platformapi holds local stand-ins of the payment platforms' own
// APIs, the ones the gateway reads to catch up on missing notifications
// (补单): they check a request as the platform does and answer signed as
// the platform does, from a table of orders or events the test or the
// laptop example fills. Each can be told to sign badly, to not know an
// order, to refuse the caller's key and to be slow, which is what the
// catch-up must survive without concluding anything.
//
// They are not the platforms: they answer only the calls the gateway
// makes, with the fields it and the platforms' SDKs read. Tests check
// them against those SDKs (smartwalle/alipay, wechatpay-go).
package platformapi

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// AlipayTrade is one trade as alipay.trade.query tells it.
type AlipayTrade struct {
	OutTradeNo, TradeNo string
	// Status is the trade_status: WAIT_BUYER_PAY, TRADE_SUCCESS,
	// TRADE_FINISHED, TRADE_CLOSED.
	Status string
	// TotalAmount in yuan ("9.90"); Currency, when not CNY, goes in
	// trans_currency.
	TotalAmount, Currency string
	// PaidAt is send_pay_date, zero for an unpaid trade.
	PaidAt time.Time
}

// AlipayAPI is a stand-in of Alipay's open API gateway answering
// alipay.trade.query: the request's sign is checked with the application's
// public key over every non-empty parameter but sign, sorted, k=v joined
// by "&"; the answer is {"alipay_trade_query_response":{…},"sign":"…"},
// signed with Alipay's private key (SHA256withRSA) over the response
// value's bytes as they stand in the body.
//
// A request it does not accept is answered as Alipay answers it: a wrong
// sign with 40002 isv.invalid-signature, an unknown app_id with 40002
// isv.invalid-app-id (both unsigned: Alipay cannot tell whose call it is).
type AlipayAPI struct {
	appID  string
	appKey *rsa.PublicKey
	key    *rsa.PrivateKey

	mu       sync.Mutex
	trades   []AlipayTrade
	badSign  bool
	notExist bool
	refuse   bool
	delay    time.Duration
	calls    int
}

// NewAlipayAPI is a stand-in for the application appID, whose requests
// appKey verifies, answering signed with key (Alipay's private key: its
// public half is what the gateway is configured with).
func NewAlipayAPI(appID string, appKey *rsa.PublicKey, key *rsa.PrivateKey) *AlipayAPI {
	return &AlipayAPI{appID: appID, appKey: appKey, key: key}
}

// Put adds or replaces (by out_trade_no) a trade.
func (a *AlipayAPI) Put(t AlipayTrade) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.trades {
		if a.trades[i].OutTradeNo == t.OutTradeNo {
			a.trades[i] = t
			return
		}
	}
	a.trades = append(a.trades, t)
}

// SignBadly makes answers carry a sign that does not verify.
func (a *AlipayAPI) SignBadly(on bool) { a.set(func() { a.badSign = on }) }

// AnswerNotExist makes every query answer ACQ.TRADE_NOT_EXIST, as for an
// order Alipay does not have (yet).
func (a *AlipayAPI) AnswerNotExist(on bool) { a.set(func() { a.notExist = on }) }

// RefuseKey makes every query answer 40006 (the app lacks the right to
// the API), signed, as Alipay answers an app that has not the product.
func (a *AlipayAPI) RefuseKey(on bool) { a.set(func() { a.refuse = on }) }

// Delay holds every answer for d (or until the caller gives up).
func (a *AlipayAPI) Delay(d time.Duration) { a.set(func() { a.delay = d }) }

// Calls is how many queries reached the stand-in.
func (a *AlipayAPI) Calls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

func (a *AlipayAPI) set(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f()
}

func (a *AlipayAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.calls++
	delay, badSign, notExist, refuse := a.delay, a.badSign, a.notExist, a.refuse
	a.mu.Unlock()
	// The form is read first: once the body is read, the server notices
	// a caller that gives up, and a slow answer ends with it.
	formErr := r.ParseForm()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	const field = "alipay_trade_query_response"
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if formErr != nil {
		a.answer(w, "error_response", alipayError("40002", "Invalid Arguments", "isv.invalid-parameter", "参数无效"), false, false)
		return
	}
	params := map[string]string{}
	for k, v := range r.Form {
		params[k] = v[0]
	}
	if params["method"] != "alipay.trade.query" {
		a.answer(w, "error_response", alipayError("40002", "Invalid Arguments", "isv.invalid-method", "不存在的方法名"), false, false)
		return
	}
	if params["app_id"] != a.appID {
		a.answer(w, field, alipayError("40002", "Invalid Arguments", "isv.invalid-app-id", "无效的AppID参数"), false, false)
		return
	}
	if !a.verify(params) {
		a.answer(w, field, alipayError("40002", "Invalid Arguments", "isv.invalid-signature", "验签出错"), false, false)
		return
	}
	if refuse {
		a.answer(w, field, alipayError("40006", "Insufficient Permissions", "isv.insufficient-isv-permissions", "ISV权限不足"), true, badSign)
		return
	}
	var biz struct {
		OutTradeNo string `json:"out_trade_no"`
		TradeNo    string `json:"trade_no"`
	}
	if err := json.Unmarshal([]byte(params["biz_content"]), &biz); err != nil || (biz.OutTradeNo == "" && biz.TradeNo == "") {
		a.answer(w, field, alipayError("40002", "Invalid Arguments", "isv.invalid-parameter", "参数无效"), true, badSign)
		return
	}
	t, ok := a.find(biz.OutTradeNo, biz.TradeNo)
	if !ok || notExist {
		e := alipayError("40004", "Business Failed", "ACQ.TRADE_NOT_EXIST", "交易不存在")
		e = append(e, kv{"out_trade_no", biz.OutTradeNo})
		a.answer(w, field, e, true, badSign)
		return
	}
	resp := kvs{{"code", "10000"}, {"msg", "Success"}, {"buyer_logon_id", "159****5620"}, {"buyer_pay_amount", "0.00"},
		{"buyer_user_id", "2088101117955611"}, {"invoice_amount", "0.00"}, {"out_trade_no", t.OutTradeNo},
		{"point_amount", "0.00"}, {"receipt_amount", "0.00"}}
	if !t.PaidAt.IsZero() {
		resp = append(resp, kv{"send_pay_date", t.PaidAt.In(time.FixedZone("CST", 8*3600)).Format(time.DateTime)})
	}
	resp = append(resp, kv{"total_amount", t.TotalAmount}, kv{"trade_no", t.TradeNo}, kv{"trade_status", t.Status})
	if t.Currency != "" && t.Currency != "CNY" {
		resp = append(resp, kv{"trans_currency", t.Currency})
	}
	a.answer(w, field, resp, true, badSign)
}

func (a *AlipayAPI) find(outTradeNo, tradeNo string) (AlipayTrade, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.trades {
		if (outTradeNo != "" && t.OutTradeNo == outTradeNo) || (outTradeNo == "" && t.TradeNo == tradeNo) {
			return t, true
		}
	}
	return AlipayTrade{}, false
}

// verify checks a request's sign as Alipay's gateway does: RSA2 over
// every non-empty parameter but sign, sorted by name (sign_type is
// signed in a request).
func (a *AlipayAPI) verify(params map[string]string) bool {
	if strings.ToUpper(params["sign_type"]) != "RSA2" {
		return false
	}
	sig, err := base64.StdEncoding.DecodeString(params["sign"])
	if err != nil {
		return false
	}
	names := make([]string, 0, len(params))
	for k, v := range params {
		if k != "sign" && v != "" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	pairs := make([]string, len(names))
	for i, k := range names {
		pairs[i] = k + "=" + params[k]
	}
	sum := sha256.Sum256([]byte(strings.Join(pairs, "&")))
	return rsa.VerifyPKCS1v15(a.appKey, crypto.SHA256, sum[:], sig) == nil
}

// kv is a JSON member, kvs an object kept in order, as Alipay writes it.
type kv struct{ k, v string }
type kvs []kv

func (o kvs) json() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(m.k))
		b.WriteByte(':')
		b.Write(jsonString(m.v))
	}
	b.WriteByte('}')
	return b.Bytes()
}

func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}

func alipayError(code, msg, subCode, subMsg string) kvs {
	return kvs{{"code", code}, {"msg", msg}, {"sub_code", subCode}, {"sub_msg", subMsg}}
}

// answer writes {"<field>":<resp>,"sign":"…"}: signed over resp's bytes
// as written, or over other bytes when bad, or with no sign.
func (a *AlipayAPI) answer(w http.ResponseWriter, field string, resp kvs, signed, bad bool) {
	raw := resp.json()
	var body bytes.Buffer
	body.WriteString(`{"`)
	body.WriteString(field)
	body.WriteString(`":`)
	body.Write(raw)
	if signed {
		content := raw
		if bad {
			content = append(append([]byte{}, raw...), ' ')
		}
		sum := sha256.Sum256(content)
		sig, err := rsa.SignPKCS1v15(rand.Reader, a.key, crypto.SHA256, sum[:])
		if err != nil {
			http.Error(w, "signing failed", http.StatusInternalServerError)
			return
		}
		body.WriteString(`,"sign":"`)
		body.WriteString(base64.StdEncoding.EncodeToString(sig))
		body.WriteString(`"`)
	}
	body.WriteString("}")
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	_, _ = w.Write(body.Bytes())
}
