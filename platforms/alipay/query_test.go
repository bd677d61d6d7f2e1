package alipay

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/keying"
)

const queryAppID = "2021000000000001"

// queryEnv is a read API client and the local stand-in of Alipay's
// gateway it asks: the app's key is platformtest's "other" key, Alipay's
// its "platform" key.
type queryEnv struct {
	api *platformapi.AlipayAPI
	srv *httptest.Server
	cfg keying.APIConfig
}

func newQueryEnv(t *testing.T) *queryEnv {
	t.Helper()
	alipayKey, appKey := platformtest.Keys(t)
	der, err := x509.MarshalPKCS8PrivateKey(appKey)
	if err != nil {
		t.Fatal(err)
	}
	e := &queryEnv{api: platformapi.NewAlipayAPI(queryAppID, &appKey.PublicKey, alipayKey)}
	e.srv = httptest.NewServer(e.api)
	t.Cleanup(e.srv.Close)
	e.cfg = keying.APIConfig{
		BaseURL: e.srv.URL + "/gateway.do", Merchant: queryAppID,
		Key:         pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		PlatformKey: platformtest.PublicKeyPEM(t, &alipayKey.PublicKey),
		HTTPClient:  &http.Client{Timeout: 5 * time.Second},
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

func TestQueryPaid(t *testing.T) {
	e := newQueryEnv(t)
	paidAt := time.Date(2026, 3, 14, 17, 26, 32, 0, keying.Beijing)
	e.api.Put(platformapi.AlipayTrade{OutTradeNo: "O-1", TradeNo: "2026031422001", Status: "TRADE_SUCCESS", TotalAmount: "9.90", PaidAt: paidAt})
	e.api.Put(platformapi.AlipayTrade{OutTradeNo: "O-2", TradeNo: "2026031422002", Status: "TRADE_FINISHED", TotalAmount: "120.00", Currency: "USD", PaidAt: paidAt})

	a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := keying.TradeAnswer{State: keying.TradePaid, Status: "TRADE_SUCCESS", TradeNo: "2026031422001", OutTradeNo: "O-1",
		Merchant: queryAppID, Money: keying.Money{Amount: "9.90", Currency: "CNY"}, At: paidAt}
	if !a.At.Equal(want.At) || !sameBut(a, want) {
		t.Errorf("answer %+v, want %+v", a, want)
	}
	// By Alipay's trade_no, and TRADE_FINISHED, in the trade's currency.
	a, err = e.query(t, keying.OrderQuery{TradeNo: "2026031422002"})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != keying.TradePaid || a.OutTradeNo != "O-2" || a.Money != (keying.Money{Amount: "120.00", Currency: "USD"}) {
		t.Errorf("by trade_no: %+v", a)
	}
}

func sameBut(a, b keying.TradeAnswer) bool { a.At, b.At = time.Time{}, time.Time{}; return a == b }

func TestQueryNotPaid(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Put(platformapi.AlipayTrade{OutTradeNo: "O-W", TradeNo: "T-W", Status: "WAIT_BUYER_PAY", TotalAmount: "1.00"})
	e.api.Put(platformapi.AlipayTrade{OutTradeNo: "O-C", TradeNo: "T-C", Status: "TRADE_CLOSED", TotalAmount: "1.00"})
	for _, no := range []string{"O-W", "O-C"} {
		a, err := e.query(t, keying.OrderQuery{OutTradeNo: no})
		if err != nil {
			t.Fatal(err)
		}
		if a.State != keying.TradeNotPaid || !a.At.IsZero() {
			t.Errorf("%s: %+v, want not paid", no, a)
		}
	}
}

func TestQueryNotExist(t *testing.T) {
	e := newQueryEnv(t)
	a, err := e.query(t, keying.OrderQuery{OutTradeNo: "never-seen"})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != keying.TradeNotExist || a.Status != "ACQ.TRADE_NOT_EXIST" {
		t.Errorf("unknown order: %+v", a)
	}
	e.api.Put(platformapi.AlipayTrade{OutTradeNo: "O-1", TradeNo: "T-1", Status: "TRADE_SUCCESS", TotalAmount: "1.00"})
	e.api.AnswerNotExist(true)
	if a, err = e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); err != nil || a.State != keying.TradeNotExist {
		t.Errorf("told NOT_EXIST: %+v, %v", a, err)
	}
}

func TestQueryBadSignatureUnverified(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Put(platformapi.AlipayTrade{OutTradeNo: "O-1", TradeNo: "T-1", Status: "TRADE_SUCCESS", TotalAmount: "1.00"})
	e.api.SignBadly(true)
	a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if !errors.Is(err, keying.ErrUnverified) || a != (keying.TradeAnswer{}) {
		t.Fatalf("badly signed answer: %+v, %v; want ErrUnverified and no answer", a, err)
	}
	// A NOT_EXIST that fails verification is no answer either.
	e.api.AnswerNotExist(true)
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); !errors.Is(err, keying.ErrUnverified) {
		t.Fatalf("badly signed NOT_EXIST: %v", err)
	}
	// Verified with another public key than Alipay's: unverified.
	e.api.SignBadly(false)
	e.api.AnswerNotExist(false)
	_, other := platformtest.Keys(t)
	e.cfg.PlatformKey = platformtest.PublicKeyPEM(t, &other.PublicKey)
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); !errors.Is(err, keying.ErrUnverified) {
		t.Fatalf("answer checked with the wrong public key: %v", err)
	}
}

