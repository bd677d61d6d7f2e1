// Package metrics is the gateway's Prometheus metrics: the counters and
// histograms of the requests a route decides and of its async deliveries,
// and the gauges of its delivery queue. The handler's recorder and the
// delivery engine reach them only through Recorder.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	promclient "github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
)

// Recorder is what the gateway records into: one request's outcome (the
// handler's record, the one place it is recorded), a lost claim or a
// failed store operation (a forward's or a delivery's settling), a
// delivery attempt and a dead letter (the delivery engine). A nil
// *Metrics is a Recorder that records nothing.
type Recorder interface {
	Observe(ctx context.Context, rt Route, o Observation)
	LostClaim(ctx context.Context, rt Route, op string)
	StoreError(ctx context.Context, rt Route, op string)
	Delivery(ctx context.Context, rt Route, outcome string, d time.Duration)
	Dead(ctx context.Context, rt Route)
}

// Route is the platform and scope labels of one handler (its scope is the
// route's configured namespace, so two routes of one platform are told
// apart).
type Route struct{ Platform, Scope string }

// Observation is what one request came to, as the metrics count it.
type Observation struct {
	Outcome app.Outcome
	// Elapsed is from the notification's arrival to the decision done.
	Elapsed time.Duration
	// Backend is how long the backend took, when forwarded (else 0).
	Backend time.Duration
	// Copies is the key's copy count, for a duplicate (else 0).
	Copies int64
	// Verified labels the key that verified the notification, if any.
	Verified string
	// StoreOp names the store operation that failed, if any.
	StoreOp string
}

// The handler's metrics go through the OpenTelemetry metric API. An SDK
// MeterProvider with the Prometheus exporter as its reader bridges them
// onto Prometheus, so they appear on Caddy's /metrics next to Caddy's own.
//
// Caddy makes a Prometheus registry per config load, and a counter made
// per config would start again from zero at every `caddy reload` or
// `POST /load`, its series gone until they happen again. So, as Caddy does
// with its process-wide metrics (the admin and config-reload counters it
// registers into each new registry), the instruments are made once per
// process, and the exporter's collector is registered into the registry
// of every config that has a handler. The collector is unchecked
// (describes nothing up front), so many registries can hold it; each
// registry holds it once.
var (
	procMetricsOnce sync.Once
	procMetrics     *Metrics
	procCollector   promclient.Collector
	procMetricsErr  error

	// registries are the registries the collector is registered into,
	// pooled by registry: a reference per handler provisioned with it,
	// each dropped when the handler's config is unloaded, so an entry
	// lives as long as its config.
	registries = caddy.NewUsagePool()
)

// registration is the collector's place in one config's registry. The
// registry goes with its config; nothing to undo.
type registration struct{}

func (registration) Destruct() error { return nil }

// instrumentationName names the meter (the handler's tracer has the same
// name).
const instrumentationName = "github.com/idemgate/idemgate/caddymodule"

// Load returns the process's metrics, making sure they are exported on
// ctx's registry (the config's). With no registry, or if the exporter
// cannot be set up, it logs and returns nil, which records nothing: the
// gateway works without metrics.
func Load(ctx caddy.Context) *Metrics {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil
	}
	procMetricsOnce.Do(func() { procMetrics, procCollector, procMetricsErr = newProcessMetrics() })
	if procMetricsErr != nil {
		ctx.Logger().Error("metrics disabled: setting up the OpenTelemetry Prometheus exporter failed", zap.Error(procMetricsErr))
		return nil
	}
	_, _, err := registries.LoadOrNew(reg, func() (caddy.Destructor, error) {
		return registration{}, reg.Register(procCollector)
	})
	if err != nil {
		ctx.Logger().Error("metrics not exported on this config's /metrics", zap.Error(err))
		return procMetrics
	}
	context.AfterFunc(ctx, func() { _, _ = registries.Delete(reg) })
	return procMetrics
}

// newProcessMetrics makes the provider, its exporter and the instruments.
func newProcessMetrics() (*Metrics, promclient.Collector, error) {
	var c collectorCapture
	exp, err := otelprom.New(
		otelprom.WithRegisterer(&c),
		otelprom.WithoutTargetInfo(),
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	m, err := newMetrics(provider)
	if err != nil {
		_ = provider.Shutdown(context.Background())
		return nil, nil, err
	}
	return m, c.c, nil
}

// collectorCapture is a Registerer that keeps the collector the exporter
// registers, so it can be registered into each config's registry.
type collectorCapture struct{ c promclient.Collector }

func (r *collectorCapture) Register(c promclient.Collector) error {
	r.c = c
	return nil
}

func (r *collectorCapture) MustRegister(cs ...promclient.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *collectorCapture) Unregister(promclient.Collector) bool { return false }

// Registries counts the registries the process's collector is exported
// on: the configs loaded now that have a handler (an unloaded config's
// registry is let go).
func Registries() int {
	n := 0
	registries.Range(func(_, _ any) bool { n++; return true })
	return n
}
