package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/internal/registry"
)

// An order's page (GET /idempotency/orders/<order>): every business event
// of one order in one timeline — those its order state remembers as run
// (for order_ttl), and those whose key still has a record (for ttl: in
// flight, answered, failed) — with its key, the channel it came by, its
// times, copies, attempts and outcome.

// OrderView is the answer to GET /idempotency/orders/<order>.
type OrderView struct {
	Store string `json:"store"`
	// Order is "<scope>:<merchant>:<order>" (or a key that is its own
	// business event).
	Order string `json:"order"`
	// ExpiresAt is when the order forgets the events that ran (zero when
	// none ran).
	ExpiresAt time.Time        `json:"expires_at,omitzero"`
	Events    []OrderEventView `json:"events"`
}

// OrderEventView is one business event of an order.
type OrderEventView struct {
	Event string `json:"event"`
	Key   string `json:"key"`
	// State is the event's key's state (in_flight, answered, failed,
	// dead), or "ran" when only the order remembers it: its record's ttl
	// passed.
	State string `json:"state"`
	// Ran is when the backend's answer was settled; zero for an event
	// that has not run.
	Ran      time.Time `json:"ran,omitzero"`
	Amount   string    `json:"amount,omitempty"`
	Currency string    `json:"currency,omitempty"`
	// Channel is how its first copy came: "POST /notify", "GET /return".
	Channel   string    `json:"channel,omitempty"`
	FirstSeen time.Time `json:"first_seen,omitzero"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
	Copies    int64     `json:"copies,omitempty"`
	Attempts  int64     `json:"attempt_count,omitempty"`
	Status    int       `json:"status,omitempty"`
}

func (a *AdminAPI) getOrder(w http.ResponseWriter, r *http.Request, order string) error {
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	v, err := Order(ctx, a.app, ps, order)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// orderListLimit bounds the records of one order's events read per state.
const orderListLimit = 100

// Order gathers an order's events: its state in the store, and the records
// of its events' keys (found by prefix, and the order's own key for a key
// that is its own business event). 404 when there is neither.
func Order(ctx context.Context, app *registry.App, ps *registry.Store, order string) (OrderView, error) {
	out := OrderView{Store: ps.ID, Order: order, Events: []OrderEventView{}}
	events := map[string]*OrderEventView{}
	get := func(key string) *OrderEventView {
		if ev, ok := events[key]; ok {
			return ev
		}
		_, name := cache.OrderOf(key)
		ev := &OrderEventView{Key: key, Event: name}
		events[key] = ev
		return ev
	}
	o, err := ps.Order(ctx, order)
	switch {
	case err == nil:
		out.ExpiresAt = o.ExpiresAt
		for _, e := range o.Events {
			ev := get(e.Key)
			ev.State, ev.Ran, ev.Amount, ev.Currency = "ran", e.Ran, e.Amount, e.Currency
		}
	case !errors.Is(err, cache.ErrNotFound):
		return out, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
	}
	// The events' records: those of "<order>:<event>" keys, found by
	// prefix; then each one's journal, for its channel.
	var keys []string
	for _, st := range []cache.State{cache.StateInFlight, cache.StateAnswered, cache.StateFailed} {
		page, err := ps.List(ctx, cache.ListQuery{State: st, Prefix: order + ":", Limit: orderListLimit})
		if err != nil {
			return out, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
		}
		for _, rec := range page.Records {
			if o, _ := cache.OrderOf(rec.Key); o == order {
				keys = append(keys, rec.Key)
			}
		}
	}
	keys = append(keys, order) // a key that is its own business event
	for _, key := range keys {
		rec, err := ps.Lookup(ctx, key)
		if errors.Is(err, cache.ErrNotFound) {
			continue
		}
		if err != nil {
			return out, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
		}
		ev := get(key)
		ev.State = string(rec.StateAt(app.Now(), app.WindowOf(key)))
		ev.FirstSeen, ev.LastSeen, ev.Copies, ev.Attempts = rec.FirstSeen, rec.LastSeen, rec.Copies, rec.AttemptCount
		if rec.State == cache.StateAnswered {
			ev.Status = rec.Status
		}
		if n := rec.Notification; n != nil {
			path, _, _ := strings.Cut(n.URI, "?")
			ev.Channel = n.Method + " " + path
		}
	}
	if len(events) == 0 {
		return out, apiError(http.StatusNotFound, fmt.Errorf("no business event of order %q in store %s (it never ran here, or order_ttl passed)", order, ps.ID))
	}
	for _, ev := range events {
		out.Events = append(out.Events, *ev)
	}
	slices.SortFunc(out.Events, func(a, b OrderEventView) int {
		if c := eventTime(a).Compare(eventTime(b)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out, nil
}

// eventTime places an event on the order's timeline: its first copy, or
// when it ran once its record is gone.
func eventTime(ev OrderEventView) time.Time {
	if !ev.FirstSeen.IsZero() {
		return ev.FirstSeen
	}
	return ev.Ran
}
