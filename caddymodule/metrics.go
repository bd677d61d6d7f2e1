package caddymodule

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	promclient "github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/zap"
)

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
	procMetrics     *metrics
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

// Exported names (the Prometheus exporter adds _total to counters and
// _seconds to histograms with unit "s").
const (
	metricRequests        = "idemgate_requests"         // _total{platform,scope,outcome}
	metricRequestDuration = "idemgate_request_duration" // _seconds{platform,scope,outcome}
	metricBackendDuration = "idemgate_backend_duration" // _seconds{platform,scope}
	metricWaitDuration    = "idemgate_wait_duration"    // _seconds{platform,scope}
	metricCopies          = "idemgate_copies_per_key"   // {platform,scope}
	metricLostClaims      = "idemgate_lost_claims"      // _total{platform,scope,op}
	metricStoreErrors     = "idemgate_store_errors"     // _total{platform,scope,op}
	metricVerified        = "idemgate_verified"         // _total{platform,scope,key}
)

// Histogram buckets: the gateway adds well under a millisecond, backends
// take milliseconds to seconds, a waiting copy up to in_flight wait.
var (
	durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	copiesBuckets   = []float64{1, 2, 3, 5, 10, 20, 50, 100}
)

// metrics records the handler's counters and histograms. Labels are
// bounded: platform, scope (a route's configured namespace, so two routes
// of one platform are told apart), outcome and operation — never a key or
// an address.
// A nil *metrics records nothing.
type metrics struct {
	requests        metric.Int64ObservableCounter // read from labelSet.requests
	requestDuration metric.Float64Histogram
	backend         metric.Float64Histogram
	wait            metric.Float64Histogram
	copiesPerKey    metric.Int64Histogram
	lostClaims      metric.Int64Counter
	storeErrors     metric.Int64Counter
	verified        metric.Int64Counter
	delivery        deliveryInstruments // deliver async (deliver_metrics.go)

	// labels holds the pre-built options of every label combination seen
	// so far: the hot path does an atomic load and a map lookup, and
	// allocates nothing. New combinations (a handful per process) copy
	// the map.
	labels   atomic.Pointer[map[labelKey]*labelSet]
	labelsMu sync.Mutex
}

// labelKey names one label combination; b is the outcome or the operation,
// kind tells which (or none: platform only).
type labelKey struct {
	kind byte
	route
	b string
}

// route is the platform and scope labels of one handler.
type route struct{ platform, scope string }

const (
	kindPlatform byte = iota
	kindOutcome
	kindOp
	kindKey
)

// labelSet is one label combination as ready-made options.
type labelSet struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption

	// requests counts the requests of an outcome's combination; the
	// requests counter observes it when it is read. A synchronous counter's
	// Add cost 3 µs (its SDK resolves and normalizes the attributes on
	// every call) of a 30 µs replay; an atomic add costs nothing.
	requests atomic.Int64
}

