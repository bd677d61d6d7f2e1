package caddymodule

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/caddymodule/redeliver"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/journal"
	"github.com/idemgate/idemgate/store"
)

// The journal (package journal) as the handler attaches it: the forward
// of a won claim hands the gate the notification to keep with the claim
// (the claim's body and merchant references, gate.Claim), and a failed
// forward's record is read back for its events.
//
// Search (store.Searcher) rides the journal: a key is filed under the
// merchant's own references its notification signed
// (keying.Notification.MerchantRefs: out_trade_no, refund numbers, Stripe
// and PayPal ids), handed over by the claim (gate.Claim.MerchantRefs) and
// kept with the notification, so support finds an order as the customer
// names it.
//
// A failed forward's record is read back for its events
// (journal.ReadFailed, journal.Failed.Emit).

// notification is the copy claimed by c on route reg as the journal
// keeps it (journal.Cut at journal_body): nil when journal_body is off.
func notification(r *http.Request, c gate.Claim, journalBody int64, reg *app.Route) *store.Notification {
	if journalBody < 0 {
		return nil
	}
	return journal.Cut(received(r, c, reg), journalBody)
}

// received is the copy claimed by c on route reg as received, the whole
// body included (deliver async sends it).
func received(r *http.Request, c gate.Claim, reg *app.Route) *store.Notification {
	n := journal.Received(r, c.Body)
	n.MerchantRefs = c.MerchantRefs
	if reg != nil {
		n.Route = reg.Name
	}
	// The URI before the route's rewrites: a redelivery that must find
	// the route through the site's routing sends that one.
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.RequestURI != "" && orig.RequestURI != n.URI {
		n.OrigURI = orig.RequestURI
	}
	return n
}

// attemptOf is what the journal keeps of one forward.
func attemptOf(r *http.Request, kind gate.Kind, start time.Time, tw *teeWriter, body []byte, err error) *store.Attempt {
	res := journal.Result{Outcome: kind.AttemptOutcome(), Start: start, Duration: time.Since(start), Body: body, Err: err}
	if tw.wroteHeader {
		res.Status = tw.status
	}
	if m := redeliver.MarkOf(r.Context()); m != nil {
		res.Resigned = m.Resigned
	}
	return journal.Attempt(res)
}

// retryWindow is how long the platform of this route keeps retrying a
// notification: past it, a failed key is dead (journal.RetryWindow).
func (h *Handler) retryWindow() time.Duration {
	if h.async() {
		return journal.RetryWindow(h.dlv.giveUp, 0, nil, 0)
	}
	if h.platform == nil {
		return 0
	}
	// Dead only once the last retry could have come (retries.go).
	return journal.RetryWindow(0, h.platform.RetryWindow(), h.preset().Schedule, windowSlack())
}

// journalBodyArg parses `journal_body <size> | off`.
func journalBodyArg(d *caddyfile.Dispenser, dst *int64) error {
	if d.CountRemainingArgs() == 1 && d.NextArg() {
		if d.Val() == "off" {
			*dst = -1
			return nil
		}
		d.Prev()
	}
	return cfparse.SizeArg(d, dst)
}
