// Package journal is what the gateway keeps of a notification it forwards
// (store.Journal): the request as the platform sent it, without the
// caller's credentials and cut at journal_body, and a record of each
// attempt at the backend in an operator's words. It knows no Caddy: the
// idempotency handler captures the notification from a won claim
// (gate.Claim's body and merchant references) and hands it to the gate's
// Forward, which settles it with the claim; the async delivery queues the
// whole notification and journals it the same way. Redelivery (package
// caddymodule/redeliver) sends a journaled notification back in. A
// failed forward's key is read back for its events (ReadFailed,
// Failed.Emit), dead past the route's retry window (RetryWindow).
package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/internal/headers"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// Credentials are the caller's credentials that an async delivery still
// owes the backend (a backend behind Basic auth or a token).
var Credentials = []string{"Authorization", "Cookie"}

// dropped are never kept: credentials of the caller, not part of the
// notification (the proxy's own too, which was for the gateway).
var dropped = append(slices.Clone(Credentials), "Proxy-Authorization")

// withoutDropped is a copy of h without the dropped headers, made in one
// pass (a clone, then a Del per name, canonicalized each time, was 2% of
// a first copy's handler CPU).
func withoutDropped(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	return headers.CloneWithout(h, isDropped)
}

func isDropped(name string) bool { return slices.Contains(dropped, name) }

// CredentialsOf are h's Credentials, nil when it has none.
func CredentialsOf(h http.Header) http.Header {
	var out http.Header
	for _, name := range Credentials {
		if v := h.Values(name); len(v) > 0 {
			if out == nil {
				out = http.Header{}
			}
			out[name] = slices.Clone(v)
		}
	}
	return out
}

// Received is r as received with its whole body (read by the gate,
// bounded by max_body), for the journal and an async delivery: method,
// URI, host, headers without credentials, addresses. The caller adds what
// the request does not say itself (Route, MerchantRefs, OrigURI).
func Received(r *http.Request, body []byte) *store.Notification {
	hdr := withoutDropped(r.Header)
	n := &store.Notification{
		Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: hdr,
		BodySize: int64(len(body)), Body: body, TLS: r.TLS != nil, Remote: r.RemoteAddr,
	}
	if n.URI == "" {
		n.URI = r.URL.RequestURI()
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		n.Addr = a.String()
	}
	return n
}

// Cut is n as the journal keeps it: its body cut at limit bytes
// (journal_body), nil when limit is negative (off). n itself is left
// whole (an async delivery sends it).
func Cut(n *store.Notification, limit int64) *store.Notification {
	if n == nil || limit < 0 {
		return nil
	}
	if int64(len(n.Body)) > limit {
		c := *n
		c.Body = n.Body[:limit]
		return &c
	}
	return n
}

// Result is one attempt at the backend as the adapter saw it.
type Result struct {
	Outcome  string // store.AttemptAnswered, …
	Start    time.Time
	Duration time.Duration
	Status   int    // the answer's status; 0 when none came
	Body     []byte // the answer's body, kept for a failed one
	Err      error  // what sending it returned
	Resigned bool   // sent with a fresh signature (a redelivery)
}

// Attempt is what the journal keeps of res.
func Attempt(res Result) *store.Attempt {
	a := &store.Attempt{Start: res.Start, Duration: res.Duration, Outcome: res.Outcome, Status: res.Status, Resigned: res.Resigned}
	if res.Outcome == store.AttemptFailed && len(res.Body) > 0 {
		a.Body = bytes.Clone(res.Body[:min(len(res.Body), store.MaxAttemptBody)])
	}
	a.Error = Error(res.Outcome, res.Status, res.Err, res.Duration)
	return a
}

// Error is an attempt's failure in words, as an operator reads it:
// "status 500: …", "connection refused", "timeout after 30s"; "" for
// success.
func Error(outcome string, status int, err error, took time.Duration) string {
	switch {
	case outcome == store.AttemptAnswered:
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
		return fmt.Sprintf("status %d: %s", status, RootError(err))
	}
	return RootError(err)
}

// RootError is the innermost message of err's chain, where the cause is.
func RootError(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

// A forward that failed (the backend refused, or could not be reached)
// frees its key for the platform's next retry. Its events say how many
// attempts the key has had and, once the platform's retry window has
// passed, that nobody will send it again: the key is dead.

// RetryWindow is how long a route's notification may still come again:
// past it, a failed key is dead. An async route's platform was
// acknowledged and retries nothing: the gateway's own give_up (giveUp >
// 0) is the window. Otherwise it is the platform's window, stretched by
// its retry schedule (nil: none) to the last retry plus slack.
func RetryWindow(giveUp, platform time.Duration, sched keying.Schedule, slack time.Duration) time.Duration {
	if giveUp > 0 {
		return giveUp
	}
	if sched != nil {
		// Dead only once the last retry could have come.
		return max(platform, sched.Total()+slack)
	}
	return platform
}

// Failed is what the events of a failed forward tell besides the status:
// how many attempts the key has had, whether it is dead, and its record.
// Zero when the store could not say.
type Failed struct {
	Attempts int64
	Dead     bool
	Rec      *store.Record
}

// ReadFailed reads a key just released after a failure from st, for its
// events: one read on the failure path only (never on a replay or a
// successful first copy), dead by now's clock past window.
func ReadFailed(st store.Store, key string, timeout time.Duration, now func() time.Time, window time.Duration) Failed {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec, err := st.Lookup(ctx, key)
	if err != nil {
		return Failed{}
	}
	return Failed{Attempts: rec.AttemptCount, Dead: rec.StateAt(now(), window) == store.StateDead, Rec: rec}
}

// Emitter is where the events go (the route's observer).
type Emitter interface {
	Emit(event, key string, status int, attempts int64)
}

// Emit sends idempotency.failed for key, and idempotency.dead when the
// platform's retry window has passed: nobody will send it again. A key
// still alive goes to lastCopy (nil: none), the copy that just failed
// having perhaps been the platform's last.
func (f Failed) Emit(to Emitter, key string, status int, lastCopy func(*store.Record)) {
	to.Emit("idempotency.failed", key, status, f.Attempts)
	if f.Rec != nil && !f.Dead && lastCopy != nil {
		lastCopy(f.Rec)
	}
	if f.Dead {
		to.Emit("idempotency.dead", key, status, f.Attempts)
	}
}
