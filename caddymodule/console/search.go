package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/store"
)

// The search page (search?q=<text>): an order as the customer names it.
// The header's search box sends here: the merchant's order number
// (out_trade_no), a refund's, a Stripe or PayPal id finds the keys whose
// notifications signed it, in every loaded store; any text finds the keys
// that start with it (admin.Service.Search).

// searchView is the search page's results.
type searchView struct {
	Q    string
	Rows []searchRow
	// Stores says whether several stores were searched (a column then
	// names each row's).
	Stores bool
}

type searchRow struct {
	Store string
	store.Match
}

func (d appData) search(ctx context.Context, storeID, q string) (admin.SearchView, error) {
	ps, err := d.store(storeID)
	if err != nil {
		return admin.SearchView{}, err
	}
	return d.service(nil).Search(ctx, ps, q, store.MaxSearch)
}

func (c *Console) searchPage(ctx context.Context, r *http.Request, v *consolePage) error {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	v.Page, v.Title = "search", "Search "+q
	v.Prefix = q // the header's box keeps the text
	if q == "" {
		return &consoleError{http.StatusBadRequest, "search for what? The merchant's order number (out_trade_no), a refund number, a Stripe or PayPal id, or the start of a key."}
	}
	ids := c.data.storeIDs()
	sv := &searchView{Q: q, Stores: len(ids) > 1}
	for _, id := range ids {
		res, err := c.data.search(ctx, id, q)
		if err != nil {
			v.Errors = append(v.Errors, fmt.Sprintf("store %s: %v", id, err))
			continue
		}
		for _, m := range res.Matches {
			sv.Rows = append(sv.Rows, searchRow{Store: id, Match: m})
		}
	}
	v.Search = sv
	return nil
}
