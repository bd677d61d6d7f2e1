package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/store"
)

// GET /idempotency/missing[?scope=…&since=…]: what catch_up found (补单,
// "Missing notifications"): payments or events the platform holds that no
// notification brought, what the gateway did and the outcome, most
// recently updated first, from every instance sharing the store.
//
// POST /idempotency/query?platform=…[&scope=…] with {"out_trade_no": "…"}
// or {"trade_no": "…"} (and "sub_mchid" for a WeChat Pay service
// provider): asks the platform about one order now, through the route's
// catch_up (Alipay, WeChat Pay), and answers the order's missing entry.

// MissingView is the answer to GET /idempotency/missing.
type MissingView struct {
	Store   string          `json:"store"`
	Scope   string          `json:"scope,omitempty"`
	Since   time.Time       `json:"since,omitzero"`
	Missing []store.Missing `json:"missing"`
}

// QueryRequest is the body of POST /idempotency/query.
type QueryRequest struct {
	OutTradeNo  string `json:"out_trade_no,omitempty"`
	TradeNo     string `json:"trade_no,omitempty"`
	SubMerchant string `json:"sub_mchid,omitempty"`
}

var errNoMissingLog = errors.New("keeps no missing list")

func (a *AdminAPI) missing(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	mq := store.MissingQuery{Scope: q.Get("scope"), Limit: DefaultPageLimit}
	if s := q.Get("since"); s != "" {
		t, err := ParseSince(s, a.app.Now())
		if err != nil {
			return apiError(http.StatusBadRequest, err)
		}
		mq.Since = t
	}
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	v, err := a.svc.Missing(ctx, ps, mq)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// Missing reads ps's missing list, as admin errors: 501 for a store that
// keeps none, 503 when the store fails.
func (s *Service) Missing(ctx context.Context, ps *app.Store, q store.MissingQuery) (MissingView, error) {
	ml, ok := ps.Store.(store.MissingLog)
	if !ok {
		return MissingView{}, apiError(http.StatusNotImplemented, fmt.Errorf("store %s %w", ps.ID, errNoMissingLog))
	}
	ms, err := ml.Missing(ctx, q)
	if err != nil {
		return MissingView{}, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
	}
	for i := range ms {
		ms[i].At, ms[i].Found, ms[i].Updated, ms[i].NextAt = apiTime(ms[i].At), apiTime(ms[i].Found), apiTime(ms[i].Updated), apiTime(ms[i].NextAt)
	}
	if ms == nil {
		ms = []store.Missing{}
	}
	return MissingView{Store: ps.ID, Scope: q.Scope, Since: apiTime(q.Since), Missing: ms}, nil
}

func (a *AdminAPI) query(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var body QueryRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body); err != nil {
		return apiError(http.StatusBadRequest, fmt.Errorf("want a JSON body with out_trade_no or trade_no: %v", err))
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	m, err := a.svc.Query(ctx, q.Get("platform"), q.Get("scope"), body)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, m)
}

// Query asks the platform about one order now through the catch_up of
// the route of scope (default: the platform's name), as admin errors: 400
// for a request naming no order, 404 for a scope with no route, 409 for a
// route without catch_up or not queried by order, 502 when the platform
// could not be asked (the entry's reason says why).
func (s *Service) Query(ctx context.Context, platform, scope string, q QueryRequest) (store.Missing, error) {
	if platform == "" {
		return store.Missing{}, apiError(http.StatusBadRequest, fmt.Errorf("platform is required (%s)", strings.Join(platforms.ByOrder(), ", ")))
	}
	if scope == "" {
		scope = platform
	}
	q.OutTradeNo, q.TradeNo = strings.TrimSpace(q.OutTradeNo), strings.TrimSpace(q.TradeNo)
	if q.OutTradeNo == "" && q.TradeNo == "" {
		return store.Missing{}, apiError(http.StatusBadRequest, errors.New("name the order: out_trade_no or trade_no"))
	}
	// The scope's route with catch_up (a status-query route shares the
	// scope and has none).
	var rt *app.Route
	for _, r := range s.app.RoutesOf(scope) {
		if r.Platform == nil || r.Platform.Name() != platform {
			continue
		}
		if rt == nil || r.Query != nil {
			rt = r
		}
	}
	switch {
	case len(s.app.RoutesOf(scope)) == 0:
		return store.Missing{}, apiError(http.StatusNotFound, fmt.Errorf("no route of scope %q is loaded", scope))
	case rt == nil:
		return store.Missing{}, apiError(http.StatusBadRequest, fmt.Errorf("scope %q has no %s route", scope, platform))
	case rt.Query == nil:
		return store.Missing{}, apiError(http.StatusConflict, fmt.Errorf("scope %q has no catch_up block: the platform cannot be asked", scope))
	}
	m, err := rt.Query(ctx, keying.OrderQuery{OutTradeNo: q.OutTradeNo, TradeNo: q.TradeNo, SubMerchant: strings.TrimSpace(q.SubMerchant)})
	if err != nil {
		return m, apiError(http.StatusBadGateway, err)
	}
	m.At, m.Found, m.Updated, m.NextAt = apiTime(m.At), apiTime(m.Found), apiTime(m.Updated), apiTime(m.NextAt)
	return m, nil
}
