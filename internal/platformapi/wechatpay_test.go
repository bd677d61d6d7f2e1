package platformapi_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/wechatpay-apiv3/wechatpay-go/core"
	"github.com/wechatpay-apiv3/wechatpay-go/core/option"
	partnernative "github.com/wechatpay-apiv3/wechatpay-go/services/partnerpayments/native"
	"github.com/wechatpay-apiv3/wechatpay-go/services/payments/jsapi"
	"github.com/wechatpay-apiv3/wechatpay-go/services/payments/native"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/wechatpay"
)

const (
	mchID     = "1230000109"
	subMchID  = "1900000109"
	mchSerial = "3775B6A45ACD588826D15E583A95F5DD2C6D9B07"
	pubKeyID  = "PUB_KEY_ID_0112300001092026031400000000000001"
)

// toStandIn sends wechatpay-go's calls, addressed to WeChat Pay's own API
// (the SDK has it built in), to the stand-in: only scheme and host change,
// so the signed path and query are the SDK's own.
type toStandIn struct{ base *url.URL }

func (s toStandIn) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = s.base.Scheme, s.base.Host, s.base.Host
	return http.DefaultTransport.RoundTrip(r)
}

func sdkHTTP(t *testing.T, srv *httptest.Server) core.ClientOption {
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return option.WithHTTPClient(&http.Client{Timeout: 5 * time.Second, Transport: toStandIn{u}})
}

