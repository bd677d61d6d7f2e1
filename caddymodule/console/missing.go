package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/store"
)

// The missing page (GET missing[?scope=…&since=…]): what catch_up found
// (补单), payments the platform holds that no notification brought, from
// every loaded store (admin.Service.Missing, in process); and the query
// action (POST query, the page's token): ask Alipay or WeChat Pay about
// one order now (admin.Service.Query), from this page's form or the
// "Query the platform" button of an order's page.

// missingView is the missing page.
type missingView struct {
	Scopes []string
	Scope  string
	Since  string
	Rows   []missingRow
	// CatchUp are the scopes the platform can be asked about.
	CatchUp []queryScope
	// Asked is the entry an operator's query just answered.
	Asked  *store.Missing
	Errors []string
}

type missingRow struct {
	Store string
	store.Missing
}

// queryScope is a scope with catch_up on an order-queried platform.
type queryScope struct{ Scope, Platform string }

// SinceChoices are the since filter's options.
func (*missingView) SinceChoices() []sinceChoice { return refusedSince }

// Heading counts the rows.
func (mv *missingView) Heading() string {
	switch n := len(mv.Rows); n {
	case 0:
		return "Nothing missing"
	case 1:
		return "1 missing payment or event"
	default:
		return fmt.Sprintf("%d missing payments or events", n)
	}
}

// queryScopes are the loaded scopes whose platform can be asked by order.
func (c *Console) queryScopes() []queryScope {
	var out []queryScope
	for _, s := range c.app.ScopeNames() {
		for _, r := range c.app.RoutesOf(s) {
			if r.Query != nil && r.Platform != nil {
				out = append(out, queryScope{s, r.Platform.Name()})
				break
			}
		}
	}
	return out
}

// OrderQuery is the "Query the platform" button's fields for an order
// ("<scope>:<merchant>:<trade_no>") of a scope with catch_up; nil for any
// other.
func (v *consolePage) OrderQuery(order string) *orderQuery {
	parts := strings.SplitN(order, ":", 3)
	if len(parts) != 3 || parts[2] == "" || strings.Contains(parts[2], ":") {
		return nil
	}
	for _, q := range v.CatchUp {
		if q.Scope == parts[0] {
			return &orderQuery{Scope: q.Scope, Platform: q.Platform, TradeNo: parts[2]}
		}
	}
	return nil
}

type orderQuery struct{ Scope, Platform, TradeNo string }

func (c *Console) missingPage(ctx context.Context, r *http.Request, v *consolePage) error {
	q := r.URL.Query()
	mv := &missingView{Scope: q.Get("scope"), Since: q.Get("since"), Scopes: c.app.ScopeNames(), CatchUp: c.queryScopes()}
	v.Page, v.Title, v.Missing = "missing", "Missing notifications", mv
	mq := store.MissingQuery{Scope: mv.Scope, Limit: store.MissingCap}
	if mv.Since != "" {
		t, err := admin.ParseSince(mv.Since, time.Now())
		if err != nil {
			return &consoleError{http.StatusBadRequest, err.Error()}
		}
		mq.Since = t
	}
	for _, id := range c.data.storeIDs() {
		ps, err := admin.PickStore(c.app, id)
		if err != nil {
			mv.Errors = append(mv.Errors, err.Error())
			continue
		}
		list, err := c.service().Missing(ctx, ps, mq)
		if err != nil {
			mv.Errors = append(mv.Errors, consoleErr(err).Error())
			continue
		}
		for _, m := range list.Missing {
			mv.Rows = append(mv.Rows, missingRow{Store: id, Missing: m})
		}
	}
	slices.SortStableFunc(mv.Rows, func(a, b missingRow) int { return b.Updated.Compare(a.Updated) })
	return nil
}

// query is the "Query the platform" button (a POST that passed the
// cross-site checks): it asks now and shows the answer on the missing page.
func (c *Console) query(ctx context.Context, w http.ResponseWriter, r *http.Request, v *consolePage) error {
	f := r.PostForm
	platform := f.Get("platform")
	for _, q := range c.queryScopes() {
		if platform == "" && q.Scope == f.Get("scope") {
			platform = q.Platform
		}
	}
	m, err := c.service().Query(ctx, platform, f.Get("scope"),
		admin.QueryRequest{OutTradeNo: f.Get("out_trade_no"), TradeNo: f.Get("trade_no")})
	if err != nil && m.Outcome == "" {
		return consoleErr(err)
	}
	if err := c.missingPage(ctx, r, v); err != nil {
		return err
	}
	v.Missing.Asked = &m
	if err != nil {
		v.Missing.Errors = append(v.Missing.Errors, consoleErr(err).Error())
	}
	return c.render(w, http.StatusOK, v)
}
