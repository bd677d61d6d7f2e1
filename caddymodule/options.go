package caddymodule

import "time"

// options are what is injected into a route instead of production's
// clock, backend ceiling and watch intervals; the zero value is
// production's. They are given at construction (configure, before
// Provision) or, for a running route's watches, through rewatch in the
// tests; the Caddyfile sets none of them.
type options struct {
	clock   func() time.Time // nil: time.Now
	ceiling time.Duration    // 0: backendCeiling
	// expiryCheck and retryScan are how often the certificate watch and
	// the retry scan run; 0: defaultExpiryCheckEvery, retryScanMaxEvery.
	expiryCheck, retryScan time.Duration
}

// option sets one of a route's options.
type option func(*options)

// withClock judges signatures, re-signs and checks certificates' expiry
// by now.
func withClock(now func() time.Time) option { return func(o *options) { o.clock = now } }

// withCeiling bounds forwards and queued deliveries by d.
func withCeiling(d time.Duration) option { return func(o *options) { o.ceiling = d } }

// withExpiryCheckEvery and withRetryScanEvery run the watches every d.
func withExpiryCheckEvery(d time.Duration) option { return func(o *options) { o.expiryCheck = d } }
func withRetryScanEvery(d time.Duration) option   { return func(o *options) { o.retryScan = d } }

// configure gives h its options.
func configure(h *Handler, opts ...option) {
	for _, o := range opts {
		o(&h.opts)
	}
}

// now is the route's clock.
func (o *options) now() time.Time {
	if o.clock != nil {
		return o.clock()
	}
	return time.Now()
}

// backendCeiling bounds a forward and a queued delivery's attempt.
func (o *options) backendCeiling() time.Duration {
	if o.ceiling > 0 {
		return o.ceiling
	}
	return backendCeiling
}

// expiryCheckEvery is how often the certificate watch looks again.
func (o *options) expiryCheckEvery() time.Duration {
	if o.expiryCheck > 0 {
		return o.expiryCheck
	}
	return defaultExpiryCheckEvery
}

// retryScanEvery is how often the retry scan runs, never less often
// than retryScanMaxEvery.
func (o *options) retryScanEvery() time.Duration {
	if o.retryScan > 0 {
		return min(o.retryScan, retryScanMaxEvery)
	}
	return retryScanMaxEvery
}
