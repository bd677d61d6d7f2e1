package keying

import (
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

// Beijing is the clock of Alipay's and WeChat Pay's notification times
// (UTC+8, no daylight saving).
var Beijing = time.FixedZone("CST", 8*3600)

// BeijingTime reads "2006-01-02 15:04:05" (Alipay gmt_*, WeChat Pay v2's
// refund success_time, optionally with milliseconds: gmt_refund) or
// "20060102150405" (WeChat Pay v2 time_end) in Beijing time.
func BeijingTime(s string) time.Time {
	s = strings.TrimSpace(s)
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "20060102150405"} {
		if t, err := time.ParseInLocation(layout, s, Beijing); err == nil {
			return t
		}
	}
	return time.Time{}
}

// RFC3339Time reads WeChat Pay v3's and PayPal's times.
func RFC3339Time(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}
	}
	return t
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