// An answer that says the trade is paid but carries no sign.
func TestQueryUnsignedAnswerUnverified(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"alipay_trade_query_response":{"code":"10000","msg":"Success","out_trade_no":"O-1","trade_no":"T-1","trade_status":"TRADE_SUCCESS","total_amount":"1.00"}}`))
	}))
	defer srv.Close()
	e := newQueryEnv(t)
	e.cfg.BaseURL = srv.URL
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); !errors.Is(err, keying.ErrUnverified) {
		t.Fatalf("unsigned paid answer: %v, want ErrUnverified", err)
	}
}

func TestQueryRefusedKey(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Put(platformapi.AlipayTrade{OutTradeNo: "O-1", TradeNo: "T-1", Status: "TRADE_SUCCESS", TotalAmount: "1.00"})
	e.api.RefuseKey(true)
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); !errors.Is(err, keying.ErrAPIRefused) {
		t.Fatalf("40006: %v, want ErrAPIRefused", err)
	}
	// A request signed with a key Alipay does not hold for the app:
	// 40002 isv.invalid-signature, unsigned.
	e.api.RefuseKey(false)
	alipayKey, _ := platformtest.Keys(t)
	e.cfg.Key = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(alipayKey)})
	_, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if !errors.Is(err, keying.ErrAPIRefused) {
		t.Fatalf("wrong app key: %v, want ErrAPIRefused", err)
	}
	if strings.Contains(err.Error(), "PRIVATE") {
		t.Errorf("the error quotes the key: %v", err)
	}
}

func TestQueryAPIDown(t *testing.T) {
	e := newQueryEnv(t)
	e.srv.Close()
	_, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if err == nil || errors.Is(err, keying.ErrUnverified) || errors.Is(err, keying.ErrAPIRefused) {
		t.Fatalf("API down: %v, want a plain error", err)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer bad.Close()
	e.cfg.BaseURL = bad.URL
	if _, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"}); err == nil || !strings.Contains(err.Error(), "502") {
		t.Fatalf("502: %v", err)
	}
}

func TestQuerySlowBounded(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Delay(10 * time.Second)
	e.cfg.HTTPClient = &http.Client{Timeout: 300 * time.Millisecond}
	start := time.Now()
	_, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if err == nil {
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

func TestReadAPIConfig(t *testing.T) {
	if new(Module).ReadAPI() == nil {
		t.Fatal("the alipay module has no read API")
	}
	e := newQueryEnv(t)
	for name, mutate := range map[string]func(*keying.APIConfig){
		"no app_id": func(c *keying.APIConfig) { c.Merchant = "" },
		"no key":    func(c *keying.APIConfig) { c.Key = nil },
		"bad key": func(c *keying.APIConfig) {
			c.Key = []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
		},
		"no public key": func(c *keying.APIConfig) { c.PlatformKey = nil },
		"bad gateway":   func(c *keying.APIConfig) { c.BaseURL = "ftp://x" },
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

// The query route's body names a paid trade as Alipay does, so the
// documented key {idempotency.json.app_id}:{idempotency.json.trade_no}:paid
// resolves; an app has no sub-merchants.
func TestQueryOrderNumbers(t *testing.T) {
	e := newQueryEnv(t)
	e.api.Put(platformapi.AlipayTrade{OutTradeNo: "O-1", TradeNo: "2026031422001", Status: "TRADE_SUCCESS", TotalAmount: "9.90", PaidAt: time.Now()})
	a, err := e.query(t, keying.OrderQuery{OutTradeNo: "O-1"})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewReadAPI(e.cfg)
	n := c.(keying.OrderNamer)
	want := map[string]string{"app_id": queryAppID, "trade_no": "2026031422001", "out_trade_no": "O-1", "total_amount": "9.90"}
	if got := n.OrderNumbers(a); !maps.Equal(got, want) {
		t.Errorf("order numbers %v, want %v", got, want)
	}
	if s := n.SubMerchant(queryAppID); s != "" {
		t.Errorf("sub-merchant %q", s)
	}
}
