package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/store"
)

// Recovery on the console: the money at stake first on the overview, the
// platform's retries left, and "Redeliver all" on a list filtered by
// scope, behind a confirmation page (a dry run) and the console's
// cross-site checks.

// stake is one state's money at stake, per currency, for the overview:
// the payments received (Amounts) and the refunds owed (RefundAmounts)
// apart, never one sum.
type stake struct {
	State         string
	Count         int
	Amounts       []amount // by currency
	RefundAmounts []amount // by currency
	WithoutAmount int
	Partial       bool
}

type amount struct{ Currency, Value string }

// consoleStakeMax bounds the keys the overview reads per state for the
// money at stake (each is read whole and verified): past it the overview
// says "partial", and GET /idempotency/summary reads up to admin.MaxSummary.
const consoleStakeMax = 1000

// stakes reads the money at stake in every loaded store (of scope, if
// set), failed and dead first.
func stakes(ctx context.Context, ap *app.App, stores []string, scope string) ([]stake, []string) {
	by := map[string]*stake{}
	order := []string{"failed", "dead", "in_flight"}
	for _, s := range order {
		by[s] = &stake{State: s}
	}
	sums := map[string]map[string][]string{}    // state → currency → payments
	refunds := map[string]map[string][]string{} // state → currency → refunds
	var errs []string
	svc := admin.NewService(ap, nil)
	for _, id := range stores {
		ps, _ := ap.FindStore(id)
		if ps == nil {
			continue
		}
		sv, err := svc.SummaryUpTo(ctx, ps, scope, consoleStakeMax)
		if err != nil {
			errs = append(errs, fmt.Sprintf("store %s: money at stake: %v", id, err))
			continue
		}
		for s, v := range map[string]admin.StakeView{"failed": sv.Failed, "dead": sv.Dead, "in_flight": sv.InFlight} {
			st := by[s]
			st.Count += v.Count
			st.WithoutAmount += v.WithoutAmount
			st.Partial = st.Partial || v.Partial
			for cur, a := range v.Amounts {
				if sums[s] == nil {
					sums[s] = map[string][]string{}
				}
				sums[s][cur] = append(sums[s][cur], a)
			}
			for cur, a := range v.RefundAmounts {
				if refunds[s] == nil {
					refunds[s] = map[string][]string{}
				}
				refunds[s][cur] = append(refunds[s][cur], a)
			}
		}
	}
	out := make([]stake, 0, len(order))
	for _, s := range order {
		st := by[s]
		for cur, as := range sums[s] {
			st.Amounts = append(st.Amounts, amount{Currency: cur, Value: admin.AddDecimals(as)})
		}
		for cur, as := range refunds[s] {
			st.RefundAmounts = append(st.RefundAmounts, amount{Currency: cur, Value: admin.AddDecimals(as)})
		}
		byCurrency := func(a, b amount) int { return strings.Compare(a.Currency, b.Currency) }
		slices.SortFunc(st.Amounts, byCurrency)
		slices.SortFunc(st.RefundAmounts, byCurrency)
		out = append(out, *st)
	}
	return out, errs
}

// retriesText is a failed key's retry budget as the console says it:
// "Alipay's next retry in ~2h, 5 left".
func retriesText(a *app.App, rec *store.Record, state string, now time.Time) string {
	r := admin.PlatformRetries(a, rec, state)
	if r == nil {
		return ""
	}
	name := platformName(a, rec.Key)
	if r.Left == 0 || r.Next == nil {
		return name + " has no retry left: the last was due " + ago(now, r.Last) + " ago"
	}
	return fmt.Sprintf("%s's next retry in ~%s, %d left", name, roughly(r.Next.Sub(now)), r.Left)
}

// platformName is the platform of a key's route, as people name it.
func platformName(a *app.App, key string) string {
	rt, ok := a.RouteOfKey(key)
	if !ok || rt.Platform == nil {
		return "the platform"
	}
	if p := platforms.Lookup(rt.Platform.Name()); p != nil {
		return p.Title
	}
	return rt.Platform.Name()
}

