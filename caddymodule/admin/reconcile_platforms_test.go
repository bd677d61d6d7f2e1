package admin

import (
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/platforms/paypal/paypalbill"
	"github.com/idemgate/idemgate/platforms/stripe/stripebill"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
)

// How each platform's notifications reach the gateway in the
// reconciliation tests: signed as the platform signs them (platformtest),
// shaped as its documentation shows them, with the money and the times
// the bill then shows.

const (
	rcAlipayApp  = "2021004123456789"
	rcWxMchID    = "1230000109"
	rcWxAPIv3Key = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4"
	rcWxKeyID    = "PUB_KEY_ID_0114232134912410000000000000"
	rcStripeKey  = "whsec_test_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"
	rcPayPalHook = "1JE4291016473214C"
)

// rcEvent is one business event of the scenario: the payment of an order
// or one of its refunds.
type rcEvent struct {
	order  int
	refund string // "" for the payment
	// amount is what the bill says; notified what the notification says
	// (Alipay: refund_fee, cumulative).
	amount, notified string
	at               time.Time
}

// rcPlatform is one platform in the scenario.
type rcPlatform struct {
	name     string
	currency string
	route    string // the site's route: {store}, {backend}, {ttl}, {extra}
	// setup signs with fresh keys and returns the route's replacements.
	setup func(t *testing.T) []string
	// send delivers ev's notification; the backend sees X-Order: label.
	send func(t *testing.T, base, label string, ev rcEvent) gatewaytest.Reply
	// key is ev's full key; order the report's order of a bill row.
	key   func(ev rcEvent) string
	order func(ev rcEvent) string
	// row is ev as its bill row; bill starts the bill of [from, to).
	row  func(ev rcEvent) billtest.Row
	bill func(w io.Writer, from, to time.Time) billtest.Writer
	// others adds rows the reconciliation skips (payouts), if any.
	others bool
	query  string
}

func rcTrade(i int) string { return fmt.Sprintf("2026100322001458860%09d", i) }
func rcTxn(i int) string   { return fmt.Sprintf("4200000925202610030%09d", i) }

// signers are shared by a platform's setup and send.
type rcSigners struct {
	alipay platformtest.Alipay
	wx     platformtest.WechatPay
	pp     platformtest.PayPal
}

