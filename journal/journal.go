// Package journal is what the gateway keeps of a notification it forwards
// (store.Journal): the request as the platform sent it, without the
// caller's credentials and cut at journal_body, and a record of each
// attempt at the backend in an operator's words. It knows no Caddy: the
// idempotency handler captures the notification from a won claim
// (gate.Claim's body and merchant references) and hands it to the gate's
// Forward, which settles it with the claim; the async delivery queues the
// whole notification and journals it the same way. Redelivery (package
// caddymodule/redeliver) sends a journaled notification back in.
package journal

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Credentials are the caller's credentials that an async delivery still
// owes the backend (a backend behind Basic auth or a token).
var Credentials = []string{"Authorization", "Cookie"}

// dropped are never kept: credentials of the caller, not part of the
// notification (the proxy's own too, which was for the gateway).
var dropped = append(slices.Clone(Credentials), "Proxy-Authorization")

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
	hdr := r.Header.Clone()
	for _, name := range dropped {
		hdr.Del(name)
	}
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
