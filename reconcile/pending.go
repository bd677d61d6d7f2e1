package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"path"
	"slices"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Pending the next bill. A payment at 23:59:59 may be dated by the bill
// on the next day: the notification's time (Alipay gmt_payment, WeChat Pay
// success_time, Stripe's event created) and the bill's (完成时间, 交易时间,
// the balance transaction's created) are two clocks, and an event whose
// notification names no time is filed by when it ran, after the
// platform's retries. Called "run, not settled" one day, it would match
// the next: so what ran in the last pendingWindow of the period and the
// bill does not show is held, as finance keeps a holding pool for
// cross-day items, in pending_next_bill — not a difference yet.
//
// The next day's reconciliation resolves them: those its bill shows match
// as any row does; those it does not are run, not settled ("pending since
// the bill that ended …"). To tell them from the previous day's tail that
// its bill did settle, the holding list is kept in Env.Pending (under
// Caddy, its storage: the file system by default, shared by a cluster that
// shares its storage), one small file per store, scope, merchant and bill
// end, and read by the
// reconciliation of the bill that starts there. Reconciling a bill again
// replaces its list.

// pendingWindow: 15 minutes before the bill's end, in the bill's own clock
// (Beijing for Alipay and WeChat Pay, whose day ends at 24:00 CST; UTC for
// Stripe's days; PayPal's section clock). It holds the clocks' skew (a
// second or two: 完成时间 against gmt_payment) and an event filed by when
// it ran after the platforms' first retries (Alipay 4m + 10m; WeChat Pay
// 15s + 15s + 30s + 3m + 10m), while a day's other events stay judged at
// once.
const pendingWindow = 15 * time.Minute

// maxPendingKeys bounds one holding list.
const maxPendingKeys = 200000

type pendingState struct {
	// carried is, per merchant, the previous bill's holding list; a
	// merchant without one was not reconciled here.
	carried map[string]map[string]bool
	held    map[string][]string // this bill's, per merchant
	// cleared: carried events this bill settles; missing: carried events
	// it does not either; unjudged: events of the previous bill's last
	// minutes that no list carries and this bill does not show.
	cleared, missing, unjudged int
}

// pendingFile is a holding list as stored.
type pendingFile struct {
	BillEnd time.Time `json:"bill_end"`
	Keys    []string  `json:"keys"`
}

// pendingName is where the holding list of the bill ending at end is.
func (rc *reconciler) pendingName(merchant string, end time.Time) string {
	if merchant == "" {
		merchant = "_"
	}
	return path.Join("idemgate", "reconcile", "pending", url.PathEscape(rc.env.StoreID), url.PathEscape(rc.opts.Scope),
		url.PathEscape(merchant), end.UTC().Format("20060102T150405Z")+".json")
}

// loadPending reads the holding lists of the bill that ended where this
// one starts, and counts what this bill settled of them.
func (rc *reconciler) loadPending(ctx context.Context) {
	rc.pending.carried = map[string]map[string]bool{}
	if rc.env.Pending == nil {
		return
	}
	for _, m := range rc.pendingMerchants() {
		b, err := rc.env.Pending.Load(ctx, rc.pendingName(m, rc.rep.Period.From))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				rc.note("the previous bill's pending list could not be read: " + err.Error())
			}
			continue
		}
		var f pendingFile
		if err := json.Unmarshal(b, &f); err != nil {
			rc.note("the previous bill's pending list does not read: " + err.Error())
			continue
		}
		set := make(map[string]bool, len(f.Keys))
		for _, k := range f.Keys {
			set[k] = true
			if _, hit := slices.BinarySearch(rc.matched, rc.hash(k)); hit {
				rc.pending.cleared++
			}
		}
		rc.pending.carried[m] = set
	}
}

// pendingMerchants are the merchants a holding list is kept for: those
// whose day index is walked, or where a provider's keys hold its
// sub-merchants' orders (WeChat Pay v2), the bill's, each its own list.
func (rc *reconciler) pendingMerchants() []string {
	if len(rc.under) == 0 {
		return rc.walkMerchants()
	}
	return slices.Sorted(maps.Keys(rc.merchants))
}

// stillMissing: an event of the previous bill's last minutes that this
// bill does not show — is it one that bill (merchant m's) left pending?
func (rc *reconciler) stillMissing(m string, ev store.OrderEvent) bool {
	set, ok := rc.pending.carried[m]
	switch {
	case !ok:
		rc.pending.unjudged++
		return false
	case set[ev.Key]:
		rc.pending.missing++
		return true
	}
	return false
}

// holdPending files an event of the period's last minutes that the bill
// does not show.
func (rc *reconciler) holdPending(m string, ev store.OrderEvent, it Item) {
	if rc.pending.held == nil {
		rc.pending.held = map[string][]string{}
	}
	if len(rc.pending.held[m]) < maxPendingKeys {
		rc.pending.held[m] = append(rc.pending.held[m], ev.Key)
	}
	it.Note = "ran " + ev.Time().In(rc.zone()).Format("15:04:05") + ", in the bill's last minutes: the next day's bill may settle it"
	rc.rep.PendingNextBill.add(it, ev.Amount, rc.opts.Limit)
}

// savePending stores this bill's holding lists for the next one, and says
// what became of the previous bill's.
func (rc *reconciler) savePending(ctx context.Context) {
	p := rc.rep.Period
	if p == nil {
		return
	}
	zone := rc.zone()
	if c := &rc.rep.PendingNextBill; c.Count > 0 {
		c.Reason = fmt.Sprintf("ran in the last %d minutes before the bill's end (%s) and not in this bill: the next day's bill may date them after midnight. "+
			"Reconciling that bill matches them, or reports them as run, not settled", int(pendingWindow.Minutes()), p.To.In(zone).Format("2006-01-02 15:04 -07:00"))
	}
	if n := rc.pending.cleared + rc.pending.missing; n > 0 {
		rc.note(fmt.Sprintf("%d pending from the bill that ended %s: %d settled in this bill, %d in neither (run, not settled)",
			n, p.From.In(zone).Format("2006-01-02 15:04"), rc.pending.cleared, rc.pending.missing))
	}
	if rc.pending.unjudged > 0 {
		rc.note(fmt.Sprintf("%d events ran in the last %d minutes before %s and this bill does not show them: the bill that ended there was not reconciled here, "+
			"so they are its to judge (reconcile it)", rc.pending.unjudged, int(pendingWindow.Minutes()), p.From.In(zone).Format("2006-01-02 15:04")))
	}
	if rc.env.Pending == nil {
		if rc.rep.PendingNextBill.Count > 0 {
			rc.note("no Caddy storage: the pending items are not carried to the next bill's reconciliation")
		}
		return
	}
	for _, m := range rc.pendingMerchants() {
		b, _ := json.Marshal(pendingFile{BillEnd: p.To, Keys: rc.pending.held[m]})
		if err := rc.env.Pending.Store(ctx, rc.pendingName(m, p.To), b); err != nil {
			rc.note("the pending list could not be stored for the next bill: " + err.Error())
			return
		}
	}
}
