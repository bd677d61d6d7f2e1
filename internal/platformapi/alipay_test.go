package platformapi_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/smartwalle/alipay/v3"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/keying"
	alipaypreset "github.com/idemgate/idemgate/platforms/alipay"
)

const appID = "2021000000000001"

// alipaySDK is smartwalle/alipay's client for the app signing with appKey
// (PKCS#8 PEM) and checking answers with Alipay's public key, pointed at
// gateway.
func alipaySDK(t *testing.T, appKeyPEM, alipayPubPEM []byte, gateway string) *alipay.Client {
	t.Helper()
	c, err := alipay.New(appID, string(appKeyPEM), false, alipay.WithSandboxGateway(gateway),
		alipay.WithHTTPClient(&http.Client{Timeout: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadAliPayPublicKey(string(alipayPubPEM)); err != nil {
		t.Fatal(err)
	}
	return c
}

func pkcs8(t *testing.T, k any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// The stand-in answers alipay.trade.query as Alipay does: smartwalle/alipay
// signs the request (which the stand-in's check accepts) and verifies the
// answer's sign over the raw response bytes (which it accepts); told to
// sign badly, the SDK refuses the answer too. The read API client's own
// request is accepted by the same check.
func TestAlipayAPIAnswersAsAlipay(t *testing.T) {
	alipayKey, appKey := platformtest.Keys(t)
	api := platformapi.NewAlipayAPI(appID, &appKey.PublicKey, alipayKey)
	srv := httptest.NewServer(api)
	defer srv.Close()
	paid := time.Date(2026, 3, 14, 17, 26, 32, 0, keying.Beijing)
	api.Put(platformapi.AlipayTrade{OutTradeNo: "O-1", TradeNo: "2026031422001", Status: "TRADE_SUCCESS", TotalAmount: "9.90", PaidAt: paid})
	alipayPub := platformtest.PublicKeyPEM(t, &alipayKey.PublicKey)
	sdk := alipaySDK(t, pkcs8(t, appKey), alipayPub, srv.URL+"/gateway.do")
	ctx := context.Background()

	rsp, err := sdk.TradeQuery(ctx, alipay.TradeQuery{OutTradeNo: "O-1"})
	if err != nil {
		t.Fatalf("SDK TradeQuery: %v", err)
	}
	if !rsp.IsSuccess() || rsp.TradeStatus != alipay.TradeStatusSuccess || rsp.TradeNo != "2026031422001" ||
		rsp.TotalAmount != "9.90" || rsp.SendPayDate != "2026-03-14 17:26:32" {
		t.Errorf("SDK read %+v", rsp)
	}

	// ACQ.TRADE_NOT_EXIST, signed: the SDK verifies it and reads the code.
	rsp, err = sdk.TradeQuery(ctx, alipay.TradeQuery{OutTradeNo: "never-seen"})
	if err != nil {
		t.Fatalf("SDK TradeQuery (not exist): %v", err)
	}
	if rsp.Code != alipay.CodeBusinessFailed || rsp.SubCode != "ACQ.TRADE_NOT_EXIST" {
		t.Errorf("SDK read %+v", rsp.Error)
	}

	// A request the SDK signs with another key than the app's (here
	// Alipay's own): the stand-in's check refuses it, unsigned, as Alipay
	// does.
	wrong := alipaySDK(t, pkcs8(t, alipayKey), alipayPub, srv.URL+"/gateway.do")
	_, err = wrong.TradeQuery(ctx, alipay.TradeQuery{OutTradeNo: "O-1"})
	var aerr *alipay.Error
	if !errors.As(err, &aerr) || aerr.SubCode != "isv.invalid-signature" {
		t.Errorf("request signed with the wrong key: %v", err)
	}

	// Signing badly: the SDK's own verification fails.
	api.SignBadly(true)
	if _, err := sdk.TradeQuery(ctx, alipay.TradeQuery{OutTradeNo: "O-1"}); err == nil {
		t.Error("the SDK accepted a badly signed answer")
	}
	api.SignBadly(false)

	// The read API client's request passes the stand-in's check, and it
	// reads the answer the SDK read.
	c, err := alipaypreset.NewReadAPI(keying.APIConfig{BaseURL: srv.URL + "/gateway.do", Merchant: appID,
		Key: pkcs8(t, appKey), PlatformKey: alipayPub})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.(keying.OrderQuerier).Query(ctx, keying.OrderQuery{OutTradeNo: "O-1"})
	if err != nil || a.State != keying.TradePaid || a.TradeNo != "2026031422001" || !a.At.Equal(paid) {
		t.Errorf("read API: %+v, %v", a, err)
	}
}
