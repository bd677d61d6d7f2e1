package wechatpay

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/keying"
)

const (
	queryMchID     = "1230000109"
	queryMchSerial = "3775B6A45ACD588826D15E583A95F5DD2C6D9B07"
	queryPubKeyID  = "PUB_KEY_ID_0112300001092026031400000000000001"
)

// queryEnv is a read API client and the stand-in of WeChat Pay's API it
// asks: the merchant's key is platformtest's "other" key, WeChat Pay's
// platform key its "platform" key.
type queryEnv struct {
	api *platformapi.WechatPayAPI
	srv *httptest.Server
	cfg keying.APIConfig
}

func newQueryEnv(t *testing.T) *queryEnv {
	t.Helper()
	platformKey, mchKey := platformtest.Keys(t)
	e := &queryEnv{api: platformapi.NewWechatPayAPI(platformKey, queryPubKeyID)}
	e.api.AddMerchant(queryMchID, queryMchSerial, &mchKey.PublicKey)
	e.srv = httptest.NewServer(e.api)
	t.Cleanup(e.srv.Close)
	e.cfg = keying.APIConfig{
		BaseURL: e.srv.URL, Merchant: queryMchID, KeyID: queryMchSerial,
		Key:         pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(mchKey)}),
		PlatformKey: platformtest.PublicKeyPEM(t, &platformKey.PublicKey), PlatformKeyID: queryPubKeyID,
		HTTPClient: &http.Client{Timeout: 5 * time.Second},
	}
	return e
}

func (e *queryEnv) query(t *testing.T, q keying.OrderQuery) (keying.TradeAnswer, error) {
	t.Helper()
	c, err := NewReadAPI(e.cfg)
	if err != nil {
		t.Fatalf("NewReadAPI: %v", err)
	}
	return c.(keying.OrderQuerier).Query(context.Background(), q)
}

var paidAt = time.Date(2026, 3, 14, 17, 26, 32, 0, keying.Beijing)

func TestQueryPaid(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Put(platformapi.WechatPayOrder{MchID: queryMchID, OutTradeNo: "O-1", TransactionID: "4200000001", TradeState: "SUCCESS", Total: 990, SuccessTime: paidAt})
	a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != keying.TradePaid || a.Status != "SUCCESS" || a.TradeNo != "4200000001" || a.OutTradeNo != "O-1" ||
		a.Merchant != queryMchID || a.Money != (keying.Money{Amount: "9.90", Currency: "CNY"}) || !a.At.Equal(paidAt) {
		t.Errorf("answer %+v", a)
	}
	// By transaction_id: the /id/ URL.
	if a, err = e.query(t, keying.OrderQuery{TradeNo: "4200000001"}); err != nil || a.State != keying.TradePaid || a.OutTradeNo != "O-1" {
		t.Errorf("by transaction_id: %+v, %v", a, err)
	}
	if p := e.api.Paths(); p[len(p)-1] != "/v3/pay/transactions/id/4200000001?mchid="+queryMchID {
		t.Errorf("asked %s", p[len(p)-1])
	}
	// REFUND: paid, then refunded; the payment happened.
	e.api.Put(platformapi.WechatPayOrder{MchID: queryMchID, OutTradeNo: "O-R", TransactionID: "4200000002", TradeState: "REFUND", Total: 100, SuccessTime: paidAt})
	if a, err = e.query(t, keying.OrderQuery{OutTradeNo: "O-R"}); err != nil || a.State != keying.TradePaid || a.Status != "REFUND" {
		t.Errorf("REFUND: %+v, %v", a, err)
	}
}

func TestQueryNotPaid(t *testing.T) {
	e := newQueryEnv(t)
	for _, st := range []string{"NOTPAY", "CLOSED", "REVOKED", "USERPAYING", "PAYERROR"} {
		e.api.Put(platformapi.WechatPayOrder{MchID: queryMchID, OutTradeNo: "O-" + st, TransactionID: "42-" + st, TradeState: st, Total: 100})
		a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-" + st})
		if err != nil {
			t.Fatal(err)
		}
		if a.State != keying.TradeNotPaid || a.Status != st || !a.At.IsZero() {
			t.Errorf("%s: %+v", st, a)
		}
	}
}

func TestQueryNotExist(t *testing.T) {
	e := newQueryEnv(t)
	a, err := e.query(t, keying.OrderQuery{OutTradeNo: "never-seen"})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != keying.TradeNotExist || a.Status != "ORDER_NOT_EXIST" || a.Merchant != queryMchID {
		t.Errorf("unknown order: %+v", a)
	}
	e.api.Put(platformapi.WechatPayOrder{MchID: queryMchID, OutTradeNo: "O-1", TransactionID: "42", TradeState: "SUCCESS", Total: 1})
	e.api.AnswerNotExist(true)
	if a, err = e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); err != nil || a.State != keying.TradeNotExist {
		t.Errorf("told NOT_EXIST: %+v, %v", a, err)
	}
}

