package platformtest

import (
	"net/url"
	"testing"

	"github.com/idemgate/idemgate/internal/signer"
)

// Alipay signs notifications as Alipay does for the asynchronous notify (a
// form POST to notify_url) and the browser's synchronous return (a GET query
// on return_url). Its fields are signer.Alipay's: Key, SignType ("RSA2",
// the default, or "RSA") and Charset ("utf-8", the default, or "GBK").
type Alipay signer.Alipay

// AlipayNotify is an asynchronous trade_status_sync notify for one order
// (signer.AlipayNotify).
func AlipayNotify(appID, outTradeNo, tradeNo, tradeStatus, totalAmount string) url.Values {
	return signer.AlipayNotify(appID, outTradeNo, tradeNo, tradeStatus, totalAmount)
}

// AlipayReturn is the query Alipay appends to return_url when it sends the
// browser back after a page payment (alipay.trade.page.pay.return).
func AlipayReturn(appID, outTradeNo, tradeNo, totalAmount string) url.Values {
	return signer.AlipayReturn(appID, outTradeNo, tradeNo, totalAmount)
}

// Sign returns a copy of params with sign and sign_type set, as Alipay
// does (signer.Alipay.Sign).
func (a Alipay) Sign(t testing.TB, params url.Values) url.Values {
	t.Helper()
	v, err := signer.Alipay(a).Sign(params)
	check(t, err)
	return v
}

// Body is Sign's result form-encoded, the body of a notify POST
// (Content-Type application/x-www-form-urlencoded).
func (a Alipay) Body(t testing.TB, params url.Values) string {
	t.Helper()
	v, err := signer.Alipay(a).Body(params)
	check(t, err)
	return v
}

// Query is the same as Body: the raw query of a return_url GET.
func (a Alipay) Query(t testing.TB, params url.Values) string {
	t.Helper()
	v, err := signer.Alipay(a).Body(params)
	check(t, err)
	return v
}

// AlipayContent is the string Alipay signs for params (signer.AlipayContent).
func AlipayContent(params url.Values) []byte { return signer.AlipayContent(params) }
