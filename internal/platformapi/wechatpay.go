package platformapi

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WechatPayOrder is one order as WeChat Pay API v3's query tells it: a
// direct merchant's (MchID) or a service provider's sub-merchant's
// (SpMchID and SubMchID).
type WechatPayOrder struct {
	MchID             string
	SpMchID, SubMchID string
	OutTradeNo        string
	TransactionID     string
	// TradeState: SUCCESS, REFUND, NOTPAY, CLOSED, REVOKED, USERPAYING,
	// PAYERROR.
	TradeState string
	// Total in fen; Currency CNY when empty.
	Total       int
	Currency    string
	SuccessTime time.Time
}

// WechatPayAPI is a stand-in of WeChat Pay API v3's order query: GET
// /v3/pay/transactions/{out-trade-no/<no>|id/<id>}?mchid=… and, for a
// service provider, /v3/pay/partner/transactions/…?sp_mchid=…&sub_mchid=….
//
// The request's Authorization (WECHATPAY2-SHA256-RSA2048 mchid, nonce_str,
// signature, timestamp, serial_no) is checked as WeChat Pay does: a
// merchant it knows, the serial of that merchant's key, a timestamp
// within 5 minutes, SHA256withRSA over
// "<METHOD>\n<path?query>\n<timestamp>\n<nonce>\n<body>\n"; otherwise 401
// SIGN_ERROR. Every answer is signed with the platform key:
// Wechatpay-Signature over "<timestamp>\n<nonce>\n<body>\n", with
// Wechatpay-Timestamp, Wechatpay-Nonce, Wechatpay-Serial and Request-ID.
type WechatPayAPI struct {
	key    *rsa.PrivateKey
	serial string

	mu        sync.Mutex
	merchants map[string]wxMerchant
	orders    []WechatPayOrder
	badSign   bool
	notExist  bool
	refuse    bool
	delay     time.Duration
	paths     []string
}

type wxMerchant struct {
	serial string
	key    *rsa.PublicKey
}

// NewWechatPayAPI is a stand-in answering signed with key, named serial in
// Wechatpay-Serial (a platform public key id, PUB_KEY_ID_…, or a platform
// certificate's serial).
func NewWechatPayAPI(key *rsa.PrivateKey, serial string) *WechatPayAPI {
	return &WechatPayAPI{key: key, serial: serial, merchants: map[string]wxMerchant{}}
}

// AddMerchant lets mchid call, with the key whose certificate serial is
// serial and whose public half is key.
func (a *WechatPayAPI) AddMerchant(mchid, serial string, key *rsa.PublicKey) {
	a.set(func() { a.merchants[mchid] = wxMerchant{serial: serial, key: key} })
}

// Put adds or replaces (by merchant and out_trade_no) an order.
func (a *WechatPayAPI) Put(o WechatPayOrder) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, p := range a.orders {
		if p.MchID == o.MchID && p.SpMchID == o.SpMchID && p.SubMchID == o.SubMchID && p.OutTradeNo == o.OutTradeNo {
			a.orders[i] = o
			return
		}
	}
	a.orders = append(a.orders, o)
}

// SignBadly makes answers carry a Wechatpay-Signature that does not
// verify.
func (a *WechatPayAPI) SignBadly(on bool) { a.set(func() { a.badSign = on }) }

// AnswerNotExist makes every query answer 404 ORDER_NOT_EXIST.
func (a *WechatPayAPI) AnswerNotExist(on bool) { a.set(func() { a.notExist = on }) }

// RefuseKey makes every query answer 401 SIGN_ERROR, as for a merchant key
// WeChat Pay does not accept (revoked, or another merchant's).
func (a *WechatPayAPI) RefuseKey(on bool) { a.set(func() { a.refuse = on }) }

// Delay holds every answer for d (or until the caller gives up).
func (a *WechatPayAPI) Delay(d time.Duration) { a.set(func() { a.delay = d }) }

// Paths are the paths and queries of the queries received, in order.
func (a *WechatPayAPI) Paths() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.paths...)
}

func (a *WechatPayAPI) set(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f()
}

func (a *WechatPayAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.paths = append(a.paths, r.URL.RequestURI())
	delay, badSign, notExist, refuse := a.delay, a.badSign, a.notExist, a.refuse
	a.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if r.Method != http.MethodGet {
		a.answer(w, http.StatusMethodNotAllowed, wxError("INVALID_REQUEST", "method not allowed"), badSign)
		return
	}
	caller, ok := a.authorize(r)
	if !ok || refuse {
		a.answer(w, http.StatusUnauthorized, wxError("SIGN_ERROR", "签名错误"), badSign)
		return
	}
	rest, partner := strings.CutPrefix(r.URL.Path, "/v3/pay/partner/transactions/")
	if !partner {
		var ok bool
		if rest, ok = strings.CutPrefix(r.URL.Path, "/v3/pay/transactions/"); !ok {
			a.answer(w, http.StatusNotFound, wxError("NOT_FOUND", "no such API"), badSign)
			return
		}
	}
	by, id, _ := strings.Cut(rest, "/")
	if id, _ = url.PathUnescape(id); id == "" || (by != "out-trade-no" && by != "id") {
		a.answer(w, http.StatusNotFound, wxError("NOT_FOUND", "no such API"), badSign)
		return
	}
	q := r.URL.Query()
	var mch, sp, sub string
	if partner {
		sp, sub = q.Get("sp_mchid"), q.Get("sub_mchid")
		if sp == "" || sub == "" {
			a.answer(w, http.StatusBadRequest, wxError("PARAM_ERROR", "sp_mchid and sub_mchid are required"), badSign)
			return
		}
		if sp != caller {
			a.answer(w, http.StatusBadRequest, wxError("PARAM_ERROR", "sp_mchid与请求的商户号不一致"), badSign)
			return
		}
	} else {
		if mch = q.Get("mchid"); mch == "" {
			a.answer(w, http.StatusBadRequest, wxError("PARAM_ERROR", "mchid is required"), badSign)
			return
		}
		if mch != caller {
			a.answer(w, http.StatusBadRequest, wxError("PARAM_ERROR", "mchid与请求的商户号不一致"), badSign)
			return
		}
	}
	o, found := a.find(partner, mch, sp, sub, by, id)
	if !found || notExist {
		a.answer(w, http.StatusNotFound, wxError("ORDER_NOT_EXIST", "订单不存在"), badSign)
		return
	}
	a.answer(w, http.StatusOK, wxTransaction(o, partner), badSign)
}

