package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/orders"
	"github.com/idemgate/idemgate/store"
)

// An order's page (GET /idempotency/orders/<order>): every business event
// of one order in one timeline, gathered by orders.Page.

// OrderView is the answer to GET /idempotency/orders/<order>.
type OrderView = orders.View

// OrderEventView is one business event of an order.
type OrderEventView = orders.EventView

func (a *AdminAPI) getOrder(w http.ResponseWriter, r *http.Request) error {
	order := r.PathValue("order")
	if order == "" {
		return apiError(http.StatusBadRequest, errors.New("which order? /idempotency/orders/<scope>:<merchant>:<order>, escaped"))
	}
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	v, err := a.svc.Order(ctx, ps, order)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// Order gathers an order's page from store ps, each record's state as
// every surface names it (StateOf: an async key's queued, retrying or
// delivering): 404 when the store has no event of it, 503 when the store
// fails.
func (s *Service) Order(ctx context.Context, ps *app.Store, order string) (OrderView, error) {
	a := s.app
	v, err := orders.PageRepairing(ctx, ps, order, func(key string, rec *store.Record) store.State {
		return store.State(StateOf(a, rec).State)
	}, func(ctx context.Context, rec *store.Record) bool { return RepairOrderEvent(ctx, a, ps, rec) })
	v.Store = ps.ID
	switch {
	case errors.Is(err, orders.ErrNoEvents):
		return v, apiError(http.StatusNotFound, fmt.Errorf("no business event of order %q in store %s (it never ran here, or order_ttl passed)", order, ps.ID))
	case err != nil:
		return v, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
	}
	// An event whose key is its own id (Stripe's) shows its type.
	for i := range v.Events {
		if v.Events[i].Event != "" {
			continue
		}
		if rec, err := ps.Lookup(ctx, v.Events[i].Key); err == nil {
			v.Events[i].Event = eventTypeOf(ctx, a, rec)
		}
	}
	return v, nil
}
