package keying

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// The read API: what a platform's own API tells about payments whose
// notification never reached the backend (补单, "Missing notifications" in
// the docs). Two shapes exist, by what the platform offers:
//
//   - EventLister (Stripe, PayPal): the platform lists the events it sent
//     and can be asked to send one again, signed as ever, to the endpoint
//     it is configured with. The gateway never forges or re-signs one.
//   - OrderQuerier (Alipay, WeChat Pay): no list and no resend exist; the
//     merchant asks about one order (alipay.trade.query, WeChat Pay's
//     query by out_trade_no), and only a verified answer counts.
//
// A platform offers either through its module's ReadAPI (guest.Reader);
// the catch-up feature asks for the one it needs by type assertion. Credentials come in
// APIConfig and are never logged or shown.

// APIConfig is what a platform's read API client is built from: the
// route's `catch_up` settings.
type APIConfig struct {
	// BaseURL is the API's address: the platform's own by default, a local
	// stand-in in tests and on a laptop.
	BaseURL string
	// Key is the API credential: Stripe's restricted key (Events: Read, and
	// Write for resend), PayPal's client id and secret as "id:secret",
	// Alipay's application private key (PEM), WeChat Pay's merchant
	// private key (PEM).
	Key []byte
	// KeyID names the key where the platform asks (WeChat Pay's merchant
	// certificate serial number).
	KeyID string
	// Merchant is the merchant the API speaks for: Alipay's app_id,
	// WeChat Pay's mchid (a service provider's sp_mchid). For an
	// EventLister, where a resend goes: Stripe's webhook endpoint id
	// (we_…), PayPal's webhook id (the route's webhook_id).
	Merchant string
	// PlatformKey verifies the API's answers where the platform signs
	// them (Alipay's public key, WeChat Pay's platform public key or
	// certificate, PEM), and PlatformKeyID names it (Wechatpay-Serial).
	PlatformKey   []byte
	PlatformKeyID string
	// HTTPClient makes the calls; it must carry a timeout. Nil: a client
	// with a 10s timeout.
	HTTPClient *http.Client
	// Now is the clock for signed requests and timestamps; nil: time.Now.
	Now func() time.Time
}

// ReadAPI builds a platform's read API client from cfg: an EventLister or
// an OrderQuerier.
type ReadAPI func(cfg APIConfig) (any, error)

// PlatformEvent is one event as the platform's list names it.
type PlatformEvent struct {
	// ID is the platform's event id (evt_…, WH-…): with the route's scope,
	// the key its notification gets (stripe:evt_…).
	ID string
	// Type is the event's type (payment_intent.succeeded,
	// PAYMENT.CAPTURE.COMPLETED).
	Type string
	// At is when the platform says the event happened.
	At time.Time
	// Object is the id of the object the event is about (pi_…, ch_…, the
	// capture's id), and MerchantRef the merchant's own order number where
	// the object carries one (metadata.order_id, invoice_id / custom_id).
	Object, MerchantRef string
	// Money is the event's own money, as its notification would say.
	Money Money
	// Delivered: the platform says a delivery of it succeeded (Stripe's
	// pending_webhooks == 0). Informative: the gateway's own record
	// decides what is missing.
	Delivered bool
}

// EventLister is a platform that lists the events it sent and resends one.
type EventLister interface {
	// Events lists the events created in [since, until), newest first,
	// at most limit (the client pages through the platform's list).
	Events(ctx context.Context, since, until time.Time, limit int) ([]PlatformEvent, error)
	// Resend asks the platform to deliver the event again to the
	// endpoint it is configured with (Stripe: POST /v1/events/{id}/retry;
	// PayPal: POST /v1/notifications/webhooks-events/{id}/resend).
	Resend(ctx context.Context, id string) error
}

// OrderQuery names one order to ask the platform about: the merchant's
// out_trade_no, or the platform's trade_no / transaction_id, and the
// sub-merchant of a service provider (WeChat Pay's sub_mchid).
type OrderQuery struct {
	OutTradeNo  string
	TradeNo     string
	SubMerchant string
}

// TradeState is what a verified answer says of an order.
type TradeState string

const (
	// TradePaid: TRADE_SUCCESS or TRADE_FINISHED (Alipay), SUCCESS or
	// REFUND (WeChat Pay; REFUND is a trade paid and since refunded: the
	// payment happened). The only state that counts as paid.
	TradePaid TradeState = "paid"
	// TradeNotPaid: the platform knows the order and says it is not paid
	// (WAIT_BUYER_PAY, TRADE_CLOSED, NOTPAY, USERPAYING, CLOSED…).
	TradeNotPaid TradeState = "not_paid"
	// TradeNotExist: the platform does not know the order (Alipay
	// ACQ.TRADE_NOT_EXIST, WeChat Pay ORDER_NOT_EXIST). Never read as
	// "unpaid": an order can be queried before the platform has it.
	TradeNotExist TradeState = "not_exist"
)

// TradeAnswer is a verified answer to an OrderQuery.
type TradeAnswer struct {
	State TradeState
	// Status is the platform's own word (TRADE_SUCCESS, SUCCESS, NOTPAY).
	Status string
	// TradeNo is the platform's trade id (Alipay trade_no, WeChat Pay
	// transaction_id); OutTradeNo the merchant's.
	TradeNo, OutTradeNo string
	// Merchant is the merchant the answer is for (app_id, mchid or
	// sub_mchid): with TradeNo, the order a notification would key.
	Merchant string
	Money    Money
	// At is when the platform says it was paid, zero if not.
	At time.Time
}

// OrderQuerier is a platform that answers what state one order is in.
type OrderQuerier interface {
	// Query asks the platform about q. The answer's signature is verified
	// before it is returned: a response that fails verification is an
	// error wrapping ErrUnverified, never an answer.
	Query(ctx context.Context, q OrderQuery) (TradeAnswer, error)
}

// OrderNamer is an OrderQuerier that names an order as its platform does,
// so the catch-up engine names no platform: the numbers the merchant's
// status-query route is POSTed (catch_up's query_route), and which
// merchant of a service provider's is a sub-merchant it queries for.
type OrderNamer interface {
	// OrderNumbers are ans's numbers by the platform's names (Alipay
	// app_id, trade_no, out_trade_no, total_amount; WeChat Pay mchid or
	// sp_mchid/sub_mchid, transaction_id, out_trade_no).
	OrderNumbers(ans TradeAnswer) map[string]string
	// SubMerchant is merchant when the querier queries it as a service
	// provider's sub-merchant, "" when it is the querier's own merchant.
	SubMerchant(merchant string) string
}

// ErrUnverified is wrapped by a read API call whose response did not
// verify (a bad or missing signature): nothing may be concluded from it.
var ErrUnverified = errors.New("the platform's answer did not verify")

// ErrAPIRefused is wrapped by a read API call the platform refused (a
// credential it does not accept, a permission the key lacks): an alert,
// never a conclusion about a payment.
var ErrAPIRefused = errors.New("the platform's API refused the call")
