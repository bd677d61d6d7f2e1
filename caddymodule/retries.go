package caddymodule

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// The platform's retry budget. A failed key is free: the platform's next
// retry is forwarded. Once its last expected retry has come and gone
// without success, nobody but an operator will make it run, so the event
// idempotency.last_retry (and the alert) says so — before the key reads
// dead, at the end of the retry window. A failed copy that was the last
// expected one fires it at once; a last retry that never comes is noticed
// by a periodic scan of the route's failed keys, bounded per pass.

// retryScanMaxEvery is the longest interval of a sync route's scan of its
// failed keys (withRetryScanEvery), and its default: the window's
// slack counts on it.
const retryScanMaxEvery = time.Minute

// retryScanMax bounds the keys one pass reads (newest first, paged).
const retryScanMax = 5000

// lastRetries remembers the keys whose last_retry was emitted in this
// process, by key and first receipt (a key purged and failed again is a
// new one): handlers of one scope share it, and a reload keeps it, or the
// reload would alert each such key again. So it is not the config's app's
// but pooled, as Caddy pools what outlives a config: every handler holds
// a reference, and a reload's new handlers take theirs before the old
// ones let go. Entries leave once the key's retry window has passed.
type lastRetries struct {
	sent sync.Map // key@firstSeen → time.Time (when the window ends)
}

// Destruct lets the marks go with the last handler; nothing to close.
func (*lastRetries) Destruct() error { return nil }

var lastRetriesPool = caddy.NewUsagePool()

const lastRetriesKey = "last_retry"

// loadLastRetries takes a reference to the process's marks;
// unloadLastRetries drops it.
func loadLastRetries() (*lastRetries, error) {
	v, _, err := lastRetriesPool.LoadOrNew(lastRetriesKey, func() (caddy.Destructor, error) {
		return new(lastRetries), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*lastRetries), nil
}

func unloadLastRetries() error {
	_, err := lastRetriesPool.Delete(lastRetriesKey)
	return err
}

// windowSlack keeps a key failed (not dead) until its last retry could have
// come and been noticed: the schedule's span plus the grace and two scans.
func windowSlack() time.Duration { return keying.RetryGrace + 2*retryScanMaxEvery }

// retryWatch is a route's watch of its platform's last retries: sched
// (nil: the platform has none, or the route is async), the keys already
// told (sent, pooled) and where it tells. Provision sets it up.
type retryWatch struct {
	sent   *lastRetries
	sched  keying.Schedule
	scope  string
	window time.Duration // the route's retry window (Handler.retryWindow)
	// storeTimeout bounds each page of a scan.
	storeTimeout time.Duration
	app          *app.App
	obs          *routeObserver
	logger       *zap.Logger
}

// watch scans the route's failed keys in store every `every` until ctx
// ends.
func (w *retryWatch) watch(ctx context.Context, st store.Store, every time.Duration) {
	if w.sched == nil {
		return
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.scan(ctx, st)
			}
		}
	}()
}

// scan emits last_retry for each failed key whose last expected retry is
// past.
func (w *retryWatch) scan(ctx context.Context, st store.Store) {
	ls, err := store.As[store.Lister](st, "listings")
	if err != nil {
		w.logger.Error("no scan for last retries", zap.Error(err))
		return
	}
	at := w.app.Now()
	lq := store.ListQuery{State: store.StateFailed, Scope: w.scope, Window: w.app.WindowOf, Now: at, Limit: 500}
	for read := 0; read < retryScanMax; {
		lctx, cancel := context.WithTimeout(ctx, w.storeTimeout)
		page, err := ls.List(lctx, lq)
		cancel()
		if err != nil {
			return // the next pass tries again
		}
		for _, rec := range page.Records {
			w.due(rec, at)
		}
		read += len(page.Records)
		if page.Next == "" {
			break
		}
		lq.Cursor = page.Next
	}
	w.sent.sent.Range(func(k, v any) bool {
		if at.After(v.(time.Time)) {
			w.sent.sent.Delete(k)
		}
		return true
	})
}

// lastCopy emits last_retry for rec now if the copy that just failed was
// the platform's last (journal.Failed.Emit).
func (w *retryWatch) lastCopy(rec *store.Record) { w.due(rec, w.app.Now()) }

// due emits last_retry for rec once, if its platform has no retry left
// for it at t.
func (w *retryWatch) due(rec *store.Record, t time.Time) {
	if w.sched == nil || rec.State != store.StateFailed {
		return
	}
	est := w.sched.Estimate(rec.LastSeen, rec.Copies, t)
	if est.Left > 0 {
		return
	}
	id := rec.Key + "@" + strconv.FormatInt(rec.FirstSeen.UnixMilli(), 10)
	if _, seen := w.sent.sent.LoadOrStore(id, rec.FirstSeen.Add(w.window+time.Hour)); seen {
		return
	}
	status := 0
	if n := len(rec.Attempts); n > 0 {
		status = rec.Attempts[n-1].Status
	}
	w.obs.Emit("idempotency.last_retry", rec.Key, status, rec.AttemptCount)
}
