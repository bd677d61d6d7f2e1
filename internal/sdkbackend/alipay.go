package sdkbackend

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/go-pay/gopay"
	gopayalipay "github.com/go-pay/gopay/alipay"
	"github.com/smartwalle/alipay/v3"
)

// appKey is the merchant's own application key, which smartwalle/alipay's
// client wants even to verify: it signs the merchant's API calls, never a
// notification, so one made up per process serves.
var appKey = sync.OnceValue(func() string {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
})

// alipayClient is a sandbox client (it never downloads a certificate)
// holding Alipay's public key.
func alipayClient(alipayPublicKeyPEM string) *alipay.Client {
	c, err := alipay.New("2021000000000000", appKey(), false)
	if err != nil {
		panic(fmt.Sprintf("sdkbackend: alipay client: %v", err))
	}
	if err := c.LoadAliPayPublicKey(alipayPublicKeyPEM); err != nil {
		panic(fmt.Sprintf("sdkbackend: alipay public key: %v", err))
	}
	return c
}

// pemBody is the base64 inside one PEM block, on one line.
func pemBody(s string) string {
	var out strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "-----") {
			out.WriteString(line)
		}
	}
	return out.String()
}

func gopayAlipayVerify(alipayPublicKeyPEM string, bm gopay.BodyMap) (bool, error) {
	return gopayalipay.VerifySign(alipayPublicKeyPEM, bm)
}

// The two kinds of Alipay backend a route's `return` is chosen for, both
// verifying every request with smartwalle/alipay's DecodeNotification (the
// notify's form, the return's signed query) and answering the notify
// "success" and the browser's return (GET) the shop's result page, 200
// HTML. Business runs are counted as "<trade_no>:paid".

// AlipayNotifyOnly is the backend Alipay's documentation asks for: the
// payment runs on the notify only (TRADE_SUCCESS or TRADE_FINISHED:
// "<trade_no>:paid"); the return only shows a page, counted as
// "page:<trade_no>", no business run.
func AlipayNotifyOnly(alipayPublicKeyPEM string) *Backend {
	return alipayChannels(alipayPublicKeyPEM, func(tradeNo string) string { return "page:" + tradeNo })
}

// AlipayBothChannels is the legacy backend that runs the payment on
// whichever channel brings it, and again on the other: the return and the
// notify alike are "<trade_no>:paid".
func AlipayBothChannels(alipayPublicKeyPEM string) *Backend {
	return alipayChannels(alipayPublicKeyPEM, func(tradeNo string) string { return tradeNo + ":paid" })
}

func alipayChannels(alipayPublicKeyPEM string, onReturn func(tradeNo string) string) *Backend {
	client := alipayClient(alipayPublicKeyPEM)
	b := newBackend(func(r *http.Request, body []byte) (string, error) {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err := r.ParseForm(); err != nil {
			return "", err
		}
		n, err := client.DecodeNotification(r.Form)
		if err != nil {
			return "", err
		}
		switch {
		case r.Method == http.MethodGet:
			return onReturn(n.TradeNo), nil
		case n.OutBizNo != "" || n.RefundFee != "":
			return n.TradeNo + ":refund:" + n.OutBizNo, nil
		case n.TradeStatus == alipay.TradeStatusSuccess || n.TradeStatus == alipay.TradeStatusFinished:
			return n.TradeNo + ":paid", nil
		}
		return n.TradeNo + ":" + string(n.TradeStatus), nil
	}, func(w http.ResponseWriter) { _, _ = io.WriteString(w, "success") },
		func(w http.ResponseWriter, err error) { _, _ = io.WriteString(w, "fail") })
	b.page = func(w http.ResponseWriter, event string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<html><body>Thank you: "+strings.TrimSuffix(strings.TrimPrefix(event, "page:"), ":paid")+"</body></html>")
	}
	return b
}
