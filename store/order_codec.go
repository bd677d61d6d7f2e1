package store

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// An event's stored value in its order (every store), as compact as the
// Redis budget (200 bytes an order, the reconciliation indexes included)
// asks — a Redis hash's values are bytes, and no script reads them:
//
//	flags      1 byte: bits 0-1 Settles (0 none, 1 payment, 2 refund,
//	           3 a refund whose amount is the order's refunded total,
//	           OrderRun.RefundTotal), bit 2 the amount is text (see
//	           below), bit 3 At is known, bit 4 Via is named
//	ran        uvarint, ms since the Unix epoch
//	at         with bit 3: varint, ran − At in seconds (negative when the
//	           platform's clock is ahead of ours)
//	amount     uvarint: 0 none, else (mantissa<<3 | scale)<<1 | negative, + 1:
//	           "1288.00" is mantissa 128800, scale 2; with bit 2 of flags,
//	           uvarint length + the decimal as written (more than 7
//	           decimals, or digits past 55 bits)
//	currency   uvarint length + bytes
//	via        with bit 4: uvarint length + bytes
//	refs       (uvarint length + bytes)…, to the end
//
// The first byte of a value of the former text layout ("<ran ms base
// 36>,<amount>,<currency>") is a digit or a letter, never below '0' (48),
// above every flags byte, so both are read.

const (
	flagSettles = 0x03
	// settlesRefundTotal, in the Settles bits, is a refund whose amount
	// is the order's refunded total: a gateway of an earlier version
	// reads it as an event that settles nothing.
	settlesRefundTotal = 0x03
	flagAmountText     = 0x04
	flagAt             = 0x08
	flagVia            = 0x10
	maxScale           = 7
)

func settlesBits(s keying.Settlement) byte {
	switch s {
	case keying.SettlesPayment:
		return 1
	case keying.SettlesRefund:
		return 2
	}
	return 0
}

func settlesOf(b byte) keying.Settlement {
	switch b & flagSettles {
	case 1:
		return keying.SettlesPayment
	case 2, settlesRefundTotal:
		return keying.SettlesRefund
	}
	return ""
}

// encodeOrderEvent is r's event, run at ran, as stored.
func encodeOrderEvent(ran time.Time, r *OrderRun) []byte {
	mant, scale, neg, exact := packDecimal(r.Amount)
	flags := settlesBits(r.Settles)
	if r.RefundTotal && r.Settles == keying.SettlesRefund && r.Amount != "" {
		flags |= settlesRefundTotal
	}
	if !exact {
		flags |= flagAmountText
	}
	if !r.At.IsZero() {
		flags |= flagAt
	}
	if r.Via != "" {
		flags |= flagVia
	}
	b := make([]byte, 0, 24+len(r.Currency)+len(r.Via))
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(max(ran.UnixMilli(), 0)))
	if !r.At.IsZero() {
		b = binary.AppendVarint(b, ran.Unix()-r.At.Unix())
	}
	switch {
	case !exact:
		b = appendString(b, r.Amount)
	case r.Amount == "":
		b = append(b, 0)
	default:
		v := (mant<<3 | uint64(scale)) << 1
		if neg {
			v |= 1
		}
		b = binary.AppendUvarint(b, v+1)
	}
	b = appendString(b, r.Currency)
	if r.Via != "" {
		b = appendString(b, r.Via)
	}
	for _, ref := range r.Refs {
		b = appendString(b, ref)
	}
	return b
}

// packDecimal splits a plain decimal ("-12.30") for encodeOrderEvent;
// exact is false when it must be kept as text.
func packDecimal(s string) (mant uint64, scale int, neg, exact bool) {
	if s == "" {
		return 0, 0, false, true
	}
	d := s
	if d[0] == '-' {
		neg, d = true, d[1:]
	}
	whole, frac, dot := strings.Cut(d, ".")
	if whole == "" || (dot && frac == "") || len(frac) > maxScale || len(whole)+len(frac) > 16 {
		return 0, 0, false, false // 16 digits stay under 2^55
	}
	for _, c := range whole + frac {
		if c < '0' || c > '9' {
			return 0, 0, false, false
		}
	}
	if len(whole) > 1 && whole[0] == '0' {
		return 0, 0, false, false // "007" would come back "7"
	}
	mant, _ = strconv.ParseUint(whole+frac, 10, 64)
	return mant, len(frac), neg, true
}

// unpackDecimal writes what packDecimal read.
func unpackDecimal(mant uint64, scale int, neg bool) string {
	return keying.Decimal(strconv.FormatUint(mant, 10), scale, neg)
}

// decodeOrderEvent reads a stored value, for event of order.
func decodeOrderEvent(order, event, v string) (OrderEvent, error) {
	ev := OrderEvent{Event: event, Key: eventKey(order, event)}
	if v == "" {
		return OrderEvent{}, errCorrupt
	}
	if v[0] >= '0' {
		return decodeTextEvent(ev, v)
	}
	r := reader{b: []byte(v[1:])}
	flags := v[0]
	ev.Settles = settlesOf(flags)
	ev.Ran = time.UnixMilli(int64(r.uvarint()))
	if flags&flagAt != 0 {
		ev.At = time.Unix(ev.Ran.Unix()-r.varint(), 0)
	}
	if flags&flagAmountText != 0 {
		ev.Amount = r.string()
	} else if a := r.uvarint(); a > 0 {
		a--
		ev.Amount = unpackDecimal(a>>4, int(a>>1&7), a&1 == 1)
	}
	if flags&flagSettles == settlesRefundTotal {
		ev.RefundedTotal = ev.Amount // the own amount: ownRefunds, once the order is read whole
	}
	ev.Currency = r.string()
	if flags&flagVia != 0 {
		ev.Via = r.string()
	}
	for r.err == nil && len(r.b) > 0 {
		ev.Refs = append(ev.Refs, r.string())
	}
	if r.err != nil {
		return OrderEvent{}, errCorrupt
	}
	return ev, nil
}

// decodeTextEvent reads the former layout, "<ran ms base 36>,<amount>,
// <currency>".
func decodeTextEvent(ev OrderEvent, v string) (OrderEvent, error) {
	ran, rest, _ := strings.Cut(v, ",")
	amount, currency, _ := strings.Cut(rest, ",")
	ms, err := strconv.ParseInt(ran, 36, 64)
	if err != nil {
		return OrderEvent{}, errCorrupt
	}
	ev.Ran, ev.Amount, ev.Currency = time.UnixMilli(ms), amount, currency
	return ev, nil
}
