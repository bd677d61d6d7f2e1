package orders

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
)

// An order's page: every business event of one order in one timeline —
// those its order state remembers as run (for order_ttl), and those whose
// key still has a record (for ttl: in flight, answered, failed) — with its
// key, the channel it came by, its times, copies, attempts and outcome.
// The admin API serves it (GET /idempotency/orders/<order>), the CLI
// prints it and the console shows it.

// View is an order's page.
type View struct {
	// Store names the store it was read from (set by the caller, which
	// knows the store by its configuration).
	Store string `json:"store"`
	// Order is "<scope>:<merchant>:<order>" (or a key that is its own
	// business event).
	Order string `json:"order"`
	// ExpiresAt is when the order forgets the events that ran (zero when
	// none ran).
	ExpiresAt time.Time   `json:"expires_at,omitzero"`
	Events    []EventView `json:"events"`
}

// EventView is one business event of an order.
type EventView struct {
	Event string `json:"event"`
	Key   string `json:"key"`
	// State is the event's key's state (in_flight, answered, failed,
	// dead), or StateRan when only the order remembers it: its record's
	// ttl passed.
	State string `json:"state"`
	// Ran is when the backend's answer was settled; zero for an event
	// that has not run.
	Ran      time.Time `json:"ran,omitzero"`
	Amount   string    `json:"amount,omitempty"`
	Currency string    `json:"currency,omitempty"`
	// Channel is how its first copy came: "POST /notify", "GET /return"
	// (from its journal; once its record is gone, only a run by a channel
	// other than the notify is named, by its order state).
	Channel   string    `json:"channel,omitempty"`
	FirstSeen time.Time `json:"first_seen,omitzero"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
	Copies    int64     `json:"copies,omitempty"`
	Attempts  int64     `json:"attempt_count,omitempty"`
	Status    int       `json:"status,omitempty"`
}

// StateRan is the state of an event only its order remembers.
const StateRan = "ran"

// ErrNoEvents: the store has no business event of the order (it never
// ran there, or order_ttl passed).
var ErrNoEvents = errors.New("no business event of the order")

// Book is what an order's page reads of a store: its order state, the
// records of its events' keys (listed by prefix), and each record with
// its journal.
type Book interface {
	store.OrderBook
	store.Lister
	Lookup(ctx context.Context, key string) (*store.Record, error)
}

// StateOf is a key's record's state as its route judges it now
// (store.Record.StateAt with the route's retry window).
type StateOf func(key string, rec *store.Record) store.State

// listLimit bounds the records of one order's events read per state.
const listLimit = 100

// Page gathers an order's page from b: its order state, and the records
// of its events' keys (found by prefix, and the order's own key for a key
// that is its own business event). A store's error is returned as it is;
// ErrNoEvents when there is neither order state nor a record.
func Page(ctx context.Context, b Book, order string, stateOf StateOf) (View, error) {
	return PageRepairing(ctx, b, order, stateOf, nil)
}

// Repair writes an answered record's business event back into its order
// where the order lacks it (store.OrderRepairer, with what the record's
// route's settle writes); repaired: it wrote.
type Repair func(ctx context.Context, rec *store.Record) (repaired bool)

// PageRepairing is Page that, with repair, writes each answered record's
// event its order lacks back into the order, and shows what the order
// then remembers of it (its money).
func PageRepairing(ctx context.Context, b Book, order string, stateOf StateOf, repair Repair) (View, error) {
	out := View{Order: order, Events: []EventView{}}
	events := map[string]*EventView{}
	get := func(key string) *EventView {
		if ev, ok := events[key]; ok {
			return ev
		}
		_, name := store.OrderOf(key)
		ev := &EventView{Key: key, Event: name}
		events[key] = ev
		return ev
	}
	o, err := b.Order(ctx, order)
	switch {
	case err == nil:
		out.ExpiresAt = o.ExpiresAt
		for _, e := range o.Events {
			ev := get(e.Key)
			ev.State, ev.Ran, ev.Amount, ev.Currency = StateRan, e.Ran, e.Amount, e.Currency
			ev.Channel = e.Via // the return that ran it (`return business`); the journal's names the notify too
		}
	case !errors.Is(err, store.ErrNotFound):
		return out, err
	}
	// The events' records: those of "<order>:<event>" keys, found by
	// prefix; then each one's journal, for its channel.
	var keys []string
	for _, st := range []store.State{store.StateInFlight, store.StateAnswered, store.StateFailed} {
		page, err := b.List(ctx, store.ListQuery{State: st, Prefix: order + ":", Limit: listLimit})
		if err != nil {
			return out, err
		}
		for _, rec := range page.Records {
			if o, _ := store.OrderOf(rec.Key); o == order {
				keys = append(keys, rec.Key)
			}
		}
	}
	keys = append(keys, order) // a key that is its own business event
	for _, key := range keys {
		rec, err := b.Lookup(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		ev := get(key)
		ev.State = string(stateOf(key, rec))
		ev.FirstSeen, ev.LastSeen, ev.Copies, ev.Attempts = rec.FirstSeen, rec.LastSeen, rec.Copies, rec.AttemptCount
		if rec.State == store.StateAnswered {
			ev.Status = rec.Status
			if ev.Ran.IsZero() && !rec.FromOrder {
				// An answered record of a business event means it ran,
				// even where its order does not remember it (a settle a
				// store outage deferred, before that settle wrote the
				// order): it ran when the record was answered. It is
				// written back into the order from the record.
				ev.Ran = rec.Changed
				if repair != nil && repair(ctx, rec) {
					repaired(ctx, b, &out, ev)
				}
			}
		}
		if n := rec.Notification; n != nil {
			path, _, _ := strings.Cut(n.URI, "?")
			ev.Channel = n.Method + " " + path
		}
	}
	if len(events) == 0 {
		return out, ErrNoEvents
	}
	for _, ev := range events {
		out.Events = append(out.Events, *ev)
	}
	slices.SortFunc(out.Events, func(a, b EventView) int {
		if c := eventTime(a).Compare(eventTime(b)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out, nil
}

// repaired shows ev as its order now remembers it, once repaired: when
// it ran, its money, and until when the order keeps it.
func repaired(ctx context.Context, b Book, out *View, ev *EventView) {
	o, err := b.Order(ctx, out.Order)
	if err != nil {
		return
	}
	out.ExpiresAt = o.ExpiresAt
	for _, e := range o.Events {
		if e.Key == ev.Key {
			ev.Ran, ev.Amount, ev.Currency = e.Ran, e.Amount, e.Currency
		}
	}
}

// eventTime places an event on the order's timeline: its first copy, or
// when it ran once its record is gone.
func eventTime(ev EventView) time.Time {
	if !ev.FirstSeen.IsZero() {
		return ev.FirstSeen
	}
	return ev.Ran
}
