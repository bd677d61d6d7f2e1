package metrics

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgate/idemgate/caddymodule/app"
)

// Exported names (the Prometheus exporter adds _total to counters and
// _seconds to histograms with unit "s").
const (
	Requests        = "idemgate_requests"         // _total{platform,scope,outcome}
	RequestDuration = "idemgate_request_duration" // _seconds{platform,scope,outcome}
	BackendDuration = "idemgate_backend_duration" // _seconds{platform,scope}
	WaitDuration    = "idemgate_wait_duration"    // _seconds{platform,scope}
	Copies          = "idemgate_copies_per_key"   // {platform,scope}
	LostClaims      = "idemgate_lost_claims"      // _total{platform,scope,op}
	StoreErrors     = "idemgate_store_errors"     // _total{platform,scope,op}
	Verified        = "idemgate_verified"         // _total{platform,scope,key}
)

// Histogram buckets: the gateway adds well under a millisecond, backends
// take milliseconds to seconds, a waiting copy up to in_flight wait.
var (
	durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	copiesBuckets   = []float64{1, 2, 3, 5, 10, 20, 50, 100}
)

// Metrics records the handler's counters and histograms. Labels are
// bounded: platform, scope, outcome and operation — never a key or an
// address. A nil *Metrics records nothing.
type Metrics struct {
	requests        metric.Int64ObservableCounter // read from labelSet.requests
	requestDuration metric.Float64Histogram
	backend         metric.Float64Histogram
	wait            metric.Float64Histogram
	copiesPerKey    metric.Int64Histogram
	lostClaims      metric.Int64Counter
	storeErrors     metric.Int64Counter
	verified        metric.Int64Counter
	delivery        deliveryInstruments // deliver async (delivery.go)
	missing         metric.Int64Counter // catch_up (missing.go)

	// labels holds the pre-built options of every label combination seen
	// so far: the hot path does an atomic load and a map lookup, and
	// allocates nothing. New combinations (a handful per process) copy
	// the map.
	labels   atomic.Pointer[map[labelKey]*labelSet]
	labelsMu sync.Mutex
}

var _ Recorder = (*Metrics)(nil)

// labelKey names one label combination; b is the outcome or the operation,
// kind tells which (or none: platform only).
type labelKey struct {
	kind byte
	Route
	b string
}

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

// newMetrics creates the instruments on provider's meter.
func newMetrics(provider metric.MeterProvider) (*Metrics, error) {
	meter := provider.Meter(instrumentationName)
	m := &Metrics{}
	var err error
	if m.requests, err = meter.Int64ObservableCounter(Requests,
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
	if m.requestDuration, err = meter.Float64Histogram(RequestDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from the notification's arrival to the gateway's decision being done, backend included, by platform and outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, err
	}
	if m.backend, err = meter.Float64Histogram(BackendDuration, metric.WithUnit("s"),
		metric.WithDescription("Time the backend took to answer a forwarded notification."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, err
	}
	if m.wait, err = meter.Float64Histogram(WaitDuration, metric.WithUnit("s"),
		metric.WithDescription("Time a copy waited for the first copy's answer (in_flight wait)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, err
	}
	if m.copiesPerKey, err = meter.Int64Histogram(Copies,
		metric.WithDescription("Copies of its key seen so far (the first included), recorded for every duplicate."),
		metric.WithExplicitBucketBoundaries(copiesBuckets...)); err != nil {
		return nil, err
	}
	if m.lostClaims, err = meter.Int64Counter(LostClaims,
		metric.WithDescription("Claims lost while their request was at the backend (the claim expired or was purged), by operation (complete, release, renew).")); err != nil {
		return nil, err
	}
	if m.storeErrors, err = meter.Int64Counter(StoreErrors,
		metric.WithDescription("Store operations that failed, by operation (claim, complete, release, renew).")); err != nil {
		return nil, err
	}
	if m.verified, err = meter.Int64Counter(Verified,
		metric.WithDescription("Notifications whose signature verified, by the key that verified them (a configured key's id, \"fetched\" for a certificate fetched at run time, \"secret\" for a shared secret).")); err != nil {
		return nil, err
	}
	if m.missing, err = newMissing(meter); err != nil {
		return nil, err
	}
	if err = m.delivery.init(meter); err != nil {
		return nil, err
	}
	empty := map[labelKey]*labelSet{}
	m.labels.Store(&empty)
	return m, nil
}

// Observe records one request's result: its outcome and duration, and
// what else it came to (the backend's time, a wait, a copy count, the key
// that verified it, a failed store operation).
func (m *Metrics) Observe(ctx context.Context, rt Route, o Observation) {
	if m == nil {
		return
	}
	if o.Verified != "" {
		m.verified.Add(ctx, 1, m.labelSet(kindKey, rt, o.Verified).add...)
	}
	if o.StoreOp != "" {
		m.StoreError(ctx, rt, o.StoreOp)
	}
	ls := m.labelSet(kindOutcome, rt, string(o.Outcome))
	ls.requests.Add(1)
	m.requestDuration.Record(ctx, o.Elapsed.Seconds(), ls.rec...)
	if o.Backend > 0 {
		m.backend.Record(ctx, o.Backend.Seconds(), m.labelSet(kindPlatform, rt, "").rec...)
	}
	if o.Outcome == app.Waited {
		m.wait.Record(ctx, o.Elapsed.Seconds(), m.labelSet(kindPlatform, rt, "").rec...)
	}
	if o.Copies > 0 {
		m.copiesPerKey.Record(ctx, o.Copies, m.labelSet(kindPlatform, rt, "").rec...)
	}
}

// LostClaim counts a claim lost while its request was at the backend.
func (m *Metrics) LostClaim(ctx context.Context, rt Route, op string) {
	if m == nil {
		return
	}
	m.lostClaims.Add(ctx, 1, m.labelSet(kindOp, rt, op).add...)
}

// StoreError counts a failed store operation.
func (m *Metrics) StoreError(ctx context.Context, rt Route, op string) {
	if m == nil {
		return
	}
	m.storeErrors.Add(ctx, 1, m.labelSet(kindOp, rt, op).add...)
}

// labelSet returns the options for one label combination, building them
// the first time it is seen.
func (m *Metrics) labelSet(kind byte, rt Route, b string) *labelSet {
	k := labelKey{kind: kind, Route: rt, b: b}
	if ls, ok := (*m.labels.Load())[k]; ok {
		return ls
	}
	m.labelsMu.Lock()
	defer m.labelsMu.Unlock()
	cur := *m.labels.Load()
	if ls, ok := cur[k]; ok {
		return ls
	}
	kvs := []attribute.KeyValue{attribute.String("platform", rt.Platform), attribute.String("scope", rt.Scope)}
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
