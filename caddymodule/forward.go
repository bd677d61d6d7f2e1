package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/idemgate/idemgate/gate"
)

// backendCeiling bounds a forwarded request once the platform's connection
// no longer does.
const backendCeiling = gate.BackendCeiling

// keepAfter: a claim still at the backend this long journals its
// notification (the gate's hold).
const keepAfter = gate.KeepAfter

// forward sends the winning copy to the next handler through the gate,
// which holds the claim meanwhile and settles it by what the backend did
// (gate.Forward). The answer is passed through to the platform as it
// comes, and a copy kept to remember.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, c gate.Claim) gate.Outcome {
	tw := newTeeWriter(w, int(h.MaxAnswer))
	defer tw.release()
	return h.gate.Forward(r.Context(), c, notification(r, c, h.JournalBody, h.reg), func(ctx context.Context, start time.Time) gate.Answer {
		sent := &tw.sent
		err := next.ServeHTTP(tw, r.WithContext(sent.Context(ctx)))
		var body []byte
		if !tw.overflow {
			body = tw.buf.Bytes()
		}
		kind := classify(gate.Sent{
			Err: err, Attempted: sent.Attempted(), Written: sent.Written(),
			Answered: tw.wroteHeader, Success: err == nil && h.success.judge(r.Method, tw.statusCode(), tw.header, body),
		})
		a := gate.Answer{Kind: kind, Status: tw.statusCode(), Header: tw.header, Body: body, BodyCached: !tw.overflow,
			Attempt: attemptOf(r, kind, start, tw, body, err), Err: err}
		if kind == gate.BackendRefused {
			a.Hint = h.success.hint(r.Method, tw.statusCode(), tw.header, body)
		}
		return a
	})
}

// classify is gate.Classify for what forward saw, with reverse_proxy's
// two errors that prove nothing was sent (the trace cannot tell when the
// next handler never took a connection) marked Unsent.
func classify(s gate.Sent) gate.Kind {
	if s.Err != nil { // errors.As's targets escape: a success pays for none
		var de reverseproxy.DialError
		var he caddyhttp.HandlerError
		switch {
		case errors.As(s.Err, &de):
			s.Unsent = true
		case errors.As(s.Err, &he) && he.StatusCode == http.StatusServiceUnavailable:
			// reverse_proxy's "no upstreams available": nothing was sent.
			s.Unsent = true
		}
	}
	return gate.Classify(s)
}
