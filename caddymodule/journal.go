package caddymodule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/internal/cfparse"
)

// The journal (cache.Journal): what the forward of a winning copy adds to
// its key's record when it settles the claim.

// deliveryCredentials are the caller's credentials that an async delivery
// still owes the backend (a backend behind Basic auth or a token).
var deliveryCredentials = []string{"Authorization", "Cookie"}

// journalHeadersDropped are never kept: credentials of the caller, not
// part of the notification (the proxy's own too, which was for the gateway).
var journalHeadersDropped = append(slices.Clone(deliveryCredentials), "Proxy-Authorization")

// credentialsOf are h's deliveryCredentials, nil when it has none.
func credentialsOf(h http.Header) http.Header {
	var out http.Header
	for _, name := range deliveryCredentials {
		if v := h.Values(name); len(v) > 0 {
			if out == nil {
				out = http.Header{}
			}
			out[name] = slices.Clone(v)
		}
	}
	return out
}

// notification is the request as received, for the journal: nil when
// journal_body is off.
func (h *Handler) notification(r *http.Request) *cache.Notification {
	if h.JournalBody < 0 {
		return nil
	}
	return h.journaled(h.receivedNotification(r))
}

// journaled is n as the journal keeps it: the body cut at journal_body,
// nil when journal_body is off.
func (h *Handler) journaled(n *cache.Notification) *cache.Notification {
	if n == nil || h.JournalBody < 0 {
		return nil
	}
	if int64(len(n.Body)) > h.JournalBody {
		c := *n
		c.Body = n.Body[:h.JournalBody]
		return &c
	}
	return n
}

// receivedNotification is the request as received, the whole body
// included (deliver async sends it). The body was read whole by parse
// (bounded by max_body) and put back as an in-memory reader; it is read
// again here and put back once more, so only forwarded copies pay for the
// copy.
func (h *Handler) receivedNotification(r *http.Request) *cache.Notification {
	var body []byte
	if rb, ok := r.Body.(*readBodyCloser); ok {
		body = rb.body // as read, whatever the backend has read of it since
	} else if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, h.MaxBody))
		if err != nil {
			return nil
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	hdr := r.Header.Clone()
	for _, name := range journalHeadersDropped {
		hdr.Del(name)
	}
	n := &cache.Notification{
		Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: hdr,
		BodySize: int64(len(body)), Body: body, TLS: r.TLS != nil,
	}
	if n.URI == "" {
		n.URI = r.URL.RequestURI()
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		n.Addr = a.String()
	}
	if h.reg != nil {
		n.Route = h.reg.Name
	}
	n.Remote = r.RemoteAddr
	n.MerchantRefs = merchantRefsOf(r)
	// The URI before the route's rewrites: a redelivery that must find
	// the route through the site's routing sends that one.
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.RequestURI != "" && orig.RequestURI != n.URI {
		n.OrigURI = orig.RequestURI
	}
	return n
}

// attemptOf is what the journal keeps of one forward.
func attemptOf(r *http.Request, kind backendKind, start time.Time, tw *teeWriter, body []byte, err error) *cache.Attempt {
	a := &cache.Attempt{Start: start, Duration: time.Since(start), Outcome: kind.attemptOutcome()}
	if tw.wroteHeader {
		a.Status = tw.status
	}
	if kind == backendFailed && len(body) > 0 {
		a.Body = bytes.Clone(body[:min(len(body), cache.MaxAttemptBody)])
	}
	a.Error = attemptError(kind, a.Status, err, a.Duration)
	if rd := redeliveryOf(r.Context()); rd != nil {
		a.Resigned = rd.resigned
	}
	return a
}

// attemptError is an attempt's failure in words, as an operator reads it:
// "status 500", "connection refused", "timeout after 30s"; "" for success.
func attemptError(kind backendKind, status int, err error, took time.Duration) string {
	switch {
	case kind == backendAnswered:
		return ""
	case err == nil && status != 0:
		return fmt.Sprintf("status %d: not a success by the platform's rule", status)
	case err == nil:
		return ""
	case errors.Is(err, syscall.ECONNREFUSED), strings.Contains(err.Error(), "connection refused"):
		// reverse_proxy's DialError does not unwrap: its text says it.
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), strings.Contains(err.Error(), "connection reset"):
		return "connection reset"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Sprintf("timeout after %s", took.Round(time.Millisecond))
	}
	if status != 0 {
		return fmt.Sprintf("status %d: %s", status, rootError(err))
	}
	return rootError(err)
}

// rootError is the innermost message of err's chain, where the cause is.
func rootError(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

func (k backendKind) attemptOutcome() string {
	switch k {
	case backendAnswered:
		return cache.AttemptAnswered
	case backendFailed:
		return cache.AttemptFailed
	case backendUnreachable:
		return cache.AttemptUnreachable
	}
	return cache.AttemptAmbiguous
}

// retryWindow is how long the platform of this route keeps retrying a
// notification: past it, a failed key is dead.
func (h *Handler) retryWindow() time.Duration {
	if h.async() {
		// The platform was acknowledged and retries nothing: the
		// gateway's own give_up is the window.
		return h.dlv.giveUp
	}
	if h.platform == nil {
		return 0
	}
	w := h.platform.RetryWindow()
	if s := h.preset().Schedule; s != nil {
		// Dead only once the last retry could have come (retries.go).
		w = max(w, s.Total()+windowSlack())
	}
	return w
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

// journalState is what the events of a failed forward tell besides the
// status: how many attempts the key has had, and whether it is dead.
type journalState struct {
	attempts int64
	dead     bool
	rec      *cache.Record
}

// failedJournal reads a key just released after a failure, for its
// events: one read on the failure path only (never on a replay or a
// successful first copy). Zero when the store cannot say.
func (h *Handler) failedJournal(key string) journalState {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(h.StoreTimeout))
	defer cancel()
	rec, err := h.store.Lookup(ctx, key)
	if err != nil {
		return journalState{}
	}
	return journalState{attempts: rec.AttemptCount, dead: rec.StateAt(h.app.Now(), h.retryWindow()) == cache.StateDead, rec: rec}
}

// emitFailure sends idempotency.failed, and idempotency.dead when the
// platform's retry window has passed: nobody will send it again.
func (h *Handler) emitFailure(d *result) {
	h.emitAttempts("idempotency.failed", d.key, d.status, d.journal.attempts)
	if rec := d.journal.rec; rec != nil && !d.journal.dead {
		// The copy that just failed may have been the platform's last.
		if s := h.preset().Schedule; s != nil && !h.async() {
			h.lastRetryDue(rec, s, h.app.Now())
		}
	}
	if d.journal.dead {
		h.emitAttempts("idempotency.dead", d.key, d.status, d.journal.attempts)
	}
}
