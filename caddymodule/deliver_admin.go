package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/cache"
)

// The admin API's delivery routes (deliver async):
//
//	GET  /idempotency/deliveries                 every async scope's queue
//	POST /idempotency/deliveries/<scope>/pause   stop delivering (acks go on)
//	POST /idempotency/deliveries/<scope>/resume

// deliveryView is one async scope's queue as the admin API shows it.
type deliveryView struct {
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

type deliveriesView struct {
	Deliveries []deliveryView `json:"deliveries"`
}

// asyncScopes returns the running engines, by scope.
func asyncScopes() []*engine {
	var out []*engine
	engines.Range(func(_, v any) bool {
		out = append(out, v.(*engine))
		return true
	})
	slices.SortFunc(out, func(a, b *engine) int { return strings.Compare(a.scope, b.scope) })
	return out
}

// queueViews reads every async scope's queue now.
func queueViews(ctx context.Context) ([]deliveryView, error) {
	out := []deliveryView{}
	for _, e := range asyncScopes() {
		st, err := e.ds.queue.Stats(ctx, e.scope)
		if err != nil {
			return nil, fmt.Errorf("scope %s: %w", e.scope, err)
		}
		out = append(out, newDeliveryView(e, st))
	}
	return out, nil
}

func newDeliveryView(e *engine, st cache.QueueStats) deliveryView {
	v := deliveryView{Scope: e.scope, Platform: e.h.Platform, To: e.ds.to.Redacted(),
		Depth: st.Depth, Leased: st.Leased, Oldest: st.Oldest, Paused: st.Paused}
	if !st.Oldest.IsZero() {
		v.OldestAge = time.Since(st.Oldest).Round(time.Second).String()
	}
	return v
}

// deliveries serves /idempotency/deliveries[/<scope>/pause|resume].
func (a *AdminAPI) deliveries(w http.ResponseWriter, r *http.Request, rest string) error {
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	if rest == "" {
		if r.Method != http.MethodGet {
			return errMethod(r)
		}
		views, err := queueViews(ctx)
		if err != nil {
			return apiError(http.StatusServiceUnavailable, err)
		}
		return writeJSON(w, http.StatusOK, deliveriesView{Deliveries: views})
	}
	esc, action, ok := strings.Cut(rest, "/")
	if !ok || (action != "pause" && action != "resume") {
		return apiError(http.StatusNotFound, fmt.Errorf("no such route: %s (try /idempotency/deliveries/<scope>/pause or /resume)", r.URL.Path))
	}
	if r.Method != http.MethodPost {
		return errMethod(r)
	}
	scope, err := url.PathUnescape(esc)
	if err != nil {
		return apiError(http.StatusBadRequest, fmt.Errorf("scope is not properly escaped: %v", err))
	}
	v, err := setPaused(ctx, scope, action == "pause")
	if err != nil {
		return err
	}
	a.logger.Info("deliveries "+action+"d", zap.String("scope", scope))
	return writeJSON(w, http.StatusOK, v)
}

// setPaused pauses or resumes an async scope's deliveries, on every
// instance sharing its queue, and returns the queue after.
func setPaused(ctx context.Context, scope string, paused bool) (deliveryView, error) {
	v, ok := engines.Load(scope)
	if !ok {
		var names []string
		for _, e := range asyncScopes() {
			names = append(names, e.scope)
		}
		return deliveryView{}, apiError(http.StatusNotFound,
			fmt.Errorf("no route delivers scope %q asynchronously; async scopes: %s", scope, strings.Join(names, ", ")))
	}
	e := v.(*engine)
	op := e.ds.queue.Resume
	if paused {
		op = e.ds.queue.Pause
	}
	if err := op(ctx, scope); err != nil {
		return deliveryView{}, apiError(http.StatusServiceUnavailable, err)
	}
	if !paused {
		e.poke()
	}
	st, err := e.ds.queue.Stats(ctx, scope)
	if err != nil {
		return deliveryView{}, apiError(http.StatusServiceUnavailable, errors.Join(errors.New("the queue's stats"), err))
	}
	return newDeliveryView(e, st), nil
}

// pauseFromConsole is the console's pause/resume button (a POST that
// passed the console's cross-site checks).
func pauseFromConsole(ctx context.Context, w http.ResponseWriter, r *http.Request, v *consolePage) error {
	action := r.PostForm.Get("action")
	if action != "pause" && action != "resume" {
		return &consoleError{status: http.StatusBadRequest, msg: "action must be pause or resume"}
	}
	if _, err := setPaused(ctx, r.PostForm.Get("scope"), action == "pause"); err != nil {
		var ae caddy.APIError
		if errors.As(err, &ae) && ae.Err != nil {
			return &consoleError{status: ae.HTTPStatus, msg: ae.Err.Error()}
		}
		return err
	}
	http.Redirect(w, r, v.Base+"?"+url.Values{"note": {action + "d"}}.Encode(), http.StatusSeeOther)
	return nil
}
