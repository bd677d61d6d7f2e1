package caddymodule

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgate/idemgate/internal/registry"
)

// The metrics of deliver async, on the handler metrics' meter.
const (
	metricQueueDepth       = "idemgate_delivery_queue_depth"      // {platform,scope}
	metricQueueOldest      = "idemgate_delivery_queue_oldest_age" // _seconds{platform,scope}
	metricDeliveryAttempts = "idemgate_delivery_attempts"         // _total{platform,scope,outcome}
	metricDeliveryDuration = "idemgate_delivery_duration"         // _seconds{platform,scope,outcome}
	metricDeadLetters      = "idemgate_delivery_dead"             // _total{platform,scope}
)

type deliveryInstruments struct {
	attempts metric.Int64Counter
	duration metric.Float64Histogram
	dead     metric.Int64Counter
}

// init creates the instruments. The queue gauges are observed from the
// running engines' last stats (refreshed every statsEvery), so a scrape
// costs no store round trip.
func (d *deliveryInstruments) init(meter metric.Meter) error {
	var err error
	if d.attempts, err = meter.Int64Counter(metricDeliveryAttempts,
		metric.WithDescription("Delivery attempts of deliver async, by outcome (answered, failed, unreachable, ambiguous).")); err != nil {
		return err
	}
	if d.duration, err = meter.Float64Histogram(metricDeliveryDuration, metric.WithUnit("s"),
		metric.WithDescription("Time one delivery attempt took at the backend, by outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return err
	}
	if d.dead, err = meter.Int64Counter(metricDeadLetters,
		metric.WithDescription("Deliveries given up after give_up: their keys are dead, an operator must redeliver them.")); err != nil {
		return err
	}
	depth, err := meter.Int64ObservableGauge(metricQueueDepth,
		metric.WithDescription("Notifications queued for delivery (being delivered included), per scope, all instances together."))
	if err != nil {
		return err
	}
	oldest, err := meter.Float64ObservableGauge(metricQueueOldest, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest queued notification (0 when the queue is empty)."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		// The instruments are the process's; the queues observed are
		// those of the config running now.
		app, ok := registry.Running()
		if !ok {
			return nil
		}
		for _, re := range app.Engines() {
			e, ok := re.(*engine)
			if !ok {
				continue
			}
			st := e.stats.Load()
			if st == nil {
				continue
			}
			opt := metric.WithAttributes(attribute.String("platform", e.h.Platform), attribute.String("scope", e.scope))
			o.ObserveInt64(depth, st.Depth, opt)
			age := 0.0
			if !st.Oldest.IsZero() {
				age = max(time.Since(st.Oldest).Seconds(), 0)
			}
			o.ObserveFloat64(oldest, age, opt)
		}
		return nil
	}, depth, oldest)
	return err
}

func (m *metrics) deliveryAttempt(ctx context.Context, rt route, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	ls := m.labelSet(kindOutcome, rt, outcome)
	m.delivery.attempts.Add(ctx, 1, ls.add...)
	m.delivery.duration.Record(ctx, d.Seconds(), ls.rec...)
}

func (m *metrics) deadLetter(ctx context.Context, rt route) {
	if m == nil {
		return
	}
	m.delivery.dead.Add(ctx, 1, m.labelSet(kindPlatform, rt, "").add...)
}