func TestQueryBadSignatureUnverified(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Put(platformapi.WechatPayOrder{MchID: queryMchID, OutTradeNo: "O-1", TransactionID: "42", TradeState: "SUCCESS", Total: 1})
	e.api.SignBadly(true)
	a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if !errors.Is(err, keying.ErrUnverified) || a != (keying.TradeAnswer{}) {
		t.Fatalf("badly signed answer: %+v, %v; want ErrUnverified and no answer", a, err)
	}
	e.api.AnswerNotExist(true)
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); !errors.Is(err, keying.ErrUnverified) {
		t.Fatalf("badly signed ORDER_NOT_EXIST: %v", err)
	}
	// Well signed, but by a key whose id is not the one configured.
	e.api.SignBadly(false)
	e.api.AnswerNotExist(false)
	e.cfg.PlatformKeyID = "PUB_KEY_ID_OTHER"
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); !errors.Is(err, keying.ErrUnverified) {
		t.Fatalf("unknown Wechatpay-Serial: %v", err)
	}
}

// A replayed answer: the stand-in's signed bytes served again later are
// taken within 5 minutes of their Wechatpay-Timestamp, refused after.
func TestQueryStaleAnswerUnverified(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Put(platformapi.WechatPayOrder{MchID: queryMchID, OutTradeNo: "O-1", TransactionID: "42", TradeState: "SUCCESS", Total: 1})
	var rec *httptest.ResponseRecorder
	replay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec == nil {
			rec = httptest.NewRecorder()
			e.api.ServeHTTP(rec, r)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer replay.Close()
	e.cfg.BaseURL = replay.URL
	if a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); err != nil || a.State != keying.TradePaid {
		t.Fatalf("fresh: %+v, %v", a, err)
	}
	e.cfg.Now = func() time.Time { return time.Now().Add(4 * time.Minute) }
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); err != nil {
		t.Fatalf("replayed 4 minutes later: %v", err)
	}
	e.cfg.Now = func() time.Time { return time.Now().Add(6 * time.Minute) }
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); !errors.Is(err, keying.ErrUnverified) {
		t.Fatalf("replayed 6 minutes later: %v, want ErrUnverified", err)
	}
}

func TestQueryRefusedKey(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Put(platformapi.WechatPayOrder{MchID: queryMchID, OutTradeNo: "O-1", TransactionID: "42", TradeState: "SUCCESS", Total: 1})
	e.api.RefuseKey(true)
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); !errors.Is(err, keying.ErrAPIRefused) {
		t.Fatalf("refused: %v, want ErrAPIRefused", err)
	}
	// Another key than the merchant's: 401 SIGN_ERROR from the stand-in's check.
	e.api.RefuseKey(false)
	platformKey, _ := platformtest.Keys(t)
	e.cfg.Key = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(platformKey)})
	_, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if !errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "SIGN_ERROR") {
		t.Fatalf("wrong merchant key: %v, want ErrAPIRefused SIGN_ERROR", err)
	}
}

