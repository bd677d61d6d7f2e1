package gate

import (
	"context"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/idemgate/idemgate/store"
)

// Sending a claimed notification to the backend, as the synchronous
// forward (through Caddy's next handler) and the async delivery (its own
// client) both do: the trace that keeps a transport from sending it
// twice, and what one attempt came to (Classify), which decides how its
// claim settles.

// AttemptOutcome is k as the journal records an attempt
// (store.Attempt.Outcome).
func (k Kind) AttemptOutcome() string {
	switch k {
	case BackendAnswered:
		return store.AttemptAnswered
	case BackendRefused:
		return store.AttemptFailed
	case BackendNotReached:
		return store.AttemptUnreachable
	}
	return store.AttemptAmbiguous
}

// Sent is what the sender saw of one attempt at the backend: Classify's
// input.
type Sent struct {
	// Err is what sending the request, or reading its answer, returned.
	Err error
	// Answered: an answer began to come back.
	Answered bool
	// Success: the answer is a success by the route's rule.
	Success bool
	// Attempted and Written are the transport's (SendTrace): it took a
	// connection for the request; it wrote the request on one. Both stay
	// false when no traced transport sent it.
	Attempted, Written bool
	// Unsent: the sender knows, where the trace cannot tell, that a
	// request not written never went out: a dial error or no backend to
	// send to, or a send whose every transport is traced.
	Unsent bool
}

// Classify is the one place that decides whether an attempt ran, failed,
// never left, or may have run: a pure function of what was seen. Only a
// request proven unsent is unreachable; whatever may have reached the
// backend without a whole answer is ambiguous.
func Classify(s Sent) Kind {
	switch {
	case s.Err == nil && s.Success:
		return BackendAnswered
	case s.Err == nil:
		return BackendRefused
	case s.Answered || s.Written:
		// Part or all of the request may have reached the backend.
		return BackendUnknown
	case s.Unsent, s.Attempted:
		// No connection, or one taken (or refused) before a byte went
		// out.
		return BackendNotReached
	}
	return BackendUnknown
}

// SendTrace follows a request through the HTTP transport, and refuses a
// re-send: Go's transport silently re-sends a request it deems replayable
// (GET, or a bodiless request with an Idempotency-Key header) when a
// kept-alive connection breaks before the answer, and Caddy's own
// load-balancing retries re-send GETs. Once the request has been written,
// any further connection for it is closed before a byte goes out, so the
// backend never runs twice for one attempt: the broken attempt is
// ambiguous instead. The zero value is ready.
type SendTrace struct {
	attempted, written atomic.Bool
	trace              httptrace.ClientTrace // Context's: one allocation with the SendTrace
}

// Context is ctx with the trace on it, for the request that sends; once
// per SendTrace.
func (s *SendTrace) Context(ctx context.Context) context.Context {
	s.trace = httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if s.written.Load() {
				_ = info.Conn.Close()
				return
			}
			s.attempted.Store(true)
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			// Even a failed write may have delivered part or all of the
			// request.
			s.written.Store(true)
		},
	}
	return httptrace.WithClientTrace(ctx, &s.trace)
}

// Attempted: the transport took a connection for the request.
func (s *SendTrace) Attempted() bool { return s.attempted.Load() }

// Written: the transport wrote the request on a connection (or tried to).
func (s *SendTrace) Written() bool { return s.written.Load() }