func (a *WechatPayAPI) find(partner bool, mch, sp, sub, by, id string) (WechatPayOrder, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range a.orders {
		if partner && (o.SpMchID != sp || o.SubMchID != sub) || !partner && o.MchID != mch {
			continue
		}
		if by == "out-trade-no" && o.OutTradeNo == id || by == "id" && o.TransactionID == id {
			return o, true
		}
	}
	return WechatPayOrder{}, false
}

// authorize checks the Authorization header and answers the mchid it
// names.
func (a *WechatPayAPI) authorize(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.Header.Get("Authorization"), "WECHATPAY2-SHA256-RSA2048 ")
	if !ok {
		return "", false
	}
	p := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return "", false
		}
		p[k] = strings.Trim(v, `"`)
	}
	a.mu.Lock()
	m, known := a.merchants[p["mchid"]]
	a.mu.Unlock()
	if !known || !strings.EqualFold(m.serial, p["serial_no"]) {
		return "", false
	}
	ts, err := strconv.ParseInt(p["timestamp"], 10, 64)
	if err != nil || math.Abs(float64(time.Now().Unix()-ts)) > 300 {
		return "", false
	}
	sig, err := base64.StdEncoding.DecodeString(p["signature"])
	if err != nil || p["nonce_str"] == "" {
		return "", false
	}
	msg := r.Method + "\n" + r.URL.RequestURI() + "\n" + p["timestamp"] + "\n" + p["nonce_str"] + "\n" + "" + "\n"
	sum := sha256.Sum256([]byte(msg))
	if rsa.VerifyPKCS1v15(m.key, crypto.SHA256, sum[:], sig) != nil {
		return "", false
	}
	return p["mchid"], true
}

func wxError(code, message string) any {
	return map[string]string{"code": code, "message": message}
}

// wxTransaction is an order as the query answers it, with the fields
// WeChat Pay's documentation shows (a direct merchant's, or a partner's).
func wxTransaction(o WechatPayOrder, partner bool) any {
	currency := o.Currency
	if currency == "" {
		currency = "CNY"
	}
	desc := map[string]string{"SUCCESS": "支付成功", "REFUND": "转入退款", "NOTPAY": "未支付", "CLOSED": "已关闭",
		"REVOKED": "已撤销", "USERPAYING": "用户支付中", "PAYERROR": "支付失败"}[o.TradeState]
	t := map[string]any{
		"out_trade_no": o.OutTradeNo, "trade_state": o.TradeState, "trade_state_desc": desc,
		"amount": map[string]any{"total": o.Total, "currency": currency},
	}
	if partner {
		t["sp_appid"], t["sp_mchid"], t["sub_mchid"] = "wx8888888888888888", o.SpMchID, o.SubMchID
	} else {
		t["appid"], t["mchid"] = "wxd678efh567hg6787", o.MchID
	}
	if o.TradeState != "NOTPAY" && o.TradeState != "CLOSED" {
		t["transaction_id"], t["trade_type"], t["bank_type"] = o.TransactionID, "NATIVE", "CMC"
		t["amount"].(map[string]any)["payer_total"] = o.Total
		t["amount"].(map[string]any)["payer_currency"] = currency
	}
	if !o.SuccessTime.IsZero() {
		t["success_time"] = o.SuccessTime.In(time.FixedZone("CST", 8*3600)).Format(time.RFC3339)
	}
	return t
}

// answer writes v as JSON with status, signed with the platform key (or
// over other bytes when bad).
func (a *WechatPayAPI) answer(w http.ResponseWriter, status int, v any, bad bool) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding failed", http.StatusInternalServerError)
		return
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	nb := make([]byte, 16)
	_, _ = rand.Read(nb)
	nonce := strings.ToUpper(hex.EncodeToString(nb))
	msg := ts + "\n" + nonce + "\n" + string(body) + "\n"
	if bad {
		msg = ts + "\n" + nonce + "\n" + string(body) + " \n"
	}
	sum := sha256.Sum256([]byte(msg))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.key, crypto.SHA256, sum[:])
	if err != nil {
		http.Error(w, "signing failed", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Request-ID", "08F0"+nonce[:24])
	h.Set("Wechatpay-Timestamp", ts)
	h.Set("Wechatpay-Nonce", nonce)
	h.Set("Wechatpay-Serial", a.serial)
	h.Set("Wechatpay-Signature", base64.StdEncoding.EncodeToString(sig))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
