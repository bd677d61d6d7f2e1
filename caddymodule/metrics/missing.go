package metrics

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MissingTotal counts what catch_up found (补单): _total{platform,outcome},
// the outcome one of catchup's (recovered, missing, alert only, not paid,
// unknown).
const MissingTotal = "idemgate_missing" // _total{platform,outcome}

func newMissing(meter metric.Meter) (metric.Int64Counter, error) {
	return meter.Int64Counter(MissingTotal,
		metric.WithDescription("Payments the platform holds that no notification brought, by platform and outcome (recovered, missing, alert only, not paid, unknown)."))
}

// Missing counts one missing item entering outcome. Called off the
// request path (the catch-up engine), a few times a period: its labels
// are built per call.
func (m *Metrics) Missing(ctx context.Context, platform, outcome string) {
	if m == nil {
		return
	}
	m.missing.Add(ctx, 1, metric.WithAttributes(attribute.String("platform", platform), attribute.String("outcome", outcome)))
}