func newSDK(t *testing.T, opts ...core.ClientOption) *core.Client {
	t.Helper()
	c, err := core.NewClient(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The stand-in answers WeChat Pay v3's order query as WeChat Pay does:
// wechatpay-go's client signs the request (which the stand-in's check
// accepts) and its response validator accepts the stand-in's signed
// answer, for a direct merchant (jsapi, native) and a service provider
// (partnerpayments); told to sign badly, the SDK's validator refuses it.
// The read API client's request passes the same check.
func TestWechatPayAPIAnswersAsWechatPay(t *testing.T) {
	platformKey, mchKey := platformtest.Keys(t)
	api := platformapi.NewWechatPayAPI(platformKey, pubKeyID)
	api.AddMerchant(mchID, mchSerial, &mchKey.PublicKey)
	paid := time.Date(2026, 3, 14, 17, 26, 32, 0, keying.Beijing)
	api.Put(platformapi.WechatPayOrder{MchID: mchID, OutTradeNo: "O-1", TransactionID: "4200000001", TradeState: "SUCCESS", Total: 990, SuccessTime: paid})
	api.Put(platformapi.WechatPayOrder{SpMchID: mchID, SubMchID: subMchID, OutTradeNo: "O-SP", TransactionID: "4200000009", TradeState: "NOTPAY", Total: 2500})
	srv := httptest.NewServer(api)
	defer srv.Close()
	ctx := context.Background()

	sdk := newSDK(t, option.WithWechatPayPublicKeyAuthCipher(mchID, mchSerial, mchKey, pubKeyID, &platformKey.PublicKey), sdkHTTP(t, srv))
	tx, _, err := (&native.NativeApiService{Client: sdk}).QueryOrderByOutTradeNo(ctx, native.QueryOrderByOutTradeNoRequest{
		OutTradeNo: core.String("O-1"), Mchid: core.String(mchID)})
	if err != nil {
		t.Fatalf("native QueryOrderByOutTradeNo: %v", err)
	}
	if *tx.TradeState != "SUCCESS" || *tx.TransactionId != "4200000001" || *tx.Amount.Total != 990 || *tx.SuccessTime != "2026-03-14T17:26:32+08:00" {
		t.Errorf("SDK read %+v", tx)
	}
	tx, _, err = (&jsapi.JsapiApiService{Client: sdk}).QueryOrderById(ctx, jsapi.QueryOrderByIdRequest{
		TransactionId: core.String("4200000001"), Mchid: core.String(mchID)})
	if err != nil || *tx.OutTradeNo != "O-1" {
		t.Fatalf("jsapi QueryOrderById: %+v, %v", tx, err)
	}
	ptx, _, err := (&partnernative.NativeApiService{Client: sdk}).QueryOrderByOutTradeNo(ctx, partnernative.QueryOrderByOutTradeNoRequest{
		OutTradeNo: core.String("O-SP"), SpMchid: core.String(mchID), SubMchid: core.String(subMchID)})
	if err != nil {
		t.Fatalf("partner QueryOrderByOutTradeNo: %v", err)
	}
	if *ptx.TradeState != "NOTPAY" || *ptx.SubMchid != subMchID || *ptx.SpMchid != mchID {
		t.Errorf("SDK read %+v", ptx)
	}

	// ORDER_NOT_EXIST: the SDK's APIError with the code.
	_, _, err = (&native.NativeApiService{Client: sdk}).QueryOrderByOutTradeNo(ctx, native.QueryOrderByOutTradeNoRequest{
		OutTradeNo: core.String("never-seen"), Mchid: core.String(mchID)})
	var apiErr *core.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "ORDER_NOT_EXIST" {
		t.Errorf("not exist: %v", err)
	}

	// The SDK signing with a key the stand-in does not hold for the
	// merchant: 401 SIGN_ERROR.
	wrong := newSDK(t, option.WithWechatPayPublicKeyAuthCipher(mchID, mchSerial, platformKey, pubKeyID, &platformKey.PublicKey), sdkHTTP(t, srv))
	_, _, err = (&native.NativeApiService{Client: wrong}).QueryOrderByOutTradeNo(ctx, native.QueryOrderByOutTradeNoRequest{
		OutTradeNo: core.String("O-1"), Mchid: core.String(mchID)})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "SIGN_ERROR" {
		t.Errorf("request signed with the wrong key: %v", err)
	}

	// Signing badly: the SDK's validator refuses the answer.
	api.SignBadly(true)
	if _, _, err := (&native.NativeApiService{Client: sdk}).QueryOrderByOutTradeNo(ctx, native.QueryOrderByOutTradeNoRequest{
		OutTradeNo: core.String("O-1"), Mchid: core.String(mchID)}); err == nil {
		t.Error("the SDK accepted a badly signed answer")
	}
	api.SignBadly(false)

	// The read API client, direct and partner.
	der, err := x509.MarshalPKCS8PrivateKey(mchKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := wechatpay.NewReadAPI(keying.APIConfig{BaseURL: srv.URL, Merchant: mchID, KeyID: mchSerial,
		Key:         pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		PlatformKey: platformtest.PublicKeyPEM(t, &platformKey.PublicKey), PlatformKeyID: pubKeyID})
	if err != nil {
		t.Fatal(err)
	}
	q := c.(keying.OrderQuerier)
	if a, err := q.Query(ctx, keying.OrderQuery{OutTradeNo: "O-1"}); err != nil || a.State != keying.TradePaid || !a.At.Equal(paid) {
		t.Errorf("read API: %+v, %v", a, err)
	}
	if a, err := q.Query(ctx, keying.OrderQuery{OutTradeNo: "O-SP", SubMerchant: subMchID}); err != nil || a.State != keying.TradeNotPaid || a.Merchant != subMchID {
		t.Errorf("read API, partner: %+v, %v", a, err)
	}
}

// With a platform certificate (option.WithMerchantCredential and
// option.WithWechatPayCertificate, the pre-public-key setup) the SDK's
// validator accepts the stand-in's answer signed under the certificate's
// serial.
func TestWechatPayAPIPlatformCertificate(t *testing.T) {
	platformKey, mchKey := platformtest.Keys(t)
	serial := big.NewInt(0x5157F09EFDC096DE)
	certPEM := platformtest.Certificate(t, platformKey, serial, "Tenpay.com Root CA")
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	api := platformapi.NewWechatPayAPI(platformKey, platformtest.SerialHex(serial))
	api.AddMerchant(mchID, mchSerial, &mchKey.PublicKey)
	api.Put(platformapi.WechatPayOrder{MchID: mchID, OutTradeNo: "O-1", TransactionID: "4200000001", TradeState: "REFUND", Total: 100})
	srv := httptest.NewServer(api)
	defer srv.Close()
	sdk := newSDK(t, option.WithMerchantCredential(mchID, mchSerial, mchKey), option.WithWechatPayCertificate([]*x509.Certificate{cert}), sdkHTTP(t, srv))
	tx, _, err := (&native.NativeApiService{Client: sdk}).QueryOrderByOutTradeNo(context.Background(), native.QueryOrderByOutTradeNoRequest{
		OutTradeNo: core.String("O-1"), Mchid: core.String(mchID)})
	if err != nil || *tx.TradeState != "REFUND" {
		t.Fatalf("certificate: %+v, %v", tx, err)
	}
	// Another certificate: the SDK refuses the answer.
	_, other := platformtest.Keys(t)
	otherCert, _ := x509.ParseCertificate(mustDER(t, platformtest.Certificate(t, other, serial, "other")))
	sdk2 := newSDK(t, option.WithMerchantCredential(mchID, mchSerial, mchKey), option.WithWechatPayCertificate([]*x509.Certificate{otherCert}), sdkHTTP(t, srv))
	if _, _, err := (&native.NativeApiService{Client: sdk2}).QueryOrderByOutTradeNo(context.Background(), native.QueryOrderByOutTradeNoRequest{
		OutTradeNo: core.String("O-1"), Mchid: core.String(mchID)}); err == nil {
		t.Error("the SDK accepted an answer signed by another key than its certificate's")
	}
}

func mustDER(t *testing.T, pemData []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(pemData)
	if b == nil {
		t.Fatal("no PEM")
	}
	return b.Bytes
}
