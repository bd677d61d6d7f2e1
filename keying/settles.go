package keying

import (
	"strconv"
	"strings"
	"time"
)

// What reconciliation (对账) needs of a notification besides its key and
// money: whether its business event shows in the platform's bill as a
// payment or a refund (Notification.Settles), when the platform says it
// happened (Notification.At, the time its bill row carries), and, for the
// platforms whose keys are event ids, the objects the bill names instead
// (Notification.Refs). None of it is ever a reason to refuse a
// notification: a time that does not parse is left zero.

// Settlement says how a business event shows in its platform's bill.
type Settlement string

const (
	// SettlesPayment: a row of money received (Alipay 交易, WeChat Pay
	// SUCCESS, a Stripe charge, a PayPal T00nn credit).
	SettlesPayment Settlement = "payment"
	// SettlesRefund: a row of money returned (Alipay 退款, WeChat Pay
	// REFUND, a Stripe refund, PayPal T1107).
	SettlesRefund Settlement = "refund"
)

// beijing is the clock of Alipay's and WeChat Pay's notification times
// (UTC+8, no daylight saving).
var beijing = time.FixedZone("CST", 8*3600)

// beijingTime reads "2006-01-02 15:04:05" (Alipay gmt_*, WeChat Pay v2's
// refund success_time, optionally with milliseconds: gmt_refund) or
// "20060102150405" (WeChat Pay v2 time_end) in Beijing time.
func beijingTime(s string) time.Time {
	s = strings.TrimSpace(s)
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "20060102150405"} {
		if t, err := time.ParseInLocation(layout, s, beijing); err == nil {
			return t
		}
	}
	return time.Time{}
}

// rfc3339Time reads WeChat Pay v3's and PayPal's times.
func rfc3339Time(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}
	}
	return t
}

// unixTime reads Stripe's created (seconds).
func unixTime(s string) time.Time {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}

// EventSettles classifies an order's business event by its name: paid is
// a payment, refund:<id> a refund; a refund's other outcomes
// (refund:<id>:abnormal, :closed), closed, created and failed move no
// money.
func EventSettles(event string) Settlement {
	switch {
	case event == EventPaid:
		return SettlesPayment
	case strings.HasPrefix(event, EventRefund) && !strings.Contains(event[len(EventRefund):], ":"):
		return SettlesRefund
	}
	return ""
}

// Stripe's event types whose object is money in or money back
// (docs.stripe.com/api/events/types). charge.refunded names the charge,
// whose amount is the charge's, not the refund's: reconciliation compares
// no amount for it (see the reconcile report).
var (
	stripePaymentEvents = map[string]bool{
		"charge.succeeded": true, "charge.captured": true, "payment_intent.succeeded": true,
		"checkout.session.completed": true, "invoice.paid": true, "invoice.payment_succeeded": true,
	}
	stripeRefundEvents = map[string]bool{
		"charge.refunded": true, "charge.refund.updated": true, "refund.created": true, "refund.updated": true,
	}
)

// stripeRefPaths are where a Stripe event's object names what a
// balance-transaction export names: its own id, and for a payment intent,
// a Checkout session or an invoice the charge or intent behind it (a
// charge.refunded's object is the charge itself; a refund's, the refund,
// whose charge a Dashboard export names as the refund row's source).
var stripeRefPaths = []string{"data.object.id", "data.object.latest_charge", "data.object.charges.data.0.id",
	"data.object.charge", "data.object.payment_intent"}

// stripeSettles sets n's reconciliation fields from a verified event.
func stripeSettles(n *Notification, typ string) {
	switch {
	case stripePaymentEvents[typ]:
		n.Settles = SettlesPayment
	case stripeRefundEvents[typ]:
		n.Settles = SettlesRefund
	default:
		return
	}
	created, _, _ := n.Fields.JSON("created")
	n.At = unixTime(created)
	n.Refs = refsAt(n.Fields, stripeRefPaths, n.Refs)
}

// paypalSettles sets n's reconciliation fields from a verified event: a
// capture or sale completed is a payment, refunded a refund (the
// resource is then the refund, whose transaction id the report's T1107
// row carries).
func paypalSettles(n *Notification, typ string) {
	switch typ {
	case "PAYMENT.CAPTURE.COMPLETED", "PAYMENT.SALE.COMPLETED":
		n.Settles = SettlesPayment
	case "PAYMENT.CAPTURE.REFUNDED", "PAYMENT.SALE.REFUNDED":
		n.Settles = SettlesRefund
	default:
		return
	}
	for _, p := range []string{"resource.create_time", "create_time"} {
		if v, _, _ := n.Fields.JSON(p); v != "" {
			if n.At = rfc3339Time(v); !n.At.IsZero() {
				break
			}
		}
	}
	if id, _, _ := n.Fields.JSON("resource.id"); id != "" {
		n.Refs = []string{id}
	}
}
