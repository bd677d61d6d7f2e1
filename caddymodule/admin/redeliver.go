package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

// RedeliverTimeout bounds a redelivery: the backend's work included.
const RedeliverTimeout = 2 * time.Minute

// RedeliveryView is the answer to POST /idempotency/keys/<key>/redeliver:
// what the route answered the journaled notification, and the record's
// state afterwards.
type RedeliveryView struct {
	Store string `json:"store"`
	Key   string `json:"key"`
	// Route is the handler the redelivery entered ("<scope>#<n>").
	Route string `json:"route,omitempty"`
	// Status is the answer's status: the backend's, or the route's own
	// (a replay, an async ack, a refusal).
	Status   int  `json:"status"`
	Replayed bool `json:"replayed"`
	// ByGateway: no answer came from the chain (the backend unreachable);
	// Status and Body are the gateway's.
	ByGateway bool        `json:"by_gateway,omitempty"`
	Header    http.Header `json:"header,omitempty"`
	Body      string      `json:"body"`
	// State is the record's state after the redelivery: answered when
	// the backend took it; queued, retrying or delivering on an async
	// route; failed when the backend failed again.
	State       string     `json:"state"`
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
	// Resigned: the redelivery carried a fresh signature over the same
	// body (the route holds the platform's signing secret).
	Resigned bool `json:"resigned,omitempty"`
	// Reopened: an answered key was made free first (?force=1&again=1); its
	// history stays, the redelivery's attempt added to it.
	Reopened bool `json:"reopened,omitempty"`
}

// Succeeded tells whether the redelivery left the key where it should
// be: answered, or (async) in the gateway's hands.
func (v RedeliveryView) Succeeded() bool { return Settled(v.State) }

// Settled tells whether a state after a redelivery is a success: answered,
// or (async) queued or delivering — the gateway has it and no attempt has
// failed yet.
func Settled(state string) bool {
	switch state {
	case string(store.StateAnswered), StateQueued, StateDelivering:
		return true
	}
	return false
}

// AlreadyRan says that the backend of an answered record ran it, when and
// with what answer: what a refused (or confirmed) forced redelivery shows.
func AlreadyRan(rec *store.Record) string {
	return fmt.Sprintf("the backend already ran it (answered at %s, status %d)", rec.Changed.UTC().Format(time.RFC3339), rec.Status)
}

// redeliver serves POST /idempotency/keys/<key>/redeliver (see Redeliver).
func (a *AdminAPI) redeliver(w http.ResponseWriter, r *http.Request) error {
	key, err := keyParam(r)
	if err != nil {
		return err
	}
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	out, err := a.svc.Redeliver(r.Context(), ps, key, boolParam(r, "force"), boolParam(r, "again"), r.RemoteAddr)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// Redeliver sends the journaled notification of key into the handler that
// took it (app.Route.Redeliver): not through the site's routing, so
// a remote_ip guard or a rewrite in front of the handler changes nothing.
// It claims the key like any copy: a failed or dead key is forwarded once,
// an answered one would only replay: its backend already ran it, so it is
// refused unless both force and again are given (force forgets the answer
// first, once the route is known to be reachable; again says the operator
// means to run the business a second time). Refusals are
// admin errors (caddy.APIError) with their status; remote names who asked,
// for the log line. The console and the bulk run call it too, so the rules
// stay in one place.
func (s *Service) Redeliver(ctx context.Context, ps *app.Store, key string, force, again bool, remote string) (RedeliveryView, error) {
	a, logger := s.app, s.logger
	lctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	rec, err := lookup(lctx, ps, key)
	if err != nil {
		return RedeliveryView{}, err
	}
	n := rec.Notification
	ks := StateOf(a, rec)
	switch {
	case n == nil:
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q has no journaled notification (journal_body off, or no attempt was ever settled): ask the platform to resend", key))
	case n.Truncated():
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q: only %d of the notification's %d bytes were kept (journal_body): a redelivery would not be the platform's bytes", key, len(n.Body), n.BodySize))
	case ks.State == StateQueued || ks.State == StateRetrying || ks.State == StateDelivering:
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q is %s: the gateway delivers it itself (deliver async); see its attempts, or pause and purge it", key, ks.State))
	case rec.State == store.StateInFlight:
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q is in flight: its first copy is at the backend now; wait for it (or purge with force if its gateway is gone)", key))
	case rec.State == store.StateAnswered && !force:
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q is answered: %s; a redelivery would run it a second time, so none was sent", key, AlreadyRan(rec)))
	case rec.State == store.StateAnswered && !again:
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q: %s; ?force=1 (--force) alone does not run it a second time: add again=1 (--again) only if the business must run again", key, AlreadyRan(rec)))
	}
	rt, ok := routeOf(a, rec)
	if !ok || rt.Redeliver == nil {
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q: no route of scope %s is loaded in the running config: nothing was sent", key, scopeOf(key)))
	}
	reopened := false
	reopen := func() error {
		if rec.State != store.StateAnswered {
			return nil
		}
		// Reopened, not deleted: the key's history (copies, the earlier
		// attempts) stays beside the redelivery's.
		if err := ps.Reopen(lctx, key, a.TTLOf(key)); err != nil && !errors.Is(err, store.ErrNotFound) {
			return apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
		}
		reopened = true
		return nil
	}
	if logger != nil {
		logger.Info("redelivering a journaled notification through the admin API",
			zap.String("store", ps.ID), zap.String("key", app.HashKey(key)), zap.String("route", rt.Name),
			zap.String("state", ks.State), zap.Bool("force", force), zap.Bool("again", again), zap.String("remote", remote))
	}
	sctx, scancel := context.WithTimeout(ctx, RedeliverTimeout)
	defer scancel()
	ans, err := rt.Redeliver(sctx, n, rec.FirstSeen, reopen)
	if err != nil {
		var apiErr caddy.APIError
		if errors.As(err, &apiErr) {
			return RedeliveryView{}, err // reopen's
		}
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("redelivering key %q: %v", key, err))
	}
	out := RedeliveryView{
		Store: ps.ID, Key: key, Route: rt.Name, Status: ans.Status, Replayed: ans.Header.Get("Idempotent-Replayed") == "true",
		ByGateway: ans.ByGateway, Header: ans.Header, Body: string(ans.Body), Resigned: ans.Resigned, Reopened: reopened,
	}
	// The state afterwards, as the record now reads.
	after, err := ps.Lookup(lctx, key)
	switch {
	case err == nil:
		as := StateOf(a, after)
		out.State = as.State
		if !as.NextAttempt.IsZero() {
			t := apiTime(as.NextAttempt)
			out.NextAttempt = &t
		}
	case errors.Is(err, store.ErrNotFound):
		out.State = "gone"
	default:
		out.State = "unknown"
	}
	return out, nil
}

// routeOf is the route a record's notification came through: the handler
// it names, else the newest route of its scope.
func routeOf(a *app.App, rec *store.Record) (*app.Route, bool) {
	name := ""
	if rec.Notification != nil {
		name = rec.Notification.Route
	}
	return a.RouteNamed(name, scopeOf(rec.Key))
}

func scopeOf(key string) string {
	scope, _, _ := strings.Cut(key, ":")
	return scope
}
