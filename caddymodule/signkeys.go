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
// (Handler.expiryCheckEvery).
const defaultExpiryCheckEvery = 24 * time.Hour

// provisionKeys reads the keys the preset verifies with.
func (h *Handler) provisionKeys() {
	if kr, ok := h.platform.(keying.KeyReporter); ok && !h.VerifyOff {
		h.keys = kr.Keys()
	}
	h.warnExpiring(h.now())
}

// keyFields are the start-up line's fields for the keys.
func (h *Handler) keyFields() []zap.Field {
	if len(h.keys) == 0 {
		return nil
	}
	return []zap.Field{zap.Strings("keys", keying.KeyIDs(h.keys))}
}

// warnExpiring logs each pinned certificate that expires within
// expiryWarning of t, or has expired.
func (h *Handler) warnExpiring(t time.Time) {
	for _, k := range keying.ExpiringWithin(h.keys, t, expiryWarning) {
		fields := []zap.Field{zap.String("platform", h.Platform), zap.String("scope", h.scope()),
			zap.String("key", k.ID), zap.String("not_after", k.NotAfter.UTC().Format(time.RFC3339))}
		if left := k.NotAfter.Sub(t); left > 0 {
			h.logger.Warn("pinned certificate expires soon: configure its successor before then, or every notification signed with it will be refused (401)",
				append(fields, zap.Int("days_left", int(math.Ceil(left.Hours()/24))))...)
		} else {
			h.logger.Warn("pinned certificate has expired: notifications signed with it are refused (401); configure its successor", fields...)
		}
	}
}

// watchExpiry repeats warnExpiring every expiryCheckEvery until ctx ends.
// start runs it for a route with certificates.
func (h *Handler) watchExpiry(ctx context.Context) {
	if !slices.ContainsFunc(h.keys, func(k keying.KeyInfo) bool { return !k.NotAfter.IsZero() }) {
		return
	}
	tick := time.NewTicker(h.expiryCheckEvery)
	go func() {
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				h.warnExpiring(h.now())
			}
		}
	}()
}

// verifiedBy names the key that verified a notification: id for the log
// (a configured key's id, a fetched certificate's serial), label for the
// metric, bounded by the configuration: a configured key's id, "fetched"
// for a certificate fetched at run time (PayPal's, when none is pinned),
// "secret" for a preset with one shared secret.
func (h *Handler) verifiedBy(r *keying.Request) (id, label string) {
	kr, ok := h.platform.(keying.KeyReporter)
	if !ok {
		return "", "secret"
	}
	id = kr.VerifiedBy(r)
	for _, k := range h.keys {
		if k.ID == id {
			return id, id
		}
	}
	return id, "fetched"
}