// loadMetrics returns the process's metrics, making sure they are
// exported on ctx's registry (the config's). With no registry, or if the
// exporter cannot be set up, it logs and returns nil: the gateway works
// without metrics.
func loadMetrics(ctx caddy.Context) *metrics {
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
func newProcessMetrics() (*metrics, promclient.Collector, error) {
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

// newMetrics creates the instruments on provider's meter.
func newMetrics(provider metric.MeterProvider) (*metrics, error) {
	meter := provider.Meter(instrumentationName)
	m := &metrics{}
	var err error
	if m.requests, err = meter.Int64ObservableCounter(metricRequests,
		metric.WithDescription("Notifications handled, by platform and outcome (forwarded, replayed, waited, conflict, rejected_signature, store_error, ...)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for k, ls := range *m.labels.Load() {
				// A series from its first request on, as a counter's
				// (delivery attempts share these label sets).
				if n := ls.requests.Load(); n > 0 && k.kind == kindOutcome {
					o.Observe(n, ls.obs...)
				}
			}
			return nil
		})); err != nil {
		return nil, err
	}
	if m.requestDuration, err = meter.Float64Histogram(metricRequestDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from the notification's arrival to the gateway's decision being done, backend included, by platform and outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, err
	}
	if m.backend, err = meter.Float64Histogram(metricBackendDuration, metric.WithUnit("s"),
		metric.WithDescription("Time the backend took to answer a forwarded notification."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, err
	}
	if m.wait, err = meter.Float64Histogram(metricWaitDuration, metric.WithUnit("s"),
		metric.WithDescription("Time a copy waited for the first copy's answer (in_flight wait)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, err
	}
	if m.copiesPerKey, err = meter.Int64Histogram(metricCopies,
		metric.WithDescription("Copies of its key seen so far (the first included), recorded for every duplicate."),
		metric.WithExplicitBucketBoundaries(copiesBuckets...)); err != nil {
		return nil, err
	}
	if m.lostClaims, err = meter.Int64Counter(metricLostClaims,
		metric.WithDescription("Claims lost while their request was at the backend (the claim expired or was purged), by operation (complete, release, renew).")); err != nil {
		return nil, err
	}
	if m.storeErrors, err = meter.Int64Counter(metricStoreErrors,
		metric.WithDescription("Store operations that failed, by operation (claim, complete, release, renew).")); err != nil {
		return nil, err
	}
	if m.verified, err = meter.Int64Counter(metricVerified,
		metric.WithDescription("Notifications whose signature verified, by the key that verified them (a configured key's id, \"fetched\" for a certificate fetched at run time, \"secret\" for a shared secret).")); err != nil {
		return nil, err
	}
	if err = m.delivery.init(meter); err != nil {
		return nil, err
	}
	empty := map[labelKey]*labelSet{}
	m.labels.Store(&empty)
	return m, nil
}

func (m *metrics) request(ctx context.Context, rt route, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	ls := m.labelSet(kindOutcome, rt, outcome)
	ls.requests.Add(1)
	m.requestDuration.Record(ctx, d.Seconds(), ls.rec...)
}

func (m *metrics) backendDuration(ctx context.Context, rt route, d time.Duration) {
	if m == nil {
		return
	}
	m.backend.Record(ctx, d.Seconds(), m.labelSet(kindPlatform, rt, "").rec...)
}

func (m *metrics) waitDuration(ctx context.Context, rt route, d time.Duration) {
	if m == nil {
		return
	}
	m.wait.Record(ctx, d.Seconds(), m.labelSet(kindPlatform, rt, "").rec...)
}

func (m *metrics) copies(ctx context.Context, rt route, n int64) {
	if m == nil {
		return
	}
	m.copiesPerKey.Record(ctx, n, m.labelSet(kindPlatform, rt, "").rec...)
}

func (m *metrics) lostClaim(ctx context.Context, rt route, op string) {
	if m == nil {
		return
	}
	m.lostClaims.Add(ctx, 1, m.labelSet(kindOp, rt, op).add...)
}

func (m *metrics) verifiedWith(ctx context.Context, rt route, key string) {
	if m == nil {
		return
	}
	m.verified.Add(ctx, 1, m.labelSet(kindKey, rt, key).add...)
}

func (m *metrics) storeError(ctx context.Context, rt route, op string) {
	if m == nil {
		return
	}
	m.storeErrors.Add(ctx, 1, m.labelSet(kindOp, rt, op).add...)
}

// labelSet returns the options for one label combination, building them
// the first time it is seen.
func (m *metrics) labelSet(kind byte, rt route, b string) *labelSet {
	k := labelKey{kind: kind, route: rt, b: b}
	if ls, ok := (*m.labels.Load())[k]; ok {
		return ls
	}
	m.labelsMu.Lock()
	defer m.labelsMu.Unlock()
	cur := *m.labels.Load()
	if ls, ok := cur[k]; ok {
		return ls
	}
	kvs := []attribute.KeyValue{attribute.String("platform", rt.platform), attribute.String("scope", rt.scope)}
	switch kind {
	case kindOutcome:
		kvs = append(kvs, attribute.String("outcome", b))
	case kindOp:
		kvs = append(kvs, attribute.String("op", b))
	case kindKey:
		kvs = append(kvs, attribute.String("key", b))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kvs...))
	ls := &labelSet{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}, obs: []metric.ObserveOption{opt}}
	next := maps.Clone(cur)
	next[k] = ls
	m.labels.Store(&next)
	return ls
}