func TestQueryAPIDown(t *testing.T) {
	e := newQueryEnv(t)
	e.srv.Close()
	_, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if err == nil || errors.Is(err, keying.ErrUnverified) || errors.Is(err, keying.ErrAPIRefused) {
		t.Fatalf("API down: %v, want a plain error", err)
	}
	if strings.Contains(err.Error(), queryMchID) {
		t.Errorf("the error quotes the URL: %v", err)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"code":"SYSTEM_ERROR","message":"系统错误"}`))
	}))
	defer bad.Close()
	e.cfg.BaseURL = bad.URL
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); err == nil || !strings.Contains(err.Error(), "SYSTEM_ERROR") {
		t.Fatalf("500: %v", err)
	}
}

func TestQuerySlowBounded(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Delay(10 * time.Second)
	e.cfg.HTTPClient = &http.Client{Timeout: 300 * time.Millisecond}
	start := time.Now()
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); err == nil {
		t.Fatal("a slow API answered")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the query waited %v for a slow API", d)
	}
	// A client without a timeout and a context without a deadline: the
	// query bounds itself.
	defer func(d time.Duration) { defaultTimeout = d }(defaultTimeout)
	defaultTimeout = 300 * time.Millisecond
	e.cfg.HTTPClient = &http.Client{}
	start = time.Now()
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); err == nil {
		t.Fatal("a slow API answered")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("with no timeout set, the query waited %v for a slow API", d)
	}
}

// A service provider's query goes to the partner URL with sp_mchid and
// sub_mchid; the answer is the sub-merchant's order.
func TestQueryServiceProviderPartnerURL(t *testing.T) {
	e := newQueryEnv(t)
	const sub = "1900000109"
	e.api.Put(platformapi.WechatPayOrder{SpMchID: queryMchID, SubMchID: sub, OutTradeNo: "O-SP", TransactionID: "4200000009", TradeState: "SUCCESS", Total: 2500, SuccessTime: paidAt})
	a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-SP", SubMerchant: sub})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != keying.TradePaid || a.Merchant != sub || a.TradeNo != "4200000009" || a.Money.Amount != "25.00" {
		t.Errorf("partner answer %+v", a)
	}
	want := "/v3/pay/partner/transactions/out-trade-no/O-SP?sp_mchid=" + queryMchID + "&sub_mchid=" + sub
	if p := e.api.Paths(); p[len(p)-1] != want {
		t.Errorf("asked %s, want %s", p[len(p)-1], want)
	}
	// The direct URL does not find the sub-merchant's order.
	if a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-SP"}); err != nil || a.State != keying.TradeNotExist {
		t.Errorf("direct URL for a partner order: %+v, %v", a, err)
	}
	if a, err := e.query(t, keying.OrderQuery{TradeNo: "4200000009", SubMerchant: sub}); err != nil || a.State != keying.TradePaid {
		t.Errorf("partner by transaction_id: %+v, %v", a, err)
	}
}

// A platform certificate in place of the public key: its serial is the
// Wechatpay-Serial.
func TestQueryPlatformCertificate(t *testing.T) {
	e := newQueryEnv(t)
	platformKey, _ := platformtest.Keys(t)
	serial := big.NewInt(0x5157F09EFDC096DE)
	e.api = platformapi.NewWechatPayAPI(platformKey, platformtest.SerialHex(serial))
	_, mchKey := platformtest.Keys(t)
	e.api.AddMerchant(queryMchID, queryMchSerial, &mchKey.PublicKey)
	e.api.Put(platformapi.WechatPayOrder{MchID: queryMchID, OutTradeNo: "O-1", TransactionID: "42", TradeState: "SUCCESS", Total: 1})
	e.srv.Config.Handler = e.api
	e.cfg.PlatformKey, e.cfg.PlatformKeyID = platformtest.Certificate(t, platformKey, serial, "Tenpay.com Root CA"), ""
	if a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); err != nil || a.State != keying.TradePaid {
		t.Fatalf("certificate: %+v, %v", a, err)
	}
	e.cfg.PlatformKeyID = "ABCDEF"
	if _, err := NewReadAPI(e.cfg); err == nil {
		t.Error("a platform key id naming none of the certificates was accepted")
	}
}

func TestReadAPIConfig(t *testing.T) {
	if new(Module).ReadAPI() == nil {
		t.Fatal("the wechatpay module has no read API")
	}
	e := newQueryEnv(t)
	for name, mutate := range map[string]func(*keying.APIConfig){
		"no mchid":        func(c *keying.APIConfig) { c.Merchant = "" },
		"no serial":       func(c *keying.APIConfig) { c.KeyID = "" },
		"no key":          func(c *keying.APIConfig) { c.Key = nil },
		"no platform key": func(c *keying.APIConfig) { c.PlatformKey = nil },
		"no key id":       func(c *keying.APIConfig) { c.PlatformKeyID = "" },
		"bad base":        func(c *keying.APIConfig) { c.BaseURL = "ftp://x" },
	} {
		cfg := e.cfg
		mutate(&cfg)
		if _, err := NewReadAPI(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c, err := NewReadAPI(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(keying.OrderQuerier); !ok {
		t.Fatalf("%T is not an OrderQuerier", c)
	}
}

// The query route's body names an order as WeChat Pay does: a merchant's
// own with mchid, a service provider's sub-merchant's with sp_mchid and
// sub_mchid (mchid the sub-merchant's, whose order it is).
func TestQueryOrderNumbers(t *testing.T) {
	e := newQueryEnv(t)
	const sub = "1900000109"
	e.api.Put(platformapi.WechatPayOrder{MchID: queryMchID, OutTradeNo: "O-1", TransactionID: "4200000001", TradeState: "SUCCESS", Total: 990, SuccessTime: paidAt})
	e.api.Put(platformapi.WechatPayOrder{SpMchID: queryMchID, SubMchID: sub, OutTradeNo: "O-SP", TransactionID: "4200000009", TradeState: "SUCCESS", Total: 2500, SuccessTime: paidAt})
	c, _ := NewReadAPI(e.cfg)
	n := c.(keying.OrderNamer)
	own, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n.OrderNumbers(own), map[string]string{"mchid": queryMchID, "transaction_id": "4200000001", "out_trade_no": "O-1"}; !maps.Equal(got, want) {
		t.Errorf("own order %v, want %v", got, want)
	}
	partner, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-SP", SubMerchant: sub})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"mchid": sub, "sp_mchid": queryMchID, "sub_mchid": sub, "transaction_id": "4200000009", "out_trade_no": "O-SP"}
	if got := n.OrderNumbers(partner); !maps.Equal(got, want) {
		t.Errorf("partner order %v, want %v", got, want)
	}
	if n.SubMerchant(queryMchID) != "" || n.SubMerchant(sub) != sub {
		t.Errorf("sub-merchants: own %q, %s's %q", n.SubMerchant(queryMchID), sub, n.SubMerchant(sub))
	}
}
