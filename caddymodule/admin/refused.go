package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

// GET /idempotency/refused[?scope=…&since=…&limit=…]: the notifications
// the gateway refused before claiming their key (a bad signature, an
// empty key, a body too large, a fingerprint conflict), newest first, as
// the store keeps them (store.RefusedLog): the latest store.RefusedCap of
// each scope, from every gateway instance sharing the store.

// RefusedView is the answer to GET /idempotency/refused.
type RefusedView struct {
	Store string    `json:"store"`
	Scope string    `json:"scope,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// Cap is how many refusals the store keeps per scope.
	Cap int `json:"cap"`
	// Refused: each with its body's length, SHA-256 and first bytes
	// (prefix, base64), as received.
	Refused []store.Refusal `json:"refused"`
}

// errNoRefusedLog: the store keeps no refused list.
var errNoRefusedLog = errors.New("keeps no refused list")

func (a *AdminAPI) refused(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	rq := store.RefusedQuery{Scope: q.Get("scope"), Limit: DefaultPageLimit}
	if s := q.Get("since"); s != "" {
		t, err := ParseSince(s, a.app.Now())
		if err != nil {
			return apiError(http.StatusBadRequest, err)
		}
		rq.Since = t
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return apiError(http.StatusBadRequest, fmt.Errorf("limit must be a positive number, not %q", s))
		}
		rq.Limit = min(n, store.RefusedCap)
	}
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	v, err := a.svc.Refused(ctx, ps, rq)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// Refused reads ps's refused list, as admin errors: 501 for a store that
// keeps none, 503 when the store fails.
func (s *Service) Refused(ctx context.Context, ps *app.Store, q store.RefusedQuery) (RefusedView, error) {
	rl, ok := ps.Store.(store.RefusedLog)
	if !ok {
		return RefusedView{}, apiError(http.StatusNotImplemented, fmt.Errorf("store %s %w", ps.ID, errNoRefusedLog))
	}
	rs, err := rl.Refused(ctx, q)
	if err != nil {
		return RefusedView{}, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
	}
	for i := range rs {
		rs[i].Time = apiTime(rs[i].Time)
	}
	if rs == nil {
		rs = []store.Refusal{}
	}
	return RefusedView{Store: ps.ID, Scope: q.Scope, Since: apiTime(q.Since), Cap: store.RefusedCap, Refused: rs}, nil
}

// ParseSince reads a since parameter: an RFC 3339 time, or a duration
// before now ("1h").
func ParseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("since must be an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (1h), not %q", s)
	}
	return t, nil
}

// RefusedWindow is the time GET /idempotency/summary counts refusals over.
const RefusedWindow = 24 * time.Hour

// RefusedCount is the summary's count of refusals. It names no amount: a
// refused body's amounts are unauthenticated.
type RefusedCount struct {
	Count int       `json:"count"`
	Since time.Time `json:"since"`
	// AtLeast: the store keeps only the latest store.RefusedCap of a
	// scope, and the count reached it.
	AtLeast bool `json:"at_least,omitempty"`
}

// refusedCount counts ps's refusals (of scope, if not "") in the last
// RefusedWindow; nil when the store keeps none or cannot say.
func refusedCount(ctx context.Context, a *app.App, ps *app.Store, scope string) *RefusedCount {
	rl, ok := ps.Store.(store.RefusedLog)
	if !ok {
		return nil
	}
	since := apiTime(a.Now().Add(-RefusedWindow))
	rs, err := rl.Refused(ctx, store.RefusedQuery{Scope: scope, Since: since, Limit: store.RefusedCap})
	if err != nil {
		return nil
	}
	return &RefusedCount{Count: len(rs), Since: since, AtLeast: len(rs) >= store.RefusedCap}
}
