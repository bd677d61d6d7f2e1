// Package reconcile is reconciliation (对账): a platform's bill, read as
// a stream, compared row by row with the business events the store
// remembers (store.OrderIndex), answers one Report:
//
//   - settled, never run: the bill settled it, but no business event of
//     that order or refund ran (no notification arrived, or every attempt
//     failed) — redeliver or refund;
//   - run, not settled: the backend ran a payment or refund, filed under a
//     day of the bill's period, that no row of the bill shows;
//   - amount differs: the bill's amount is not the notification's signed
//     amount;
//   - matched.
//
// The bill is read as a stream (keying/bill: bounded by its longest line)
// and looked up in batches (one round trip each on Redis); what matched is
// kept as one 8-byte hash a row. See match.go, and unsettled.go for run,
// not settled.
//
// The package knows no server: the admin API (POST /idempotency/reconcile)
// and the console hand it an Env filled from the running configuration.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms"
)

// Timeout bounds one reconciliation (a bill of a million rows takes
// well under a minute on a local Redis).
const Timeout = 30 * time.Minute

// MaxBillSize bounds a bill (the body of POST /idempotency/reconcile): a million
// rows of any platform's bill fit several times over.
const MaxBillSize = 2 << 30

// maxPeriod bounds the period a reconciliation walks the day index for:
// order state is kept 400 days by default.
const maxPeriod = 400 * 24 * time.Hour

// Item-list bounds: DefaultItems listed per category unless
// limit= says otherwise, at most maxItems.
const (
	DefaultItems = 100
	maxItems     = 10000
)

// Options say what to reconcile a bill against.
type Options struct {
	// Platform is the bill's: alipay, wechatpay, wechatpay_v2, stripe,
	// paypal.
	Platform string
	// Scope is the routes' scope; default: the platform's name.
	Scope string
	// Merchant is the merchant the bill is for: Alipay's app_id (its bill
	// names the seller account, not the app_id of the keys; default: the
	// app told from the route's pins and the notifications recorded, see
	// resolveApp), WeChat Pay's mchid (default: each row's 商户号, or
	// 特约商户号 in a service provider's bill). Stripe and PayPal keys
	// name none.
	Merchant string
	// Limit bounds the items listed per category.
	Limit int
	// Matched lists matched items too.
	Matched bool
	// From and To bound the period of "run, not settled"; zero: the
	// bill's own (Alipay's head, PayPal's sections) or the days of its rows.
	From, To time.Time
}

// Report is the answer to a reconciliation.
type Report struct {
	Store    string   `json:"store"`
	Platform string   `json:"platform"`
	Scope    string   `json:"scope"`
	Merchant []string `json:"merchant,omitempty"`
	Bill     BillView `json:"bill"`
	// Period is what "run, not settled" covers; nil when the bill gave
	// none (no rows, no stated period) and none was asked for.
	Period          *PeriodView `json:"period"`
	SettledNeverRun Category    `json:"settled_never_run"`
	RunNotSettled   Category    `json:"run_not_settled"`
	AmountDiffers   Category    `json:"amount_differs"`
	Matched         Category    `json:"matched"`
	// PendingNextBill holds what ran in the last minutes of the period and
	// the bill does not show: the next day's bill may (see
	// pending.go). Not a difference yet.
	PendingNextBill Category `json:"pending_next_bill"`
	// Skipped counts the bill's rows that are neither a payment nor a
	// refund (fees, payouts, WeChat Pay's REVOKED).
	Skipped int      `json:"skipped"`
	Notes   []string `json:"notes,omitempty"`
}

// BillView is what the bill said about itself.
type BillView struct {
	Layout   string    `json:"layout"`
	Rows     int       `json:"rows"`
	Payments int       `json:"payments"`
	Refunds  int       `json:"refunds"`
	Others   int       `json:"others"`
	Checked  bool      `json:"checked"`
	Account  string    `json:"account,omitempty"`
	From     time.Time `json:"from,omitzero"`
	To       time.Time `json:"to,omitzero"`
}

// PeriodView is the reconciled period, [From, To), and where it came
// from: "request", "bill" or "rows".
type PeriodView struct {
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Source string    `json:"source"`
}

