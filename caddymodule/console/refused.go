package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/inert"
	"github.com/idemgate/idemgate/store"
)

// The refused page (GET refused[?scope=…&since=…]): the notifications the
// gateway refused before any claim, newest first, from every loaded store
// (admin.Service.Refused, in process). A filter form, no JavaScript. The body's
// first bytes come from whoever reached the gateway: they are shown
// through internal/inert, as the CLI shows them, so an escape or a
// bidirectional override is seen, not obeyed.

// refusedLimit bounds the page's rows.
const refusedLimit = 200

// refusedSince are the since filter's choices.
var refusedSince = []sinceChoice{{"15m", "15 minutes"}, {"1h", "1 hour"}, {"24h", "24 hours"}, {"168h", "7 days"}, {"", "all kept"}}

type sinceChoice struct{ Value, Label string }

// refusedView is the refused page.
type refusedView struct {
	Scopes []string // the filter's choices
	Scope  string
	Since  string
	Cap    int
	Stores int // loaded stores: a column names each row's when several
	Rows   []refusedRow
	More   bool // refusedLimit rows: older ones may be kept
	Errors []string
}

// SinceChoices are the since filter's options.
func (*refusedView) SinceChoices() []sinceChoice { return refusedSince }

// refusedRow is one refusal as the page shows it.
type refusedRow struct {
	Store string
	store.Refusal
	Body string // the kept bytes, inert, on one line
}

// ShortSum is the body's SHA-256, shortened (the title has it whole).
func (r refusedRow) ShortSum() string { return r.SHA256[:min(len(r.SHA256), 12)] }

func (c *Console) refusedPage(ctx context.Context, r *http.Request, v *consolePage) error {
	q := r.URL.Query()
	rv := &refusedView{Scope: q.Get("scope"), Since: q.Get("since"), Cap: store.RefusedCap, Scopes: c.app.ScopeNames()}
	v.Page, v.Title, v.Refused = "refused", "Refused notifications", rv
	if rv.Scope != "" && !slices.Contains(rv.Scopes, rv.Scope) {
		rv.Scopes = append(rv.Scopes, rv.Scope) // a scope no route has now may still have refusals kept
	}
	rq := store.RefusedQuery{Scope: rv.Scope, Limit: refusedLimit}
	if rv.Since != "" {
		t, err := admin.ParseSince(rv.Since, time.Now())
		if err != nil {
			return &consoleError{http.StatusBadRequest, err.Error()}
		}
		rq.Since = t
	}
	ids := c.data.storeIDs()
	rv.Stores = len(ids)
	for _, id := range ids {
		ps, err := admin.PickStore(c.app, id)
		if err != nil {
			rv.Errors = append(rv.Errors, err.Error())
			continue
		}
		list, err := c.service().Refused(ctx, ps, rq)
		if err != nil {
			rv.Errors = append(rv.Errors, consoleErr(err).Error())
			continue
		}
		for _, rf := range list.Refused {
			rv.Rows = append(rv.Rows, refusedRow{Store: id, Refusal: rf, Body: bodyLine(rf.Prefix, rf.Length)})
		}
	}
	slices.SortStableFunc(rv.Rows, func(a, b refusedRow) int { return b.Time.Compare(a.Time) })
	if len(rv.Rows) >= refusedLimit {
		rv.Rows, rv.More = rv.Rows[:refusedLimit], true
	}
	return nil
}

// bodyLine is a refused body's kept bytes on one line, inert: line
// breaks and tabs as \n, \r, \t; "…" when the body went on.
func bodyLine(prefix []byte, length int64) string {
	s := strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(string(prefix))
	s = inert.String(s)
	if length > int64(len(prefix)) {
		s += "…"
	}
	return s
}

// LengthText is the body's length for people.
func (r refusedRow) LengthText() string {
	if r.Length < 0 {
		return "not read"
	}
	return strconv.FormatInt(r.Length, 10)
}

// Heading counts the rows.
func (rv *refusedView) Heading() string {
	switch n := len(rv.Rows); {
	case n == 0:
		return "No refused notifications"
	case rv.More:
		return fmt.Sprintf("The newest %d refused notifications", n)
	case n == 1:
		return "1 refused notification"
	default:
		return fmt.Sprintf("%d refused notifications", n)
	}
}
