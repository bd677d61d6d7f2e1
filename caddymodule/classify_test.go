package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/idemgate/idemgate/gate"
)

// TestClassify: what became of a forwarded request decides whether its
// claim is completed, released or held; reverse_proxy's errors that
// prove nothing was sent make it unreachable (gate.Classify's table
// holds the rest). No server needed.
func TestClassify(t *testing.T) {
	dial := reverseproxy.NewDialError(errors.New("connection refused"))
	eof := caddyhttp.Error(http.StatusBadGateway, errors.New("EOF"))
	noUpstreams := caddyhttp.Error(http.StatusServiceUnavailable, errors.New("no upstreams available"))
	timeout := caddyhttp.Error(http.StatusGatewayTimeout, errors.New("context deadline exceeded"))
	for _, c := range []struct {
		name string
		in   gate.Sent
		want gate.Kind
	}{
		{"success", gate.Sent{Success: true, Answered: true, Attempted: true, Written: true}, gate.BackendAnswered},
		{"failure answer", gate.Sent{Answered: true, Attempted: true, Written: true}, gate.BackendRefused},
		{"handler wrote nothing, no error, not a success", gate.Sent{}, gate.BackendRefused},
		{"dial error", gate.Sent{Err: caddyhttp.Error(502, dial)}, gate.BackendNotReached},
		{"dial error wrapped", gate.Sent{Err: fmt.Errorf("x: %w", dial)}, gate.BackendNotReached},
		{"connection taken, nothing written", gate.Sent{Err: eof, Attempted: true}, gate.BackendNotReached},
		{"no upstreams", gate.Sent{Err: noUpstreams}, gate.BackendNotReached},
		{"written, then the connection broke", gate.Sent{Err: eof, Attempted: true, Written: true}, gate.BackendUnknown},
		{"written, then timed out", gate.Sent{Err: timeout, Attempted: true, Written: true}, gate.BackendUnknown},
		{"answer started, then an error", gate.Sent{Err: eof, Answered: true, Attempted: true, Written: true}, gate.BackendUnknown},
		{"dial error after a write (a refused re-send)", gate.Sent{Err: dial, Attempted: true, Written: true}, gate.BackendUnknown},
		{"503 after the request was written", gate.Sent{Err: noUpstreams, Attempted: true, Written: true}, gate.BackendUnknown},
		{"unknown error from a non-proxy handler", gate.Sent{Err: errors.New("boom")}, gate.BackendUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := classify(c.in); got != c.want {
				t.Fatalf("classify(%+v) = %v, want %v", c.in, got.Label(), c.want.Label())
			}
		})
	}
}
