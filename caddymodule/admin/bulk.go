package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

// Bulk redelivery: POST /idempotency/redeliver with a filter redelivers
// every failed (or dead) key it matches, as Redeliver does each one, a few
// at a time: what a backend that was down for an hour needs once it is up.

// BulkRequest is the body of POST /idempotency/redeliver.
type BulkRequest struct {
	// State is failed or dead; required.
	State string `json:"state"`
	// Scope, Since: the filter; at least one is needed for a real run (a
	// dry run without either says how many keys it would match).
	Scope string    `json:"scope,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// Limit bounds the keys redelivered; 0 is MaxBulk.
	Limit  int  `json:"limit,omitempty"`
	DryRun bool `json:"dry_run,omitempty"`
}

// MaxBulk bounds one run: the operator runs again for more.
const MaxBulk = 10_000

// BulkView is the answer: how many keys matched, what each came to.
type BulkView struct {
	Store   string       `json:"store"`
	Matched int          `json:"matched"`
	DryRun  bool         `json:"dry_run,omitempty"`
	Results []BulkResult `json:"results"`
	// Stopped says why the run ended before every matched key was sent
	// (a store error); Results say how far it got.
	Stopped string `json:"stopped,omitempty"`
}

// BulkResult is one key's redelivery: the backend's status (0 when
// nothing was sent) and the key's state afterwards.
type BulkResult struct {
	Key    string `json:"key"`
	Status int    `json:"status"`
	State  string `json:"state"`
	Error  string `json:"error,omitempty"`
}

// syncConcurrency is how many redeliveries a bulk run sends at once to a
// sync route: a backend just back up should not meet a storm.
const syncConcurrency = 4

func (a *AdminAPI) bulkRedeliver(w http.ResponseWriter, r *http.Request) error {
	var req BulkRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return apiError(http.StatusBadRequest, fmt.Errorf(`the body must be JSON {"state": "failed"|"dead", "scope": "…", "since": "<RFC 3339>", "limit": n, "dry_run": true|false}: %v`, err))
	}
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	out, err := a.svc.BulkRedeliver(r.Context(), ps, req, r.RemoteAddr)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// BulkRedeliver runs req on ps (the console calls it too), each key as
// Redeliver does. A run without scope or since is refused, naming how
// many keys it would match; every key is sent at most once per run; a
// store error stops the run, and the answer says how far it got.
func (s *Service) BulkRedeliver(ctx context.Context, ps *app.Store, req BulkRequest, remote string) (BulkView, error) {
	a, logger := s.app, s.logger
	if req.State != string(store.StateFailed) && req.State != string(store.StateDead) {
		return BulkView{}, apiError(http.StatusBadRequest, fmt.Errorf("state must be failed or dead, not %q", req.State))
	}
	if req.Limit < 0 {
		return BulkView{}, apiError(http.StatusBadRequest, fmt.Errorf("limit must be positive, not %d", req.Limit))
	}
	limit := MaxBulk
	if req.Limit > 0 {
		limit = min(req.Limit, MaxBulk)
	}
	keys, listErr := matching(ctx, a, ps, req, limit)
	if listErr != nil && len(keys) == 0 {
		return BulkView{}, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, listErr))
	}
	out := BulkView{Store: ps.ID, Matched: len(keys), DryRun: req.DryRun, Results: []BulkResult{}}
	if req.Scope == "" && req.Since.IsZero() && !req.DryRun {
		return BulkView{}, apiError(http.StatusBadRequest, fmt.Errorf("a bulk redelivery needs a filter (scope, since): "+
			"without one it matches %d %s keys of every route; a dry run (dry_run: true) lists them", len(keys), req.State))
	}
	if listErr != nil {
		out.Stopped = fmt.Sprintf("listing stopped at a store error after %d keys: %v", len(keys), listErr)
	}
	if req.DryRun {
		for _, rec := range keys {
			out.Results = append(out.Results, BulkResult{Key: rec.Key, State: StateOf(a, rec).State})
		}
		return out, nil
	}
	if logger != nil {
		logger.Info("bulk redelivery through the admin API", zap.String("store", ps.ID), zap.String("state", req.State),
			zap.String("scope", req.Scope), zap.Time("since", req.Since), zap.Int("matched", len(keys)), zap.String("remote", remote))
	}
	results, stopped := s.runBulk(ctx, ps, keys, concurrencyOf(a, req.Scope), remote)
	out.Results = results
	if stopped != "" {
		out.Stopped = stopped
	}
	return out, nil
}

// matching lists the keys req matches, at most limit, each once.
func matching(ctx context.Context, a *app.App, ps *app.Store, req BulkRequest, limit int) ([]*store.Record, error) {
	lq := store.ListQuery{State: store.State(req.State), Scope: req.Scope, Since: req.Since,
		Window: a.WindowOf, Now: a.Now(), Limit: min(limit, maxPageLimit)}
	seen := map[string]bool{}
	var out []*store.Record
	for len(out) < limit {
		lctx, cancel := context.WithTimeout(ctx, adminTimeout)
		page, err := ps.List(lctx, lq)
		cancel()
		if err != nil {
			return out, err
		}
		for _, rec := range page.Records {
			if !seen[rec.Key] && len(out) < limit {
				seen[rec.Key] = true
				out = append(out, rec)
			}
		}
		if page.Next == "" {
			return out, nil
		}
		lq.Cursor = page.Next
	}
	return out, nil
}

// concurrencyOf is how many redeliveries go at once: the async route's
// concurrency, else syncConcurrency.
func concurrencyOf(a *app.App, scope string) int {
	if rt, ok := a.RouteOf(scope); ok && rt.Async && rt.Concurrency > 0 {
		return rt.Concurrency
	}
	return syncConcurrency
}

// runBulk redelivers keys, n at a time, in order. The first store error
// stops it: no key after it is started, and the answer says so.
func (s *Service) runBulk(ctx context.Context, ps *app.Store, keys []*store.Record, n int, remote string) ([]BulkResult, string) {
	results := make([]BulkResult, len(keys))
	var (
		mu      sync.Mutex
		stopped string
		wg      sync.WaitGroup
	)
	sem := make(chan struct{}, n)
	started := 0
	for i, rec := range keys {
		mu.Lock()
		halt := stopped != ""
		mu.Unlock()
		if halt || ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		mu.Lock()
		halt = stopped != ""
		mu.Unlock()
		if halt {
			<-sem
			break
		}
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res := BulkResult{Key: rec.Key}
			v, err := s.Redeliver(ctx, ps, rec.Key, false, false, remote)
			if err == nil {
				res.Status, res.State = v.Status, v.State
				if v.State == "unknown" {
					// The record could not be read back: the store is in
					// trouble, and the next key would meet it too.
					mu.Lock()
					if stopped == "" {
						stopped = fmt.Sprintf("stopped: the store did not answer after redelivering %s", rec.Key)
					}
					mu.Unlock()
				}
			} else {
				res.Error, res.State = err.Error(), "unchanged"
				if isStoreError(err) {
					mu.Lock()
					if stopped == "" {
						stopped = fmt.Sprintf("stopped at a store error on %s: %v", rec.Key, err)
					}
					mu.Unlock()
				}
			}
			results[i] = res
		}()
	}
	wg.Wait()
	if stopped == "" && ctx.Err() != nil {
		stopped = "the request was cancelled: " + ctx.Err().Error()
	}
	return results[:started], stopped
}

// isStoreError: the store failed (the admin API's 503), as opposed to a
// key that could not be redelivered for its own reason (answered
// meanwhile, no journaled notification).
func isStoreError(err error) bool {
	var apiErr caddy.APIError
	return errors.As(err, &apiErr) && apiErr.HTTPStatus == http.StatusServiceUnavailable
}
