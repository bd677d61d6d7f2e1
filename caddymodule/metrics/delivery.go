package metrics

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

// The metrics of deliver async, on the handler metrics' meter.
const (
	QueueDepth       = "idemgate_delivery_queue_depth"      // {platform,scope}
	QueueOldest      = "idemgate_delivery_queue_oldest_age" // _seconds{platform,scope}
	DeliveryAttempts = "idemgate_delivery_attempts"         // _total{platform,scope,outcome}
	DeliveryDuration = "idemgate_delivery_duration"         // _seconds{platform,scope,outcome}
	DeadLetters      = "idemgate_delivery_dead"             // _total{platform,scope}
)

// QueueReporter is a running delivery engine whose queue the gauges show:
// the registry's engines that report their queue's last stats.
type QueueReporter interface {
	Platform() string
	Scope() string
	// QueueStats are the queue's stats as last read (false: none yet).
	QueueStats() (store.QueueStats, bool)
}

type deliveryInstruments struct {
	attempts metric.Int64Counter
	duration metric.Float64Histogram
	dead     metric.Int64Counter
}

// init creates the instruments. The queue gauges are observed from the
// running engines' last stats (refreshed by each engine), so a scrape
// costs no store round trip.
func (d *deliveryInstruments) init(meter metric.Meter) error {
	var err error
	if d.attempts, err = meter.Int64Counter(DeliveryAttempts,
		metric.WithDescription("Delivery attempts of deliver async, by outcome (answered, failed, unreachable, ambiguous).")); err != nil {
		return err
	}
	if d.duration, err = meter.Float64Histogram(DeliveryDuration, metric.WithUnit("s"),
		metric.WithDescription("Time one delivery attempt took at the backend, by outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return err
	}
	if d.dead, err = meter.Int64Counter(DeadLetters,
		metric.WithDescription("Deliveries given up after give_up: their keys are dead, an operator must redeliver them.")); err != nil {
		return err
	}
	depth, err := meter.Int64ObservableGauge(QueueDepth,
		metric.WithDescription("Notifications queued for delivery (being delivered included), per scope, all instances together."))
	if err != nil {
		return err
	}
	oldest, err := meter.Float64ObservableGauge(QueueOldest, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest queued notification (0 when the queue is empty)."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		// The instruments are the process's; the queues observed are
		// those of the config running now.
		a, ok := app.Running()
		if !ok {
			return nil
		}
		for _, re := range a.Engines() {
			e, ok := re.(QueueReporter)
			if !ok {
				continue
			}
			st, ok := e.QueueStats()
			if !ok {
				continue
			}
			opt := metric.WithAttributes(attribute.String("platform", e.Platform()), attribute.String("scope", e.Scope()))
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

// Delivery counts one delivery attempt and its time at the backend.
func (m *Metrics) Delivery(ctx context.Context, rt Route, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	ls := m.labelSet(kindOutcome, rt, outcome)
	m.delivery.attempts.Add(ctx, 1, ls.add...)
	m.delivery.duration.Record(ctx, d.Seconds(), ls.rec...)
}

// Dead counts a delivery given up.
func (m *Metrics) Dead(ctx context.Context, rt Route) {
	if m == nil {
		return
	}
	m.delivery.dead.Add(ctx, 1, m.labelSet(kindPlatform, rt, "").add...)
}
