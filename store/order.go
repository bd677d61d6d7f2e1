package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// Orders: the business outcome of a payment runs once. A key whose full
// name is "<order>:<event>" (keying.SplitOrder: the presets' default
// keys, "alipay:<app_id>:<trade_no>:paid") is one business event of that
// order; any other key is a business event of its own (Stripe's event ids).
// When Complete settles a key with Answer.Order set, the store remembers in
// the key's order that its event ran — when, and the amount — for
// OrderRun.TTL, long after the key's own record (its answer, its journal)
// has expired with its ttl. A later Claim of a key whose event ran, and
// whose record is gone, is Answered with a Record that says FromOrder and
// carries no answer: the copy is never forwarded again. A failed event is
// not remembered. Delete and Reopen forget the key's event too, so an
// operator's purge or forced redelivery runs it again.
//
// The order state is read by the claim and written by the completion, in
// the same store operation: no extra round trip on either path. On Redis
// an order's events share its hash tag (see Redis), so the scripts touch
// one slot on Cluster too.

// OrderRun is what Complete remembers of a key's business event in its
// order: for how long, the money it carried, and what reconciliation with
// the platform's bill needs (see OrderIndex).
type OrderRun struct {
	// TTL is how long the order remembers the event (order_ttl).
	TTL time.Duration
	// Amount and Currency are the notification's signed money, major
	// units; "" when it named none.
	Amount, Currency string
	// RefundTotal: Amount is what the order's refunds add up to so far
	// (keying.Notification's RefundTotal); kept for a refund only.
	RefundTotal bool
	// Settles says whether the event shows in the platform's bill as a
	// payment or a refund; only such events are filed in the day index
	// and the ref index.
	Settles keying.Settlement
	// At is when the platform says the event happened (zero: unknown);
	// the day index files the event under its UTC day, or under the day
	// it ran when At is zero.
	At time.Time
	// Refs are the platform objects the event names (Stripe's charge,
	// PayPal's capture), indexed to the event.
	Refs []string
	// MerchantRefs are the merchant's references the notification named:
	// the key is filed under them for search (see Searcher), with the
	// journal's notification's, which a route with journal_body off
	// has not.
	MerchantRefs []string
	// Via names the channel the event ran by when it is not the
	// platform's notification ("GET /alipay/return": Alipay's browser
	// return on a route with `return business`); "" for the notify.
	Via string
}

// OrderBook reads one order's state: the order page of the admin API and
// the console, and Search for a key whose record is gone. It is apart
// from Store because the request path never reads an order whole: Claim
// consults it, and Complete writes it, inside the store.
type OrderBook interface {
	// Order returns what the store remembers of an order (OrderOf names a
	// key's): the business events of it that ran. ErrNotFound if none.
	Order(ctx context.Context, order string) (*Order, error)
}

// Order is what a store remembers of one order: the business events of
// it that ran.
type Order struct {
	// Key is the order's name: "<scope>:<merchant>:<order>", or a key that
	// is its own business event.
	Key    string       `json:"order"`
	Events []OrderEvent `json:"events"`
	// ExpiresAt is when the order forgets its events (order_ttl after the
	// last one ran).
	ExpiresAt time.Time `json:"expires_at"`
}