// roughly is a duration to one unit: 40s, 8m, 2h, 3d.
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(max(1, int(d.Seconds()))) + "s"
	case d.Round(time.Minute) < time.Hour:
		return strconv.Itoa(int(d.Round(time.Minute).Minutes())) + "m"
	case d.Round(time.Hour) < 48*time.Hour:
		return strconv.Itoa(int(d.Round(time.Hour).Hours())) + "h"
	}
	return strconv.Itoa(int(d.Round(24*time.Hour).Hours()/24)) + "d"
}

// bulkPage is the confirmation and the result of "Redeliver all".
type bulkPage struct {
	Store, State, Scope string
	Matched             int
	Results             []admin.BulkResult
	Done                bool
	Stopped             string
}

// confirmBulk is the confirmation page: a dry run says what would go.
func (c *Console) confirmBulk(ctx context.Context, r *http.Request, v *consolePage) error {
	q := r.URL.Query()
	req, storeID, err := bulkRequest(q)
	if err != nil {
		return err
	}
	v.Page, v.Title = "bulk", "Redeliver all "+req.State+" of "+req.Scope
	ps, err := appData{c.app}.store(storeID)
	if err != nil {
		return err
	}
	req.DryRun = true
	out, err := c.service().BulkRedeliver(ctx, ps, req, r.RemoteAddr)
	if err != nil {
		return consoleErr(err)
	}
	v.Bulk = &bulkPage{Store: storeID, State: req.State, Scope: req.Scope, Matched: out.Matched, Results: out.Results}
	return nil
}

// bulkRedeliver runs "Redeliver all" (a POST past the cross-site checks,
// confirmed on its page) and shows what each key came to.
func (c *Console) bulkRedeliver(ctx context.Context, w http.ResponseWriter, r *http.Request, v *consolePage) error {
	req, storeID, err := bulkRequest(r.PostForm)
	if err != nil {
		return err
	}
	if r.PostForm.Get("confirm") != "yes" {
		http.Redirect(w, r, v.Base+"redeliver-all?"+url.Values{"store": {storeID}, "state": {req.State}, "scope": {req.Scope}}.Encode(), http.StatusSeeOther)
		return nil
	}
	ps, err := appData{c.app}.store(storeID)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*admin.RedeliverTimeout)
	defer cancel()
	out, err := c.service().BulkRedeliver(ctx, ps, req, r.RemoteAddr)
	if err != nil {
		return consoleErr(err)
	}
	v.Page, v.Title = "bulk", "Redelivered "+req.State+" of "+req.Scope
	v.Bulk = &bulkPage{Store: storeID, State: req.State, Scope: req.Scope, Matched: out.Matched, Results: out.Results, Done: true, Stopped: out.Stopped}
	return c.render(w, http.StatusOK, v)
}

// bulkRequest reads a "Redeliver all" form or query: a state and a scope
// (the console runs bulk redeliveries on one scope's list only).
func bulkRequest(q url.Values) (admin.BulkRequest, string, error) {
	req := admin.BulkRequest{State: q.Get("state"), Scope: q.Get("scope")}
	if req.State != "failed" && req.State != "dead" {
		return req, "", &consoleError{http.StatusBadRequest, "state must be failed or dead"}
	}
	if req.Scope == "" {
		return req, "", &consoleError{http.StatusBadRequest, "Redeliver all runs on one scope's list: pick a scope first"}
	}
	return req, q.Get("store"), nil
}

// asyncNote is what a key page says of an async key's state. stopped is
// the error of the attempt that ended its deliveries at once (a dead
// mark: an expired signature), "" when give_up ended them.
func asyncNote(state string, next *time.Time, now time.Time, stopped string) string {
	switch state {
	case admin.StateQueued:
		return "queued: acknowledged to the platform, waiting its turn in the delivery queue"
	case admin.StateRetrying:
		if next != nil {
			return "retrying: an attempt failed; the next one is due in " + roughly(next.Sub(now))
		}
		return "retrying: an attempt failed; the gateway tries again"
	case admin.StateDelivering:
		return "delivering: a gateway is sending it to the backend now"
	case "dead":
		if stopped != "" {
			return "dead: the platform has its ack and will never retry it; the gateway stopped at once, as retrying cannot help (" + stopped + "): run the business by hand or refund"
		}
		return "dead: the platform has its ack and will never retry it; the gateway gave up (give_up): redeliver it or refund"
	}
	return ""
}