// Category is one of the report's four: a count, the totals per
// currency and the first items. Payments and refunds are totalled apart,
// never summed into one figure: Amounts are the payments', RefundAmounts
// the refunds' (each refund counted positive, as its bill and
// notification write it). The totals are the bill's amounts (for
// run_not_settled the notifications'), and for amount_differs the
// items' differences, bill minus notified.
type Category struct {
	Count         int               `json:"count"`
	Amounts       map[string]string `json:"amounts"`
	RefundAmounts map[string]string `json:"refund_amounts"`
	Items         []Item            `json:"items,omitempty"`
	// ItemsOmitted counts items beyond the limit, not listed.
	ItemsOmitted int `json:"items_omitted,omitempty"`
	// Reason says why the items are in the category, where it is not
	// plain (pending_next_bill).
	Reason string `json:"reason,omitempty"`

	totals, refunds totals
}

// Item is one business event of a category.
type Item struct {
	// Order is the order as the gateway names it, <scope>:<merchant>:<id>
	// (its page: GET /idempotency/orders/<order>), or for Stripe and
	// PayPal the object the bill names (ch_…, a capture id).
	Order string `json:"order"`
	// Event is "paid" or "refund:<id>" (the refund's id as its bill and
	// notification name it).
	Event          string `json:"event"`
	BillAmount     string `json:"bill_amount,omitempty"`
	NotifiedAmount string `json:"notified_amount,omitempty"`
	Currency       string `json:"currency,omitempty"`
	// Difference is, for amount_differs, the bill's amount minus the
	// notified one ("-0.88": the bill says less), when both are amounts
	// in the same currency.
	Difference string `json:"difference,omitempty"`
	// Key is the event's full key, when it is known.
	Key string `json:"key,omitempty"`
	// State is the key's record's state while the record is kept
	// (in_flight, answered, failed, dead; an async key's queued,
	// retrying or delivering: Env.StateOf), "ran" when only its order
	// remembers it ran (its record's ttl passed), or "none": no record
	// (no notification arrived, or its record's ttl passed).
	State string `json:"state,omitempty"`
	// Attempts is how often the backend was tried, when the record says.
	Attempts int64 `json:"attempts,omitempty"`
	// Line is the bill's line; BillTime the row's time.
	Line     int       `json:"line,omitempty"`
	BillTime time.Time `json:"bill_time,omitzero"`
	// Ran is when the backend's answer was settled.
	Ran time.Time `json:"ran,omitzero"`
	// Redeliver is the command that sends the journaled notification
	// again, when the record keeps one.
	Redeliver string `json:"redeliver,omitempty"`
	Note      string `json:"note,omitempty"`

	refs []string // a Stripe or PayPal row's objects
}

// add files it, adding amount to the payments' or the refunds' totals
// as its event is.
func (c *Category) add(it Item, amount string, limit int) {
	c.Count++
	if c.totals == nil {
		c.totals, c.refunds = totals{}, totals{}
	}
	if strings.HasPrefix(it.Event, keying.EventRefund) {
		c.refunds.add(it.Currency, amount)
	} else {
		c.totals.add(it.Currency, amount)
	}
	if len(c.Items) < limit {
		c.Items = append(c.Items, it)
	} else {
		c.ItemsOmitted++
	}
}

// finish writes the totals for JSON.
func (c *Category) finish() {
	c.Amounts, c.RefundAmounts = c.totals.view(), c.refunds.view()
}

