package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// TestClassify: what became of a forwarded request decides whether its
// claim is completed, released or held; no server needed.
func TestClassify(t *testing.T) {
	dial := reverseproxy.NewDialError(errors.New("connection refused"))
	eof := caddyhttp.Error(http.StatusBadGateway, errors.New("EOF"))
	noUpstreams := caddyhttp.Error(http.StatusServiceUnavailable, errors.New("no upstreams available"))
	timeout := caddyhttp.Error(http.StatusGatewayTimeout, errors.New("context deadline exceeded"))
	for _, c := range []struct {
		name string
		in   backendResult
		want backendKind
	}{
		{"success", backendResult{success: true, answered: true, attempted: true, written: true}, backendAnswered},
		{"failure answer", backendResult{answered: true, attempted: true, written: true}, backendFailed},
		{"handler wrote nothing, no error, not a success", backendResult{}, backendFailed},
		{"dial error", backendResult{err: caddyhttp.Error(502, dial)}, backendUnreachable},
		{"dial error wrapped", backendResult{err: fmt.Errorf("x: %w", dial)}, backendUnreachable},
		{"connection taken, nothing written", backendResult{err: eof, attempted: true}, backendUnreachable},
		{"no upstreams", backendResult{err: noUpstreams}, backendUnreachable},
		{"written, then the connection broke", backendResult{err: eof, attempted: true, written: true}, backendAmbiguous},
		{"written, then timed out", backendResult{err: timeout, attempted: true, written: true}, backendAmbiguous},
		{"answer started, then an error", backendResult{err: eof, answered: true, attempted: true, written: true}, backendAmbiguous},
		{"dial error after a write (a refused re-send)", backendResult{err: dial, attempted: true, written: true}, backendAmbiguous},
		{"503 after the request was written", backendResult{err: noUpstreams, attempted: true, written: true}, backendAmbiguous},
		{"unknown error from a non-proxy handler", backendResult{err: errors.New("boom")}, backendAmbiguous},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := classify(c.in); got != c.want {
				t.Fatalf("classify(%+v) = %v, want %v", c.in, got.outcome(), c.want.outcome())
			}
		})
	}
}
