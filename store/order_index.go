package store

import (
	"context"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// Reconciliation (对账) compares a platform's bill with the business events
// that ran. A bill row names an order (Alipay's trade_no, WeChat Pay's
// transaction_id: the order's name holds it, so Orders finds the row's
// events) or, for Stripe and PayPal, whose keys are event ids, an object
// (a charge, a refund, a capture: EventsByRef finds the events that named
// it). What ran but is in no bill row is found by the day index (RanOn):
// every event that settles money is filed under the UTC day the platform
// says it happened (OrderRun.At, else the day it ran), per scope and
// merchant, for order_ttl.
//
// Both indexes are written by Complete in the same store operation as the
// order state — no extra round trip (see each store) — and neither is
// cleaned when a purge or a reopen forgets an event: readers check each
// entry against the order state, which is the truth, so a stale entry
// costs a read and is dropped.

// OrderIndex is what reconciliation reads, in batches: it is apart from
// Store because only the reconciliation of a bill (and Search, for the
// amounts) reads it, never the request path; every store implements it.
type OrderIndex interface {
	// Orders reads several orders' states at once (one round trip on
	// Redis): out[i] is names[i]'s, nil when it has none. ExpiresAt is
	// left zero.
	Orders(ctx context.Context, names []string) ([]*Order, error)
	// EventsByRef returns, for each of refs, the full keys of the events
	// of scope that named it and settle as settles, as filed when they
	// ran (one round trip on Redis).
	EventsByRef(ctx context.Context, scope string, settles keying.Settlement, refs []string) ([][]string, error)
	// RanOn pages through the day index: the orders of scope and
	// merchant with an event filed under q.Day. An order may come more
	// than once (one entry per event filed).
	RanOn(ctx context.Context, q RanQuery) (RanPage, error)
}

// RanQuery selects a page of the day index.
type RanQuery struct {
	Scope, Merchant string
	// Day is the UTC day (any time of it).
	Day time.Time
	// Cursor is "" for the first page, else a page's Next.
	Cursor string
	// Limit bounds the page (default 1000).
	Limit int
}

// RanPage is a page of the day index: orders' names, as Orders and
// OrderOf take them. Next is "" on the last page.
type RanPage struct {
	Orders []string
	Next   string
}

func (q *RanQuery) limit() int {
	if q.Limit <= 0 {
		return 1000
	}
	return q.Limit
}

// OrderParts splits an order's name "<scope>:<merchant>:<id>" into its
// parts; a key that is its own business event ("stripe:evt_1") has no
// merchant. The day index is kept per scope and merchant, its entries
// are ids.
func OrderParts(order string) (scope, merchant, id string) {
	scope, rest, _ := strings.Cut(order, ":")
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		return scope, rest[:i], rest[i+1:]
	}
	return scope, "", rest
}

// OrderName is OrderParts's inverse.
func OrderName(scope, merchant, id string) string {
	if merchant == "" {
		return scope + ":" + id
	}
	return scope + ":" + merchant + ":" + id
}

// filedDay is the day index's day for an event run at ran: the UTC day
// of the platform's time, else of ran.
func filedDay(ran time.Time, r *OrderRun) string {
	t := ran
	if !r.At.IsZero() {
		t = r.At
	}
	return t.UTC().Format("20060102")
}

// dayName is the day index's name of q's day.
func dayName(day time.Time) string { return day.UTC().Format("20060102") }

// filedAs is where key's event, run as r, is filed in the indexes: its
// order's scope, merchant and id; ok false for an event that is not filed.
func filedAs(key string, r *OrderRun) (scope, merchant, id string, ok bool) {
	if r == nil || r.Settles == "" {
		return "", "", "", false
	}
	order, _ := OrderOf(key)
	scope, merchant, id = OrderParts(order)
	return scope, merchant, id, id != ""
}

// packID is a day index entry: an id of digits (Alipay's trade_no, WeChat
// Pay's transaction_id: 28 of them) two to a byte behind a byte 0x80|n;
// any other id as it is, behind a 0 byte if it starts with a byte ≥ 0x80.
func packID(id string) []byte {
	digits := len(id) > 0 && len(id) < 0x80
	for i := 0; digits && i < len(id); i++ {
		digits = id[i] >= '0' && id[i] <= '9'
	}
	if !digits {
		if id == "" || id[0] == 0 || id[0] >= 0x80 {
			return append([]byte{0}, id...)
		}
		return []byte(id)
	}
	b := make([]byte, 1, 1+(len(id)+1)/2)
	b[0] = 0x80 | byte(len(id))
	for i := 0; i < len(id); i += 2 {
		hi, lo := id[i]-'0', byte(0)
		if i+1 < len(id) {
			lo = id[i+1] - '0'
		}
		b = append(b, hi<<4|lo)
	}
	return b
}

// unpackID reads what packID wrote.
func unpackID(b []byte) (string, bool) {
	switch {
	case len(b) == 0:
		return "", false
	case b[0] == 0:
		return string(b[1:]), true
	case b[0] < 0x80:
		return string(b), true
	}
	n := int(b[0] &^ 0x80)
	if len(b) != 1+(n+1)/2 {
		return "", false
	}
	out := make([]byte, n)
	for i := range n {
		d := b[1+i/2]
		if i%2 == 0 {
			d >>= 4
		}
		d &= 0x0f
		if d > 9 {
			return "", false
		}
		out[i] = '0' + d
	}
	return string(out), true
}

// Interface guards
var (
	_ OrderIndex = (*Memory)(nil)
	_ OrderIndex = (*Embedded)(nil)
	_ OrderIndex = (*Redis)(nil)
)
