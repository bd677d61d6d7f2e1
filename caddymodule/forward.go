package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/gate"
)

// backendCeiling bounds a forwarded request once the platform's connection
// no longer does.
const backendCeiling = gate.BackendCeiling

// keepAfter: a claim still at the backend this long journals its
// notification (the gate's hold).
const keepAfter = gate.KeepAfter

// ceiling is backendCeiling, or a test's.
func (h *Handler) ceiling() time.Duration {
	if h.testCeiling > 0 {
		return h.testCeiling
	}
	return backendCeiling
}

// forward sends the winning copy to the next handler through the gate,
// which holds the claim meanwhile and settles it by what the backend did
// (gate.Forward). The answer is passed through to the platform as it
// comes, and a copy kept to remember.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, c gate.Claim) gate.Outcome {
	tw := newTeeWriter(w, int(h.MaxAnswer))
	defer tw.release()
	return h.gate.Forward(r.Context(), c, h.notification(r, c), func(ctx context.Context, start time.Time) gate.Answer {
		sent := &sendTrace{}
		err := next.ServeHTTP(tw, r.WithContext(httptrace.WithClientTrace(ctx, sent.clientTrace())))
		var body []byte
		if !tw.overflow {
			body = tw.buf.Bytes()
		}
		kind := classify(backendResult{
			err: err, attempted: sent.attempted.Load(), written: sent.written.Load(),
			answered: tw.wroteHeader, success: err == nil && h.success.judge(r.Method, tw.statusCode(), tw.header, body),
		})
		a := gate.Answer{Kind: kind.gate(), Status: tw.statusCode(), Header: tw.header, Body: body, BodyCached: !tw.overflow,
			Attempt: attemptOf(r, kind, start, tw, body, err), Err: err}
		if kind == backendFailed {
			a.Hint = h.success.hint(r.Method, tw.statusCode(), tw.header, body)
		}
		return a
	})
}

// backendKind is what became of a forwarded request.
type backendKind int

const (
	// backendAnswered: the backend answered success by the platform's rule.
	backendAnswered backendKind = iota + 1
	// backendFailed: the backend answered, not a success.
	backendFailed
	// backendUnreachable: the request never reached the backend.
	backendUnreachable
	// backendAmbiguous: the request may have reached the backend, and no
	// whole answer came back.
	backendAmbiguous
)

func (k backendKind) outcome() outcome { return outcome(k.gate().Label()) }

// attemptOutcome is k as the journal records it.
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

// gate is k as the gate settles it.
func (k backendKind) gate() gate.Kind {
	switch k {
	case backendAnswered:
		return gate.BackendAnswered
	case backendFailed:
		return gate.BackendRefused
	case backendUnreachable:
		return gate.BackendNotReached
	}
	return gate.BackendUnknown
}

// backendResult is what forward saw of the next handler's work.
type backendResult struct {
	err error // what the next handler returned
	// attempted: the HTTP transport took a connection for the request;
	// written: it wrote the request on one. Both stay false when the next
	// handler is not an HTTP proxy.
	attempted, written bool
	answered           bool // a response header reached the client
	success            bool // the answer is a success by the platform's rule
}

// classify is the one place that decides whether a forwarded request ran,
// failed, never left, or may have run: a pure function of what was seen.
func classify(b backendResult) backendKind {
	if b.err == nil {
		if b.success {
			return backendAnswered
		}
		return backendFailed
	}
	if b.answered || b.written {
		return backendAmbiguous
	}
	var de reverseproxy.DialError
	var he caddyhttp.HandlerError
	switch {
	case errors.As(b.err, &de):
		return backendUnreachable
	case b.attempted:
		// A connection was taken but nothing was written on it.
		return backendUnreachable
	case errors.As(b.err, &he) && he.StatusCode == http.StatusServiceUnavailable:
		// reverse_proxy's "no upstreams available": nothing was sent.
		return backendUnreachable
	}
	return backendAmbiguous
}

// sendTrace follows the forwarded request through the HTTP transport, and
// refuses a re-send: Go's transport silently re-sends a request it deems
// replayable (GET, or a bodiless request with an Idempotency-Key header)
// when a kept-alive connection breaks before the answer, and Caddy's own
// load-balancing retries re-send GETs. Once the request has been written,
// any further connection for it is closed before a byte goes out, so the
// backend never runs twice for one forward: the broken attempt is
// ambiguous instead.
type sendTrace struct {
	attempted, written atomic.Bool
	refused            atomic.Int32
}

func (s *sendTrace) clientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if s.written.Load() {
				s.refused.Add(1)
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
}

// claimTrouble logs and counts a claim that could not be settled. A lost
// claim (ErrNotOwner) means another request may have run the backend too.
func (h *Handler) claimTrouble(key, op string, err error) {
	if errors.Is(err, cache.ErrNotOwner) {
		h.metrics.LostClaim(context.Background(), h.route(), op)
		h.emit("idempotency.lost_claim", key, 0)
		h.logger.Error("lost the claim on an idempotency key while its request was at the backend",
			zap.String("op", op), zap.String("key", h.logKey(key)), zap.Error(err))
		return
	}
	h.metrics.StoreError(context.Background(), h.route(), op)
	h.logger.Error("store failed to settle a claim; it expires after lock_ttl",
		zap.String("op", op), zap.String("key", h.logKey(key)), zap.Error(err))
}