func rcPlatforms() []*rcPlatform {
	s := &rcSigners{}
	post := func(t *testing.T, u, label, ctype string, body []byte, h http.Header) gatewaytest.Reply {
		if h == nil {
			h = http.Header{}
		}
		h.Set("X-Order", label)
		return gatewaytest.Post(t, u, ctype, string(body), h)
	}
	return []*rcPlatform{{
		name: "alipay", currency: "CNY",
		route: `
	handle /notify {
		idempotency {
			platform alipay
			public_key {pub}
			app_id ` + rcAlipayApp + `
			{store}
			ttl {ttl}
			{extra}
		}
		reverse_proxy {backend}
	}`,
		setup: func(t *testing.T) []string {
			k, _ := platformtest.Keys(t)
			s.alipay = platformtest.Alipay{Key: k}
			return []string{"{pub}", platformtest.WriteFile(t, "alipay.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))}
		},
		send: func(t *testing.T, base, label string, ev rcEvent) gatewaytest.Reply {
			p := platformtest.AlipayNotify(rcAlipayApp, fmt.Sprintf("M%d", ev.order), rcTrade(ev.order), "TRADE_SUCCESS", "500.00")
			at := ev.at.In(time.FixedZone("CST", 8*3600)).Format(time.DateTime)
			p.Set("gmt_payment", at)
			if ev.refund == "" {
				p.Set("total_amount", ev.notified)
			} else {
				p.Set("out_biz_no", ev.refund)
				p.Set("refund_fee", ev.notified)
				p.Set("gmt_refund", at)
			}
			return post(t, base+"/notify", label, "application/x-www-form-urlencoded; charset=utf-8", []byte(s.alipay.Body(t, p)), nil)
		},
		key: func(ev rcEvent) string {
			return "alipay:" + rcAlipayApp + ":" + rcTrade(ev.order) + ":" + rcEventName(ev)
		},
		order: func(ev rcEvent) string { return "alipay:" + rcAlipayApp + ":" + rcTrade(ev.order) },
		row: func(ev rcEvent) billtest.Row {
			return rcRow(ev, rcTrade(ev.order), ev.refund, "CNY")
		},
		bill: func(w io.Writer, from, to time.Time) billtest.Writer {
			return alipaybill.NewWriter(w, "20881021772966100156", from, to)
		},
		query: "platform=alipay",
	}, {
		name: "wechatpay", currency: "CNY",
		route: `
	handle /notify {
		idempotency {
			platform wechatpay
			public_key {pub}
			public_key_id ` + rcWxKeyID + `
			secret ` + rcWxAPIv3Key + `
			{store}
			ttl {ttl}
			{extra}
		}
		reverse_proxy {backend}
	}`,
		setup: func(t *testing.T) []string {
			k, _ := platformtest.Keys(t)
			s.wx = platformtest.WechatPay{Key: k, Serial: rcWxKeyID, APIv3Key: rcWxAPIv3Key}
			return []string{"{pub}", platformtest.WriteFile(t, "wx.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))}
		},
		send: func(t *testing.T, base, label string, ev rcEvent) gatewaytest.Reply {
			at := ev.at.Format(time.RFC3339)
			fen := rcFen(ev.notified)
			res := fmt.Sprintf(`{"transaction_id":%q,"amount":{"payer_total":%d,"total":%d,"currency":"CNY","payer_currency":"CNY"},"mchid":%q,"trade_state":"SUCCESS","bank_type":"CMC","success_time":%q,"out_trade_no":"M%d","appid":"wxd678efh567hg6787","trade_type":"NATIVE"}`,
				rcTxn(ev.order), fen, fen, rcWxMchID, at, ev.order)
			typ := "TRANSACTION.SUCCESS"
			if ev.refund != "" {
				typ = "REFUND.SUCCESS"
				res = fmt.Sprintf(`{"mchid":%q,"transaction_id":%q,"out_trade_no":"M%d","refund_id":"50300%s","out_refund_no":%q,"refund_status":"SUCCESS","success_time":%q,"amount":{"total":99900,"refund":%d,"payer_total":99900,"payer_refund":%d}}`,
					rcWxMchID, rcTxn(ev.order), ev.order, ev.refund, ev.refund, at, fen, fen)
			}
			body, h := s.wx.Notification(t, platformtest.WechatPayEvent{ID: "EV-" + label, EventType: typ, Resource: res})
			return post(t, base+"/notify", label, "application/json", body, h)
		},
		key: func(ev rcEvent) string {
			return "wechatpay:" + rcWxMchID + ":" + rcTxn(ev.order) + ":" + rcEventName(ev)
		},
		order: func(ev rcEvent) string { return "wechatpay:" + rcWxMchID + ":" + rcTxn(ev.order) },
		row: func(ev rcEvent) billtest.Row {
			r := rcRow(ev, rcTxn(ev.order), ev.refund, "CNY")
			r.Merchant = rcWxMchID
			return r
		},
		bill:  func(w io.Writer, _, _ time.Time) billtest.Writer { return wechatpaybill.NewWriter(w) },
		query: "platform=wechatpay",
	}, {
		name: "stripe", currency: "USD", others: true,
		route: `
	handle /notify {
		idempotency {
			platform stripe
			secret ` + rcStripeKey + `
			{store}
			ttl {ttl}
			{extra}
		}
		reverse_proxy {backend}
	}`,
		setup: func(t *testing.T) []string { return nil },
		send: func(t *testing.T, base, label string, ev rcEvent) gatewaytest.Reply {
			typ, obj := "charge.succeeded", fmt.Sprintf(`{"id":"ch_%d","object":"charge","amount":%d,"currency":"usd","payment_intent":"pi_%d","status":"succeeded"}`,
				ev.order, rcFen(ev.notified), ev.order)
			if ev.refund != "" {
				typ, obj = "refund.created", fmt.Sprintf(`{"id":%q,"object":"refund","amount":%d,"currency":"usd","charge":"ch_%d","payment_intent":"pi_%d","status":"succeeded"}`,
					ev.refund, rcFen(ev.notified), ev.order, ev.order)
			}
			body := []byte(fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"data":{"object":%s},"livemode":false,"type":%q}`,
				rcStripeEvent(ev), ev.at.Unix(), obj, typ))
			return post(t, base+"/notify", label, "application/json", body, platformtest.StripeHeader(body, rcStripeKey, time.Now()))
		},
		key: func(ev rcEvent) string { return "stripe:" + rcStripeEvent(ev) },
		order: func(ev rcEvent) string {
			if ev.refund != "" {
				return ev.refund
			}
			return fmt.Sprintf("ch_%d", ev.order)
		},
		row: func(ev rcEvent) billtest.Row {
			r := rcRow(ev, fmt.Sprintf("ch_%d", ev.order), ev.refund, "USD")
			r.PaymentIntent = fmt.Sprintf("pi_%d", ev.order)
			return r
		},
		bill:  func(w io.Writer, _, _ time.Time) billtest.Writer { return stripebill.NewWriter(w, true) },
		query: "platform=stripe",
	}, {
		name: "paypal", currency: "USD", others: true,
		route: `
	handle /notify {
		idempotency {
			platform paypal
			webhook_id ` + rcPayPalHook + `
			certificate {cert}
			{store}
			ttl {ttl}
			{extra}
		}
		reverse_proxy {backend}
	}`,
		setup: func(t *testing.T) []string {
			k, _ := platformtest.Keys(t)
			s.pp = platformtest.PayPal{Key: k, WebhookID: rcPayPalHook}
			return []string{"{cert}", platformtest.WriteFile(t, "paypal.pem", platformtest.Certificate(t, k, big.NewInt(1), "messageverificationcerts.paypal.com"))}
		},
		send: func(t *testing.T, base, label string, ev rcEvent) gatewaytest.Reply {
			typ, id := "PAYMENT.CAPTURE.COMPLETED", rcCapture(ev.order)
			if ev.refund != "" {
				typ, id = "PAYMENT.CAPTURE.REFUNDED", ev.refund
			}
			at := ev.at.UTC().Format(time.RFC3339)
			body := []byte(fmt.Sprintf(`{"id":"WH-%s","event_version":"1.0","create_time":%q,"resource_type":"capture","event_type":%q,"resource":{"id":%q,"create_time":%q,"amount":{"currency_code":"USD","value":%q},"status":"COMPLETED"}}`,
				strings.ReplaceAll(label, ":", "-"), at, typ, id, at, ev.notified))
			return post(t, base+"/notify", label, "application/json", body, s.pp.Header(t, body, time.Now()))
		},
		key: func(ev rcEvent) string { return "paypal:WH-" + strings.ReplaceAll(rcLabel(ev), ":", "-") },
		order: func(ev rcEvent) string {
			if ev.refund != "" {
				return ev.refund
			}
			return rcCapture(ev.order)
		},
		row: func(ev rcEvent) billtest.Row { return rcRow(ev, rcCapture(ev.order), ev.refund, "USD") },
		bill: func(w io.Writer, from, to time.Time) billtest.Writer {
			return paypalbill.NewWriter(w, "4X5Y6ZACCOUNT", from, to)
		},
		query: "platform=paypal",
	}}
}

func rcCapture(i int) string { return fmt.Sprintf("9P%015d", i) }

func rcStripeEvent(ev rcEvent) string {
	if ev.refund != "" {
		return "evt_r" + strings.TrimPrefix(ev.refund, "re_")
	}
	return fmt.Sprintf("evt_p%d", ev.order)
}

// rcLabel names ev for the backend's count: "<order>:paid" or
// "<order>:refund:<id>".
func rcLabel(ev rcEvent) string { return fmt.Sprintf("%d:%s", ev.order, rcEventName(ev)) }

func rcEventName(ev rcEvent) string {
	if ev.refund == "" {
		return "paid"
	}
	return "refund:" + ev.refund
}

func rcRow(ev rcEvent, order, refund, currency string) billtest.Row {
	r := billtest.Row{Kind: billtest.Payment, Order: order, MerchantOrder: fmt.Sprintf("M%d", ev.order), Amount: ev.amount,
		Currency: currency, Time: ev.at}
	if ev.refund != "" {
		r.Kind, r.Refund = billtest.Refund, ev.refund
	}
	return r
}

// rcFen is an amount of two decimals in hundredths.
func rcFen(amount string) int64 {
	v, ok := new(big.Int).SetString(strings.Replace(amount, ".", "", 1), 10)
	if !ok || !strings.Contains(amount, ".") || len(amount)-strings.IndexByte(amount, '.') != 3 {
		panic("rcFen: " + amount)
	}
	return v.Int64()
}

// rcCents writes hundredths as an amount.
func rcCents(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

// rcSigned writes signed hundredths as an amount ("-0.50").
func rcSigned(c int64) string {
	if c < 0 {
		return "-" + rcCents(-c)
	}
	return rcCents(c)
}
