package console

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/reconcile"
)

// The reconciliation page: GET shows the upload form; POST reconciles the
// uploaded bill (reconcile.Run, in process) and shows the report. The
// POST passes the console's cross-site checks, as its other actions do:
// the browser's Sec-Fetch-Site and Origin, and the page's token — in a
// multipart form the token must be the first field, before the bill
// (which is read as it arrives, never held whole); a bill posted as the
// raw body (curl --data-binary @bill.csv …/reconcile?platform=…) carries
// it in the Idemgate-Console-Token header, which no other site can set.

// consoleTokenHeader carries the console's token with a raw-body bill.
const consoleTokenHeader = "Idemgate-Console-Token"

// reconcileView is the reconciliation page: the form's values and, after
// a POST, the report.
type reconcileView struct {
	Platforms []string
	Stores    []string
	Store     string
	Platform  string
	Scope     string
	Merchant  string
	Matched   bool
	Report    *reconcile.Report
	Took      time.Duration
}

// OrderPages: the report's orders are the gateway's (Alipay's and WeChat
// Pay's), each with its page; Stripe's and PayPal's are the bill's objects.
func (r *reconcileView) OrderPages() bool {
	if r.Report == nil {
		return false
	}
	p := platforms.Lookup(r.Report.Platform)
	return p != nil && !p.OwnEvents
}

// Categories are the report's, in the page's order.
func (r *reconcileView) Categories() []reconcileCategory {
	if r.Report == nil {
		return nil
	}
	rep := r.Report
	return []reconcileCategory{
		{"settled_never_run", "Settled, never run", "The platform settled these; the backend never ran them: redeliver, or refund.", &rep.SettledNeverRun},
		{"run_not_settled", "Run, not settled", "The backend ran these payments and refunds; the bill does not show them.", &rep.RunNotSettled},
		{"amount_differs", "Amount differs", "The bill's amount is not the one the notification signed; the totals are the differences, bill minus notified.", &rep.AmountDiffers},
		{"matched", "Matched", "", &rep.Matched},
		{"pending_next_bill", "Pending the next bill", pendingHelp(rep), &rep.PendingNextBill},
	}
}

// pendingHelp says why items wait for the next bill, and what becomes of
// them.
func pendingHelp(rep *reconcile.Report) string {
	if r := rep.PendingNextBill.Reason; r != "" {
		return "These " + r + "."
	}
	return "What ran in the bill day's last minutes and the bill does not show waits for the next day's bill, which may date it after midnight."
}

type reconcileCategory struct {
	ID, Title, Help string
	*reconcile.Category
}

// AmountsText is the category's payments' totals as text, currencies
// sorted.
func (c reconcileCategory) AmountsText() string { return amountsText(c.Amounts) }

// RefundAmountsText is its refunds' totals, apart from the payments'.
func (c reconcileCategory) RefundAmountsText() string { return amountsText(c.RefundAmounts) }

// Gaps: the category's totals are differences, bill minus notified.
func (c reconcileCategory) Gaps() bool { return c.ID == "amount_differs" }

func amountsText(m map[string]string) string {
	var out []string
	for cur, v := range m {
		out = append(out, v+" "+cur)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func (c *Console) reconcileForm(r *http.Request, v *consolePage) {
	q := r.URL.Query()
	v.Page, v.Title = "reconcile", "Reconcile a bill"
	v.Reconcile = &reconcileView{Platforms: platforms.Billed(), Stores: c.data.storeIDs(), Store: q.Get("store"),
		Platform: q.Get("platform"), Scope: q.Get("scope"), Merchant: q.Get("merchant")}
}

// reconcile serves the POST: checks, options, the bill, the report.
func (c *Console) reconcile(w http.ResponseWriter, r *http.Request, v *consolePage) error {
	c.reconcileForm(r, v)
	rv := v.Reconcile
	if err := checkOrigin(r); err != nil {
		return c.refused(w, r, v, err)
	}
	r.Body = http.MaxBytesReader(w, r.Body, reconcile.MaxBillSize)
	// The bill is read while it is reconciled: past the server's read
	// timeout, if any, and the page's own bound.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(reconcile.Timeout))
	ctx, cancel := context.WithTimeout(r.Context(), reconcile.Timeout)
	defer cancel()

	var billBody io.Reader
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "multipart/form-data" {
		mr, err := r.MultipartReader()
		if err != nil || params["boundary"] == "" {
			return c.render(w, http.StatusBadRequest, v.fail("unreadable form"))
		}
		tokenSeen := false
		for billBody == nil {
			part, err := mr.NextPart()
			if err != nil {
				return c.render(w, http.StatusBadRequest, v.fail("the form has no bill (choose the bill's file)"))
			}
			name := part.FormName()
			if name == "bill" {
				if !tokenSeen {
					return c.refused(w, r, v, errors.New("the form's token must come before the bill: reload the console's page and try again"))
				}
				billBody = part
				break
			}
			val, err := io.ReadAll(io.LimitReader(part, 1024))
			if err != nil {
				return c.render(w, http.StatusBadRequest, v.fail("unreadable form"))
			}
			s := strings.TrimSpace(string(val))
			switch name {
			case "csrf":
				if !tokenOK(s) {
					return c.refused(w, r, v, errStaleToken)
				}
				tokenSeen = true
			case "store":
				rv.Store = s
			case "platform":
				rv.Platform = s
			case "scope":
				rv.Scope = s
			case "merchant":
				rv.Merchant = s
			case "items":
				rv.Matched = s != ""
			}
		}
	} else {
		if !tokenOK(r.Header.Get(consoleTokenHeader)) {
			return c.refused(w, r, v, errStaleToken)
		}
		rv.Matched, _ = strconv.ParseBool(r.URL.Query().Get("items"))
		billBody = r.Body
	}
	opts, err := reconcile.ParseQuery(map[string][]string{"platform": {rv.Platform}, "scope": {rv.Scope}, "merchant": {rv.Merchant}})
	if err != nil {
		return c.render(w, http.StatusBadRequest, v.fail(err.Error()))
	}
	opts.Matched = rv.Matched
	ps, err := admin.PickStore(c.app, rv.Store)
	if err != nil {
		return c.render(w, errStatus(consoleErr(err)), v.fail(consoleErr(err).Error()))
	}
	start := time.Now()
	rep, err := c.service().Reconcile(ctx, ps, opts, billBody, r.RemoteAddr)
	if err != nil {
		status := http.StatusServiceUnavailable
		var re *reconcile.Error
		if errors.As(err, &re) {
			status = re.Status
		}
		return c.render(w, status, v.fail(err.Error()))
	}
	rv.Report, rv.Took, rv.Store = rep, time.Since(start).Round(time.Millisecond), ps.ID
	return c.render(w, http.StatusOK, v)
}

// refused answers a POST that failed the cross-site checks.
func (c *Console) refused(w http.ResponseWriter, r *http.Request, v *consolePage, err error) error {
	if c.logger != nil {
		c.logger.Warn("console action refused", zap.Error(err), zap.String("remote", r.RemoteAddr))
	}
	return c.render(w, http.StatusForbidden, v.fail(err.Error()))
}
