package caddymodule

import (
	"context"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/keying"
)

// Keys that rotate: the start-up line names the route's verification keys,
// a metric (idemgate_verified_total{key}) and the decision's log line
// which one verified each notification, and a pinned certificate close to
// its expiry is warned about at start and once a day.

// expiryWarning is how long before a pinned certificate expires the
// warnings start.
const expiryWarning = 30 * 24 * time.Hour

// defaultExpiryCheckEvery is how often a running route looks again
// (withExpiryCheckEvery shortens it).
const defaultExpiryCheckEvery = 24 * time.Hour

// signKeys are a route's verification keys as the preset reports them
// (keying.KeyReporter): which one verified a notification, and the
// warnings of a pinned certificate's expiry.
type signKeys struct {
	platform keying.Platform
	keys     []keying.KeyInfo // none where the route does not verify
	// name and scope are the route's platform name and scope, for logs.
	name, scope string
	logger      *zap.Logger
}

// newSignKeys reads the keys p verifies with (none when verifyOff) and
// warns of those expiring at now.
func newSignKeys(p keying.Platform, verifyOff bool, name, scope string, logger *zap.Logger, now time.Time) *signKeys {
	s := &signKeys{platform: p, name: name, scope: scope, logger: logger}
	if kr, ok := p.(keying.KeyReporter); ok && !verifyOff {
		s.keys = kr.Keys()
	}
	s.warnExpiring(now)
	return s
}

// fields are the start-up line's fields for the keys.
func (s *signKeys) fields() []zap.Field {
	if s == nil || len(s.keys) == 0 {
		return nil
	}
	return []zap.Field{zap.Strings("keys", keying.KeyIDs(s.keys))}
}

// warnExpiring logs each pinned certificate within expiryWarning of its
// expiry at t, or past it.
func (s *signKeys) warnExpiring(t time.Time) {
	for _, k := range keying.ExpiringWithin(s.keys, t, expiryWarning) {
		fields := []zap.Field{zap.String("platform", s.name), zap.String("scope", s.scope),
			zap.String("key", k.ID), zap.String("not_after", k.NotAfter.UTC().Format(time.RFC3339))}
		if left := k.NotAfter.Sub(t); left > 0 {
			s.logger.Warn("pinned certificate expires soon: configure its successor before then, or every notification signed with it will be refused (401)",
				append(fields, zap.Int("days_left", int(math.Ceil(left.Hours()/24))))...)
		} else {
			s.logger.Warn("pinned certificate has expired: notifications signed with it are refused (401); configure its successor", fields...)
		}
	}
}

// watch looks again every `every`, by now, until ctx is done; nothing
// when no key has an expiry.
func (s *signKeys) watch(ctx context.Context, every time.Duration, now func() time.Time) {
	if !slices.ContainsFunc(s.keys, func(k keying.KeyInfo) bool { return !k.NotAfter.IsZero() }) {
		return
	}
	tick := time.NewTicker(every)
	go func() {
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.warnExpiring(now())
			}
		}
	}()
}

// verifiedBy names the key that verified a notification: id for the log
// (a configured key's id, a fetched certificate's serial), label for the
// metric, bounded by the configuration: a configured key's id, "fetched"
// for a certificate fetched at run time (PayPal's, when none is pinned),
// "secret" for a preset with one shared secret.
func (s *signKeys) verifiedBy(r *keying.Request) (id, label string) {
	kr, ok := s.platform.(keying.KeyReporter)
	if !ok {
		return "", "secret"
	}
	id = kr.VerifiedBy(r)
	for _, k := range s.keys {
		if k.ID == id {
			return id, id
		}
	}
	return id, "fetched"
}