// Error is a reconciliation refused with a status: a bill that
// does not read (400, naming the line), an option that is wrong (400), a
// store that fails (503).
type Error struct {
	Status int
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func errorf(status int, format string, args ...any) error {
	return &Error{status, fmt.Errorf(format, args...)}
}

// Run reads a bill from r and reconciles it against env's store (see the
// package doc). When settled_never_run is not empty and the scope has a
// loaded route, the route emits idempotency.reconcile (a Caddy event, and
// its alert).
func Run(ctx context.Context, env Env, opts Options, r io.Reader) (*Report, error) {
	if !slices.Contains(platforms.Billed(), opts.Platform) {
		return nil, errorf(http.StatusBadRequest, "platform must be one of %s, not %q", strings.Join(platforms.Billed(), ", "), opts.Platform)
	}
	if opts.Scope == "" {
		opts.Scope = opts.Platform
	}
	if opts.Limit <= 0 {
		opts.Limit = DefaultItems
	}
	opts.Limit = min(opts.Limit, maxItems)
	route, err := routeFor(&env, opts)
	if err != nil {
		return nil, err
	}
	rd, err := platforms.BillOf(opts.Platform).Format.Open(r)
	if err != nil {
		return nil, billErr(err)
	}
	rc := newReconciler(&env, opts)
	if route != nil {
		rc.pins = route.Merchants
	}
	if rc.bill.NamesSeller {
		// The head is read: the bill's account and period tell the app.
		if err := rc.resolveApp(ctx, rd.Summary()); err != nil {
			return nil, err
		}
	}
	rep, err := rc.run(ctx, rd)
	if err != nil {
		return nil, err
	}
	if rep.SettledNeverRun.Count > 0 && route != nil && route.Emit != nil {
		route.Emit("idempotency.reconcile", rep.eventData())
	}
	return rep, nil
}

// routeFor is the scope's loaded route of the bill's platform (the newest,
// its pinned merchants those of all of them); nil when the scope has no
// route loaded (the store still has its orders), an error when its routes
// are another platform's.
func routeFor(env *Env, opts Options) (*Route, error) {
	var found *Route
	var others []string
	for _, r := range env.routes(opts.Scope) {
		name := r.Platform
		switch {
		case name != opts.Platform:
			others = append(others, name)
		case found == nil:
			c := r
			found = &c
		default:
			c := r
			c.Merchants = append(slices.Clone(found.Merchants), r.Merchants...)
			slices.Sort(c.Merchants)
			c.Merchants = slices.Compact(c.Merchants)
			found = &c
		}
	}
	if found == nil && len(others) > 0 && !slices.Contains(others, platforms.Default) {
		return nil, errorf(http.StatusBadRequest, "scope %s has %s routes, and this is a %s bill: which scope? (scope=…)",
			opts.Scope, strings.Join(slices.Compact(others), ", "), opts.Platform)
	}
	return found, nil
}

// billErr is a bill reading error as the answer says it.
func billErr(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return errorf(http.StatusRequestEntityTooLarge, "the bill is larger than %d bytes", mbe.Limit)
	case errors.Is(err, bill.ErrMalformed), errors.Is(err, bill.ErrIncomplete):
		return &Error{http.StatusBadRequest, err}
	}
	return &Error{http.StatusBadRequest, fmt.Errorf("reading the bill: %v", err)}
}

// eventData is the idempotency.reconcile event's data: each category's
// count and amounts, and the period.
func (rep *Report) eventData() map[string]any {
	d := map[string]any{"store": rep.Store, "bill_layout": rep.Bill.Layout}
	for name, c := range map[string]*Category{"settled_never_run": &rep.SettledNeverRun, "run_not_settled": &rep.RunNotSettled,
		"amount_differs": &rep.AmountDiffers, "matched": &rep.Matched, "pending_next_bill": &rep.PendingNextBill} {
		d[name] = map[string]any{"count": c.Count, "amounts": c.Amounts, "refund_amounts": c.RefundAmounts}
	}
	if rep.Period != nil {
		d["from"], d["to"] = rep.Period.From, rep.Period.To
	}
	return d
}

// ParseQuery reads the options of POST /idempotency/reconcile.
func ParseQuery(q map[string][]string) (Options, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	opts := Options{Platform: get("platform"), Scope: get("scope"), Merchant: get("merchant")}
	if opts.Platform == "" {
		return opts, errorf(http.StatusBadRequest, "which platform's bill? ?platform=%s", strings.Join(platforms.Billed(), "|"))
	}
	opts.Matched, _ = strconv.ParseBool(get("items"))
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return opts, errorf(http.StatusBadRequest, "limit must be a positive number, not %q", s)
		}
		opts.Limit = n
	}
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"from", &opts.From}, {"to", &opts.To}} {
		if s := get(p.name); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return opts, errorf(http.StatusBadRequest, "%s must be an RFC 3339 time (2026-10-03T00:00:00+08:00), not %q", p.name, s)
			}
			*p.t = t
		}
	}
	if opts.From.IsZero() != opts.To.IsZero() || !opts.From.IsZero() && !opts.From.Before(opts.To) {
		return opts, errorf(http.StatusBadRequest, "from and to go together, from before to")
	}
	if opts.To.Sub(opts.From) > maxPeriod {
		return opts, errorf(http.StatusBadRequest, "from and to are more than %d days apart: order state lives no longer", int(maxPeriod.Hours()/24))
	}
	return opts, nil
}
