package caddymodule

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/caddymodule/metrics"
	"github.com/idemgate/idemgate/journal"
	"github.com/idemgate/idemgate/keying"
)

// result is what one request's trip through the handler came to: the
// gate's outcome (resultOf), and record writes it once (log line, span,
// metrics, events).
type result struct {
	key     string
	keyID   string // the key that verified the notification, if named
	outcome outcome
	copies  int64
	status  int           // the backend's status, when it answered failure
	backend time.Duration // how long the backend took, when forwarded
	err     error
	journal journal.Failed // a failed forward's record, for its events
	// hint says how to fix a route whose failure another of the
	// platform's success rules would take as a success (success.go).
	hint string
	// storeOp names the store operation that failed, for its counter;
	// verified, the label of the key that verified the notification.
	storeOp, verified string
	// published is the outcome act published before the answer
	// (setOutcome), "" when none: record publishes the final one only when
	// it differs.
	published outcome
}

// outcome is a bounded metric label and the {idempotency.outcome} value;
// the registry names them, so the console's chart counts the same ones.
type outcome = app.Outcome

const (
	outcomeForwarded          = app.Forwarded
	outcomeReplayed           = app.Replayed
	outcomeWaited             = app.Waited
	outcomeInFlight           = app.InFlight
	outcomeConflict           = app.Conflict
	outcomeRejectedSignature  = app.RejectedSignature
	outcomeRejectedMerchant   = app.RejectedMerchant
	outcomeBadRequest         = app.BadRequest
	outcomeTooLarge           = app.TooLarge
	outcomeStoreError         = app.StoreError
	outcomePassed             = app.Passed
	outcomeBackendFailed      = app.BackendFailed
	outcomeBackendUnreachable = app.BackendUnreachable
	outcomeAmbiguous          = app.Ambiguous
	outcomeCanceled           = app.Canceled
	outcomeQueued             = app.Queued
	outcomeAcked              = app.Acked
)

// setOutcome publishes {idempotency.outcome} before the answer is written,
// so a deferred `header` directive sees it.
func setOutcome(repl *caddy.Replacer, o outcome) { repl.Set("idempotency.outcome", string(o)) }

// record logs, counts and ends the span of one request's result. It
// publishes the final outcome for handle_errors and the access log, which
// may differ from the one published before the answer (a forward whose
// backend then failed). A first copy that ran published its final
// outcome already: no second write (a locked map write and a boxed string).
func (h *Handler) record(ctx context.Context, span spanEnder, repl *caddy.Replacer, start time.Time, d *result) {
	elapsed := time.Since(start)
	if d.outcome != d.published {
		setOutcome(repl, d.outcome)
	}
	h.metrics.Observe(ctx, h.obs.route, metrics.Observation{Outcome: d.outcome, Elapsed: elapsed, Backend: d.backend,
		Copies: d.copies, Verified: d.verified, StoreOp: d.storeOp})
	h.app.Counts().Add(d.outcome)
	span.end(d)
	switch d.outcome {
	case outcomeAmbiguous:
		h.obs.emit("idempotency.ambiguous", d.key, d.status)
	case outcomeConflict:
		h.obs.emit("idempotency.conflict", d.key, 0)
	case outcomeBackendFailed, outcomeBackendUnreachable:
		d.journal.Emit(h.obs, d.key, d.status, h.retries.lastCopy)
	}

	level, msg := logLevel(d, h.WarnCopies, h.warned)
	if ce := h.decisions.Check(level, msg); ce != nil {
		fields := make([]zap.Field, 0, 7)
		fields = append(fields,
			zap.String("platform", h.Platform),
			zap.String("outcome", string(d.outcome)),
			zap.Duration("duration", elapsed))
		if d.key != "" {
			fields = append(fields, zap.String("key", h.obs.LogKey(d.key)))
		}
		if d.copies > 0 {
			fields = append(fields, zap.Int64("copies", d.copies))
		}
		if d.keyID != "" {
			fields = append(fields, zap.String("verified_by", d.keyID))
		}
		if d.status != 0 && d.outcome == outcomeBackendFailed {
			fields = append(fields, zap.Int("upstream_status", d.status))
		}
		if d.err != nil {
			fields = append(fields, zap.Error(d.err))
		}
		if d.hint != "" {
			fields = append(fields, zap.String("hint", d.hint))
		}
		ce.Write(fields...)
	}
}

// logLevel: replays are routine (debug); what an operator must look at is
// warn or error (a key seen more than warnCopies times, as warned allows).
func logLevel(d *result, warnCopies int64, warned *copyWarnings) (zapcore.Level, string) {
	switch d.outcome {
	case outcomeConflict:
		return zapcore.ErrorLevel, "same idempotency key with a different fingerprint: possible tampering"
	case outcomeAmbiguous:
		return zapcore.WarnLevel, "backend outcome unknown: claim held until lock_ttl runs out, never re-sent"
	case outcomeBackendFailed:
		return zapcore.WarnLevel, "backend answered failure: key released for the platform's retry"
	case outcomeBackendUnreachable:
		return zapcore.WarnLevel, "backend unreachable: key released for the platform's retry"
	case outcomeRejectedSignature, outcomeRejectedMerchant:
		return zapcore.WarnLevel, "idempotency decision"
	case outcomeStoreError:
		return zapcore.ErrorLevel, "idempotency decision"
	case outcomeBadRequest:
		if errors.Is(d.err, keying.ErrChannel) {
			// A signed notification the route's configuration turns
			// away (Alipay's return without `return`): the operator's to fix.
			return zapcore.WarnLevel, "signed notification refused: this route does not take its channel"
		}
	}
	if d.copies > warnCopies && warned.due(d.key, time.Now()) {
		return zapcore.WarnLevel, "idempotency key seen more often than warn_copies"
	}
	if d.outcome == outcomeReplayed || d.outcome == outcomeWaited || d.outcome == outcomeAcked {
		return zapcore.DebugLevel, "idempotency decision"
	}
	return zapcore.InfoLevel, "idempotency decision"
}

// copyWarnings rate-limits the warn_copies warning: the first time a key
// crosses the threshold, then at most once a minute per key.
type copyWarnings struct {
	mu   sync.Mutex
	last map[string]time.Time
}

const copyWarnEvery = time.Minute

func newCopyWarnings() *copyWarnings { return &copyWarnings{last: make(map[string]time.Time)} }

func (c *copyWarnings) due(key string, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if last, ok := c.last[key]; ok && t.Sub(last) < copyWarnEvery {
		return false
	}
	if len(c.last) >= 10000 { // bound the map: forget what is past its minute
		for k, v := range c.last {
			if t.Sub(v) >= copyWarnEvery {
				delete(c.last, k)
			}
		}
	}
	c.last[key] = t
	return true
}
