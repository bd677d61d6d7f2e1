package keying

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Business events. A payment is an order whose business runs when the
// order enters a state (paid, each refund, closed), whatever channel or
// status message brings it and however late: the presets of Alipay and
// WeChat Pay classify each verified notification into the order it
// belongs to and the event it reports, and their default key is
// "<merchant>:<order>:<event>". store.OrderOf reads the same layout back
// from a full key, so the names here and there are one vocabulary.
const (
	EventPaid   = "paid"   // the order is paid (Alipay TRADE_SUCCESS, TRADE_FINISHED, the signed return; WeChat Pay SUCCESS)
	EventClosed = "closed" // the order was closed unpaid (Alipay TRADE_CLOSED without a refund)
	// EventCreated: Alipay's WAIT_BUYER_PAY, sent only when the merchant
	// subscribed to it: the trade exists, nothing is paid.
	EventCreated = "created"
	// EventFailed: WeChat Pay v2's result_code FAIL payment notification.
	EventFailed = "failed"
	// EventFinished is no preset's: the name a route's own key gives
	// Alipay's TRADE_FINISHED when its backend must see it apart from
	// paid (the README's recipe), still an event of the order.
	EventFinished = "finished"
	// EventRefund prefixes a refund's event: "refund:<the merchant's
	// refund id>" (Alipay out_biz_no, WeChat Pay out_refund_no), one event
	// per refund; WeChat Pay's other refund outcomes are the refund's own
	// events, "refund:<id>:abnormal" and "refund:<id>:closed".
	EventRefund = "refund:"
)

// RefundEvent names refund id's event, with an outcome other than success
// ("abnormal", "closed") after it.
func RefundEvent(id, outcome string) string {
	if outcome == "" {
		return EventRefund + id
	}
	return EventRefund + id + ":" + outcome
}

// Money is a notification's amount in major units as an exact decimal
// ("9.90", "500" for JPY) and its ISO 4217 currency, upper-case; both ""
// when the notification names none.
type Money struct {
	Amount   string
	Currency string
}

// minorDigits is how many decimals a currency's minor unit has where it is
// not two: Stripe's zero-decimal and three-decimal currencies
// (stripe.com/docs/currencies#zero-decimal and #three-decimal), which are
// ISO 4217's.
var minorDigits = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "JPY": 0, "KMF": 0, "KRW": 0, "MGA": 0,
	"PYG": 0, "RWF": 0, "UGX": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "JOD": 3, "KWD": 3, "OMR": 3, "TND": 3,
}

// FromMinor turns an amount in minor units (fen, cents: "990") of
// currency into Money in major units ("9.90").
func FromMinor(minor, currency string) (Money, error) {
	currency = strings.ToUpper(strings.TrimSpace(currency))
	n, err := strconv.ParseInt(strings.TrimSpace(minor), 10, 64)
	if err != nil {
		return Money{}, fmt.Errorf("amount %s is not a whole number of minor units", Clip(minor))
	}
	digits, ok := minorDigits[currency]
	if !ok {
		digits = 2
	}
	return Money{Amount: formatMinor(n, digits), Currency: currency}, nil
}

// formatMinor writes n minor units with digits decimals.
func formatMinor(n int64, digits int) string {
	neg := n < 0
	if neg {
		n = -n
	}
	return Decimal(strconv.FormatInt(n, 10), digits, neg)
}

// Decimal writes a magnitude's base-10 digits with the last scale of them
// after the point, behind a "-" when neg: ("5", 2, false) is "0.05".
func Decimal(digits string, scale int, neg bool) string {
	for len(digits) <= scale {
		digits = "0" + digits
	}
	if scale > 0 {
		digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// Major checks a decimal amount in major units as a platform writes it
// ("9.90", "100") and returns it with currency.
func Major(amount, currency string) (Money, error) {
	a := strings.TrimSpace(amount)
	whole, frac, _ := strings.Cut(a, ".")
	if whole == "" || len(frac) > 3 || strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" {
		return Money{}, fmt.Errorf("amount %s is not a decimal", Clip(amount))
	}
	return Money{Amount: a, Currency: strings.ToUpper(strings.TrimSpace(currency))}, nil
}

// RefundIncrease is a refund's own amount when its notification names the
// order's refunded total so far (Alipay's refund_fee, which only grows):
// total less before, the largest of others (the totals the order's other
// refunds named) below it; total itself when none is (the order's first
// refund, or one whose earlier refunds are not known yet: a later
// arrival of one lowers the figure). Written with the larger of the two
// amounts' decimals; total as it is when it is not a decimal.
func RefundIncrease(total string, others []string) (own, before string) {
	t, ok := new(big.Rat).SetString(strings.TrimSpace(total))
	if !ok || strings.ContainsAny(total, "eE/") {
		return total, ""
	}
	var prev *big.Rat
	for _, o := range others {
		r, ok := new(big.Rat).SetString(strings.TrimSpace(o))
		if !ok || strings.ContainsAny(o, "eE/") || r.Cmp(t) >= 0 || prev != nil && r.Cmp(prev) <= 0 {
			continue
		}
		prev, before = r, strings.TrimSpace(o)
	}
	if prev == nil {
		return total, ""
	}
	return new(big.Rat).Sub(t, prev).FloatString(max(decimals(total), decimals(before))), before
}

// decimals is how many digits a decimal amount has after its point.
func decimals(a string) int {
	_, frac, _ := strings.Cut(strings.TrimSpace(a), ".")
	return len(frac)
}

// SplitOrder reads a key written as "<order>:<event>" back into its order
// and business event: event is one of the events above (a refund's with
// its id and outcome). ok is false for any other key — Stripe's
// "stripe:evt_…", a generic route's own — which is then a business event
// of its own. Stores place a key with its order by it, so an order's
// events share a Redis hash slot.
func SplitOrder(key string) (order, event string, ok bool) {
	if i := strings.Index(key, ":"+EventRefund); i > 0 && len(key) > i+len(EventRefund)+1 {
		if !strings.Contains(key[:i], ":") {
			return "", "", false
		}
		return key[:i], key[i+1:], true
	}
	i := strings.LastIndexByte(key, ':')
	if i <= 0 {
		return "", "", false
	}
	switch ev := key[i+1:]; ev {
	case EventPaid, EventClosed, EventCreated, EventFailed, EventFinished:
		// An order is "<scope>:<merchant>:<order>", or at least a scope
		// and one part: a bare "<scope>:paid" names no order.
		if strings.Contains(key[:i], ":") {
			return key[:i], ev, true
		}
	}
	return "", "", false
}