// OrderEvent is one business event of an order that ran.
type OrderEvent struct {
	// Event is "paid", "refund:<id>", "closed", …, or "" for a key that is
	// its own business event.
	Event string `json:"event"`
	// Key is the event's full key: Order.Key + ":" + Event (Order.Key
	// when Event is "").
	Key string `json:"key"`
	// Ran is when the backend's answer was settled.
	Ran time.Time `json:"ran"`
	// Amount is the event's own money: for a refund whose notification
	// named the order's refunded total (RefundedTotal), that total less
	// the largest smaller one of the order's other refunds (see
	// ownRefunds), so it reads right whatever order they came in.
	Amount   string `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	// RefundedTotal is the order's refunded total a refund's notification
	// named (Alipay's refund_fee), "" where it named its own amount.
	RefundedTotal string `json:"refunded_total,omitempty"`
	// Settles, At and Refs are the run's (see OrderRun); At to the
	// second.
	Settles keying.Settlement `json:"settles,omitempty"`
	At      time.Time         `json:"at,omitzero"`
	Refs    []string          `json:"refs,omitempty"`
	// Via is the run's (see OrderRun): the channel that ran the event
	// when it was not the platform's notification.
	Via string `json:"via,omitempty"`
}

// Time is when the platform says the event happened, or when it ran.
func (e OrderEvent) Time() time.Time {
	if !e.At.IsZero() {
		return e.At
	}
	return e.Ran
}

// OrderOf is the order a full key belongs to and its event there: the
// key's "<order>:<event>" parts, or the key itself and "" for a key that
// is its own business event.
func OrderOf(key string) (order, event string) {
	if o, e, ok := keying.SplitOrder(key); ok {
		return o, e
	}
	return key, ""
}

// eventKey is the full key of event in order.
func eventKey(order, event string) string {
	if event == "" {
		return order
	}
	return order + ":" + event
}

// fromOrder is the record a claim answers for a key whose event ran in
// its order, once the key's own record is gone.
func fromOrder(key string, ev OrderEvent) *Record {
	return &Record{Key: key, State: StateAnswered, FromOrder: true, FirstSeen: ev.Ran, LastSeen: ev.Ran, Changed: ev.Ran}
}

// orderState is an order as the memory and embedded stores keep it: event
// → stored value, and when it expires.
type orderState struct {
	events map[string]string
	keep   time.Time
}

// ran records r's event in o at t, keeping o at least r.TTL from t.
func (o *orderState) ran(event string, t time.Time, r *OrderRun) {
	if o.events == nil {
		o.events = map[string]string{}
	}
	o.events[event] = string(encodeOrderEvent(t, r))
	if k := t.Add(r.TTL); k.After(o.keep) {
		o.keep = k
	}
}

// view is o as an Order named key.
func (o *orderState) view(key string) (*Order, error) {
	out := &Order{Key: key, ExpiresAt: o.keep}
	for ev, v := range o.events {
		e, err := decodeOrderEvent(key, ev, v)
		if err != nil {
			return nil, err
		}
		out.Events = append(out.Events, e)
	}
	sortOrderEvents(out.Events)
	return out, nil
}

// sortOrderEvents orders events by when they ran, then by name, and
// gives each refund its own amount (ownRefunds): every store's order
// passes here once read.
func sortOrderEvents(evs []OrderEvent) {
	slices.SortFunc(evs, func(a, b OrderEvent) int {
		if c := a.Ran.Compare(b.Ran); c != 0 {
			return c
		}
		return strings.Compare(a.Event, b.Event)
	})
	ownRefunds(evs)
}

// ownRefunds sets the Amount of each refund whose notification named the
// order's refunded total to its increase over the order's other refunds
// (keying.RefundIncrease), read at every read: a refund that arrives
// late, after a later one of the same order, lowers the later one's
// figure from then on. Until it arrives, the later one shows its
// increase over the refunds known (its whole total when none is).
func ownRefunds(evs []OrderEvent) {
	for i := range evs {
		if evs[i].RefundedTotal != "" {
			evs[i].Amount, _ = keying.RefundIncrease(evs[i].RefundedTotal, RefundTotals(evs, evs[i].Key))
		}
	}
}

// RefundTotals are the amounts the refunds among an order's events evs,
// other than key's, named: what a refund's own amount is the increase
// over (keying.RefundIncrease). An order that has a refund naming its
// refunded total is an Alipay trade, whose every refund named one, those
// kept before RefundedTotal was (their Amount) too.
func RefundTotals(evs []OrderEvent, key string) []string {
	var out []string
	for _, e := range evs {
		if t := cmp.Or(e.RefundedTotal, e.Amount); e.Key != key && e.Settles == keying.SettlesRefund && t != "" {
			out = append(out, t)
		}
	}
	return out
}

// encodeOrderState is an order's stored form in the embedded store.
func encodeOrderState(o *orderState) []byte {
	b := []byte{1}
	b = binary.AppendVarint(b, o.keep.UnixMilli())
	b = binary.AppendUvarint(b, uint64(len(o.events)))
	for ev, v := range o.events {
		b = appendString(b, ev)
		b = appendString(b, v)
	}
	return b
}

func decodeOrderState(b []byte) (*orderState, error) {
	if len(b) == 0 || b[0] != 1 {
		return nil, errCorrupt
	}
	r := reader{b: b[1:]}
	o := &orderState{keep: time.UnixMilli(r.varint())}
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		return nil, errCorrupt
	}
	o.events = make(map[string]string, n)
	for range n {
		ev := r.string()
		o.events[ev] = r.string()
	}
	return o, r.err
}

// Interface guards
var (
	_ OrderBook = (*Memory)(nil)
	_ OrderBook = (*Embedded)(nil)
	_ OrderBook = (*Redis)(nil)
)
