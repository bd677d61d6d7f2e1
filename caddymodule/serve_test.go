package caddymodule

import (
	"testing"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/registry"
)

// TestGateLabels: every label the gate decides is the registry's outcome
// of the same name, so the metric, the {idempotency.outcome} placeholder
// and the console's chart count what the gate decided; and every outcome
// the chart counts is one the gate can decide.
func TestGateLabels(t *testing.T) {
	labels := map[gate.Label]registry.Outcome{
		gate.Forwarded: registry.Forwarded, gate.Replayed: registry.Replayed, gate.Waited: registry.Waited,
		gate.InFlight: registry.InFlight, gate.BackendFailed: registry.BackendFailed,
		gate.BackendUnreachable: registry.BackendUnreachable, gate.Ambiguous: registry.Ambiguous,
		gate.Conflict: registry.Conflict, gate.RejectedSignature: registry.RejectedSignature,
		gate.BadRequest: registry.BadRequest, gate.TooLarge: registry.TooLarge, gate.StoreError: registry.StoreError,
		gate.Passed: registry.Passed, gate.Canceled: registry.Canceled, gate.Queued: registry.Queued, gate.Acked: registry.Acked,
	}
	for l, o := range labels {
		if outcome(l) != o || o.Index() < 0 {
			t.Errorf("gate label %q is recorded as %q (chart column %d), want %q", l, outcome(l), o.Index(), o)
		}
	}
	if len(labels) != registry.NumOutcomes {
		t.Errorf("the gate names %d outcomes, the registry %d", len(labels), registry.NumOutcomes)
	}
}
