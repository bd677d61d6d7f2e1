package caddymodule

import (
	"errors"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/gate"
)

// TestGateLabels: every label the gate decides is the registry's outcome
// of the same name, so the metric, the {idempotency.outcome} placeholder
// and the console's chart count what the gate decided; and every outcome
// the chart counts is one the gate can decide.
func TestGateLabels(t *testing.T) {
	labels := map[gate.Label]app.Outcome{
		gate.Forwarded: app.Forwarded, gate.Replayed: app.Replayed, gate.Waited: app.Waited,
		gate.InFlight: app.InFlight, gate.BackendFailed: app.BackendFailed,
		gate.BackendUnreachable: app.BackendUnreachable, gate.Ambiguous: app.Ambiguous,
		gate.Conflict: app.Conflict, gate.RejectedSignature: app.RejectedSignature,
		gate.BadRequest: app.BadRequest, gate.TooLarge: app.TooLarge, gate.StoreError: app.StoreError,
		gate.Passed: app.Passed, gate.Canceled: app.Canceled, gate.Queued: app.Queued, gate.Acked: app.Acked,
		gate.RejectedMerchant: app.RejectedMerchant,
	}
	for l, o := range labels {
		if outcome(l) != o || o.Index() < 0 {
			t.Errorf("gate label %q is recorded as %q (chart column %d), want %q", l, outcome(l), o.Index(), o)
		}
	}
	if len(labels) != app.NumOutcomes {
		t.Errorf("the gate names %d outcomes, the registry %d", len(labels), app.NumOutcomes)
	}
}

// TestHeadRecorded: a HEAD is recorded as what it came to — bad_request
// (405) for a key not answered, replayed for an answered one — for the
// access log's {idempotency.outcome}, the metrics and the chart. (It used
// to be recorded with no outcome at all.)
func TestHeadRecorded(t *testing.T) {
	h := provisionHandler(t, &Handler{Key: "k:{http.request.uri.query.order}", Store: &StoreConfig{Type: "memory"}})
	send := func(method string) (int, string) {
		w, r := benchRequest("")
		r.Method = method
		r.URL.RawQuery = "order=hr-1"
		var code int
		var he caddyhttp.HandlerError
		if err := h.ServeHTTP(w, r, benchBackend); errors.As(err, &he) {
			code = he.StatusCode // a refusal, for the server's error handling
		} else if err != nil {
			t.Fatal(err)
		} else {
			code = w.Code
		}
		repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		return code, repl.ReplaceAll("{idempotency.outcome}", "")
	}
	if code, o := send(http.MethodHead); code != http.StatusMethodNotAllowed || o != string(outcomeBadRequest) {
		t.Fatalf("HEAD of an unknown key: %d recorded %q, want 405 recorded %q", code, o, outcomeBadRequest)
	}
	if code, o := send(http.MethodPost); code != http.StatusOK || o != string(outcomeForwarded) {
		t.Fatalf("POST: %d recorded %q, want 200 forwarded", code, o)
	}
	if code, o := send(http.MethodHead); code != http.StatusOK || o != string(outcomeReplayed) {
		t.Fatalf("HEAD of an answered key: %d recorded %q, want 200 recorded %q", code, o, outcomeReplayed)
	}
}
