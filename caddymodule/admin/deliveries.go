package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

// The admin API's delivery routes (deliver async):
//
//	GET  /idempotency/deliveries                 every async scope's queue
//	POST /idempotency/deliveries/<scope>/pause   stop delivering (acks go on)
//	POST /idempotency/deliveries/<scope>/resume

// DeliveryView is one async scope's queue as the admin API shows it.
type DeliveryView struct {
	Scope    string    `json:"scope"`
	Platform string    `json:"platform"`
	To       string    `json:"to"`
	Depth    int64     `json:"depth"`
	Leased   int64     `json:"leased"`
	Oldest   time.Time `json:"oldest,omitzero"`
	// OldestAge is Oldest as an age, for people.
	OldestAge string `json:"oldest_age,omitempty"`
	Paused    bool   `json:"paused"`
}

type DeliveriesView struct {
	Deliveries []DeliveryView `json:"deliveries"`
}

// QueueViews reads every async scope's queue now.
func (s *Service) QueueViews(ctx context.Context) ([]DeliveryView, error) {
	out := []DeliveryView{}
	for _, e := range s.app.Engines() {
		st, err := e.Queue().Stats(ctx, e.Scope())
		if err != nil {
			return nil, fmt.Errorf("scope %s: %w", e.Scope(), err)
		}
		out = append(out, newDeliveryView(e, st))
	}
	return out, nil
}

func newDeliveryView(e app.Engine, st store.QueueStats) DeliveryView {
	v := DeliveryView{Scope: e.Scope(), Platform: e.Platform(), To: e.Target(),
		Depth: st.Depth, Leased: st.Leased, Oldest: apiTime(st.Oldest), Paused: st.Paused}
	if !st.Oldest.IsZero() {
		v.OldestAge = time.Since(st.Oldest).Round(time.Second).String()
	}
	return v
}

// listDeliveries serves GET /idempotency/deliveries.
func (a *AdminAPI) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	views, err := a.svc.QueueViews(ctx)
	if err != nil {
		return apiError(http.StatusServiceUnavailable, err)
	}
	return writeJSON(w, http.StatusOK, DeliveriesView{Deliveries: views})
}

// pauseDeliveries and resumeDeliveries serve
// POST /idempotency/deliveries/<scope>/pause|resume.
func (a *AdminAPI) pauseDeliveries(w http.ResponseWriter, r *http.Request) error {
	return a.setPaused(w, r, true)
}

func (a *AdminAPI) resumeDeliveries(w http.ResponseWriter, r *http.Request) error {
	return a.setPaused(w, r, false)
}

func (a *AdminAPI) setPaused(w http.ResponseWriter, r *http.Request, paused bool) error {
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	scope := r.PathValue("scope")
	v, err := a.svc.SetPaused(ctx, scope, paused)
	if err != nil {
		return err
	}
	action := "resumed"
	if paused {
		action = "paused"
	}
	a.logger.Info("deliveries "+action, zap.String("scope", scope))
	return writeJSON(w, http.StatusOK, v)
}

// SetPaused pauses or resumes an async scope's deliveries, on every
// instance sharing its queue, and returns the queue after.
func (s *Service) SetPaused(ctx context.Context, scope string, paused bool) (DeliveryView, error) {
	a := s.app
	e, ok := a.EngineOf(scope)
	if !ok {
		var names []string
		for _, e := range a.Engines() {
			names = append(names, e.Scope())
		}
		return DeliveryView{}, apiError(http.StatusNotFound,
			fmt.Errorf("no route delivers scope %q asynchronously; async scopes: %s", scope, strings.Join(names, ", ")))
	}
	op := e.Queue().Resume
	if paused {
		op = e.Queue().Pause
	}
	if err := op(ctx, scope); err != nil {
		return DeliveryView{}, apiError(http.StatusServiceUnavailable, err)
	}
	if !paused {
		e.Poke()
	}
	st, err := e.Queue().Stats(ctx, scope)
	if err != nil {
		return DeliveryView{}, apiError(http.StatusServiceUnavailable, errors.Join(errors.New("the queue's stats"), err))
	}
	return newDeliveryView(e, st), nil
}
