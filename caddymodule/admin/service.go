package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/store"
)

// Service is the admin operations apart from HTTP: a key's view, the
// listings, search, an order, the money at stake, the refused list,
// purge, redelivery (one key or in bulk), the delivery queues and
// reconciliation. The admin API's routes read a request, call one and
// write its answer; the console calls them in process, on the store it
// picked. Their errors are caddy.APIError with the status the API
// answers (reconciliation's are the reconcile package's own).
type Service struct {
	app *app.App
	// logger takes the admin actions' lines (purge, redelivery,
	// reconciliation), named for the surface that acted; nil logs none.
	logger *zap.Logger
}

// NewService returns the operations on app's stores, routes and engines.
func NewService(a *app.App, logger *zap.Logger) *Service {
	return &Service{app: a, logger: logger}
}

// Stores are the loaded stores' ids, sorted; never nil.
func (s *Service) Stores() []string {
	ids := s.app.StoreIDs()
	if ids == nil {
		ids = []string{}
	}
	return ids
}

// Key is key's record in ps as the API shows it, with its amount and
// event; the bodies only withBody. 404 for no record.
func (s *Service) Key(ctx context.Context, ps *app.Store, key string, withBody bool) (RecordView, error) {
	rec, err := lookup(ctx, ps, key)
	if err != nil {
		return RecordView{}, err
	}
	v := NewRecordView(s.app, ps.ID, rec, withBody)
	if m, refund, ok := stakeMoneyOf(ctx, s.app, newRefundBook(s.app, ps), rec); ok {
		v.Amount = &AmountView{Value: m.Amount, Currency: m.Currency, Refund: refund}
	}
	if v.Event == "" {
		v.Event = eventTypeOf(ctx, s.app, rec)
	}
	return v, nil
}

// DeletedView is the answer to DELETE: what was forgotten.
type DeletedView struct {
	Deleted bool `json:"deleted"`
	// QueuedDelivery says what became of the key's async delivery:
	// "removed", or "being delivered" (it may still reach the backend).
	QueuedDelivery string `json:"queued_delivery,omitempty"`
	RecordView
}

// Purge forgets key in ps: its next copy is forwarded. An in-flight key
// is refused (409) without force: its first copy is at the backend now.
// remote names who asked, for the log line.
func (s *Service) Purge(ctx context.Context, ps *app.Store, key string, force bool, remote string) (DeletedView, error) {
	// Look first to refuse an in-flight key without force and to report
	// what is forgotten; Delete decides.
	rec, lerr := ps.Lookup(ctx, key)
	if lerr == nil && rec.State == store.StateInFlight && !force {
		return DeletedView{}, apiError(http.StatusConflict, fmt.Errorf("key %q is in flight: its first copy is at the backend now, and "+
			"forgetting it lets the next copy run the backend a second time; if the gateway that holds it is gone, "+
			"purge with force (?force=1, --force)", key))
	}
	queued, err := ps.Purge(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		if queued == "" {
			return DeletedView{}, apiError(http.StatusNotFound, fmt.Errorf("no record for key %q in store %s", key, ps.ID))
		}
		err = nil // only the queued delivery was left
	}
	if err != nil {
		return DeletedView{}, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
	}
	out := DeletedView{Deleted: true, QueuedDelivery: queued}
	state := "unknown"
	if lerr == nil {
		out.RecordView = NewRecordView(s.app, ps.ID, rec, false)
		state = string(rec.State)
	} else {
		out.RecordView = RecordView{Store: ps.ID, Key: key}
	}
	if s.logger != nil {
		// Admin actions are rare and worth a line; the key stays hashed.
		s.logger.Info("idempotency key purged: its next copy will be forwarded",
			zap.String("store", ps.ID), zap.String("key", app.HashKey(key)), zap.String("state", state),
			zap.String("remote", remote))
	}
	return out, nil
}

// PageView is the answer to GET /idempotency/keys?state=….
type PageView struct {
	Store string       `json:"store"`
	Keys  []RecordView `json:"keys"`
	// Next is the cursor of the next page; "" on the last page.
	Next string `json:"next"`
}

// List is one page of ps's records in lq's state, newest first, each
// with its amount, event and merchant's references (the app's windows
// and clock are filled in).
func (s *Service) List(ctx context.Context, ps *app.Store, lq store.ListQuery) (PageView, error) {
	lq.Window, lq.Now = s.app.WindowOf, s.app.Now()
	page, err := ps.List(ctx, lq)
	recs, next := page.Records, page.Next
	if errors.Is(err, store.ErrBadQuery) {
		return PageView{}, apiError(http.StatusBadRequest, err)
	}
	if err != nil {
		return PageView{}, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
	}
	out := PageView{Store: ps.ID, Keys: make([]RecordView, 0, len(recs)), Next: next}
	rb := newRefundBook(s.app, ps)
	for _, rec := range recs {
		v := NewRecordView(s.app, ps.ID, rec, false)
		if rec.State == store.StateInFlight {
			v.setState(ListedState(ctx, s.app, ps, rec))
		}
		// Listings carry no journal: the merchant's order number, the
		// amount and the last attempt's status are in the record's own.
		if full, err := ps.Lookup(ctx, rec.Key); err == nil {
			if v.Status == 0 && rec.State != store.StateAnswered && len(full.Attempts) > 0 {
				v.Status = full.Attempts[len(full.Attempts)-1].Status
			}
			if n := full.Notification; n != nil {
				v.MerchantRefs = n.MerchantRefs
			}
			if m, refund, ok := stakeMoneyOf(ctx, s.app, rb, full); ok {
				v.Amount = &AmountView{Value: m.Amount, Currency: m.Currency, Refund: refund}
			}
			if v.Event == "" {
				v.Event = eventTypeOf(ctx, s.app, full)
			}
		}
		out.Keys = append(out.Keys, v)
	}
	return out, nil
}

// Reconcile runs a reconciliation of bill against ps (reconcile.Run,
// with the running config's Env) and logs what it found. Its errors are
// reconcile's (a *reconcile.Error carries its status).
func (s *Service) Reconcile(ctx context.Context, ps *app.Store, opts reconcile.Options, bill io.Reader, remote string) (*reconcile.Report, error) {
	start := time.Now()
	rep, err := reconcile.Run(ctx, ReconcileEnv(s.app, ps), opts, bill)
	if err != nil {
		return nil, err
	}
	if s.logger != nil {
		s.logger.Info("reconciled a bill", zap.String("platform", rep.Platform), zap.String("scope", rep.Scope),
			zap.Int("rows", rep.Bill.Rows), zap.Int("settled_never_run", rep.SettledNeverRun.Count),
			zap.Int("run_not_settled", rep.RunNotSettled.Count), zap.Int("amount_differs", rep.AmountDiffers.Count),
			zap.Int("matched", rep.Matched.Count), zap.Duration("took", time.Since(start)), zap.String("remote", remote))
	}
	return rep, nil
}
