package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/cache"
)

// serveKey claims key and acts on the claim: forward the first copy,
// replay an answered key, wait for (or refuse) an in-flight one, refuse a
// fingerprint conflict.
func (h *Handler) serveKey(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	repl *caddy.Replacer, key, fp string, nt notice,
) (result, error) {
	waited := false
	var deadline time.Time
	for {
		// An answer this process holds while the store cannot take it yet
		// (see cache.Settler) is replayed without asking the store.
		if rec := h.settler.Kept(key); rec != nil {
			return h.replayRecord(w, r, repl, rec, fp, waited)
		}
		res, err := h.claim(key, fp)
		if err != nil && r.Context().Err() != nil {
			// The platform hung up, and nobody is left to answer. The
			// claim's error is the store's all the same: a claim is not
			// bound by the request (see claim).
			h.metrics.storeError(r.Context(), h.route(), "claim")
			return result{outcome: outcomeCanceled, err: err}, caddyhttp.Error(499, err)
		}
		if err != nil {
			// The first copy is at the backend from this process: its
			// answer is about to be completed or kept here, so wait for it
			// rather than fail.
			if deadline.IsZero() {
				deadline = time.Now().Add(time.Duration(h.InFlightWait))
			}
			wctx, cancel := context.WithDeadline(r.Context(), deadline)
			local := h.settler.AwaitLocal(wctx, key)
			cancel()
			// Or it settled (kept here) between this copy's look at the
			// kept answers and its claim.
			if local || h.settler.Kept(key) != nil {
				waited = true
				continue
			}
			return h.storeFailed(w, r, next, repl, key, err)
		}
		switch res.Outcome {
		case cache.Won:
			if h.async() {
				return h.enqueue(w, r, repl, key, res.Token, nt)
			}
			return h.forward(w, r, next, repl, key, fp, res.Token, nt)
		case cache.Answered:
			return h.replayRecord(w, r, repl, res.Record, fp, waited)
		case cache.Conflict:
			return h.conflict(w, r, res.Record.Copies)
		}

		// In flight.
		copies := res.Record.Copies
		if h.async() {
			if res, again, err := h.queuedCopy(w, r, repl, key, fp, copies); !again {
				return res, err
			}
			continue // released meanwhile: this copy is a retry and claims again
		}
		if h.InFlight == "reject" {
			return result{outcome: outcomeInFlight, copies: copies},
				h.tryLater(w, r, http.StatusConflict, errors.New("the first copy of this notification is still being processed"))
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(time.Duration(h.InFlightWait))
		}
		waited = true
		rec, err := cache.WaitAnswer(r.Context(), h.store, key, cache.WaitOptions{
			Deadline: deadline, OpTimeout: time.Duration(h.StoreTimeout), Recheck: time.Duration(h.LockTTL) / 3,
		})
		switch {
		case err != nil && h.settler.Kept(key) != nil:
			continue // the first copy's answer is here, kept while the store is down
		case err != nil && r.Context().Err() != nil:
			return result{outcome: outcomeCanceled, copies: copies, err: err}, caddyhttp.Error(499, err)
		case errors.Is(err, cache.ErrWaitTimeout):
			return result{outcome: outcomeInFlight, copies: copies},
				h.tryLater(w, r, http.StatusConflict, errors.New("timed out waiting for the first copy of this notification"))
		case err != nil:
			// The key is known to be in flight: whatever on_store_error
			// says, forwarding this copy could run the backend twice.
			h.metrics.storeError(r.Context(), h.route(), "wait")
			return result{outcome: outcomeStoreError, copies: copies, err: err},
				h.tryLater(w, r, http.StatusServiceUnavailable, fmt.Errorf("waiting for the first copy: %w", err))
		case rec != nil:
			return h.replayRecord(w, r, repl, rec, fp, true)
		}
		// The first copy was released (the backend failed): this copy is a
		// legitimate retry and claims again.
	}
}

// serveHead answers a HEAD (a link checker, a prefetcher) without
// claiming, remembering or forwarding anything: a claimed HEAD would be
// forwarded and its body-less answer remembered as the key's, leaving the
// customer's GET an empty page for ttl; forwarded unclaimed, it would
// still run a legacy backend's GET code (PHP, Rails and Django answer
// HEAD by running GET), outside any claim. An answered key's HEAD gets
// the replay's status and headers; any other gets 405 with Allow, and the
// GET that follows is a copy like any other.
func (h *Handler) serveHead(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, key, fp string) (result, error) {
	rec := h.settler.Kept(key)
	if rec == nil {
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(h.StoreTimeout))
		var err error
		rec, err = h.store.Lookup(ctx, key)
		cancel()
		if err != nil && !errors.Is(err, cache.ErrNotFound) {
			// Never passed on, whatever on_store_error says: a HEAD is no
			// notification to deliver unprotected.
			h.metrics.storeError(r.Context(), h.route(), "lookup")
			return result{outcome: outcomeStoreError, err: err},
				h.tryLater(w, r, http.StatusServiceUnavailable, fmt.Errorf("idempotency store unavailable: %w", err))
		}
	}
	if rec != nil && rec.State == cache.StateAnswered {
		return h.replayRecord(w, r, repl, rec, fp, false)
	}
	w.Header().Set("Allow", "GET, POST")
	err := errors.New("HEAD is answered only for an answered notification: it is never forwarded")
	return result{outcome: outcomeBadRequest, err: err}, h.refuse(w, r, http.StatusMethodNotAllowed, err.Error(), err)
}

// replayRecord answers a copy of an answered key, or refuses it when its
// fingerprint differs.
func (h *Handler) replayRecord(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer,
	rec *cache.Record, fp string, waited bool,
) (result, error) {
	if fp != "" && rec.Fingerprint != "" && fp != rec.Fingerprint {
		return h.conflict(w, r, rec.Copies)
	}
	o := outcomeReplayed
	if waited {
		o = outcomeWaited
	}
	setOutcome(repl, o)
	return result{outcome: o, copies: rec.Copies}, h.replay(w, r, repl, rec)
}

func (h *Handler) conflict(w http.ResponseWriter, r *http.Request, copies int64) (result, error) {
	err := errors.New("same key, different fingerprint: possible tampering")
	return result{outcome: outcomeConflict, copies: copies, err: err},
		h.refuse(w, r, http.StatusUnprocessableEntity, msgConflict, err)
}

// storeFailed applies on_store_error.
func (h *Handler) storeFailed(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	repl *caddy.Replacer, key string, err error,
) (result, error) {
	h.metrics.storeError(r.Context(), h.route(), "claim")
	// A store that no longer fits (a Redis turned evicting) is refused as
	// at start: pass is for a store that is down, not one that forgets.
	if h.OnStoreError == "pass" && !errors.Is(err, cache.ErrUnfit) {
		h.logger.Warn("store unreachable: forwarding WITHOUT idempotency protection (on_store_error pass)",
			zap.String("key", h.logKey(key)), zap.Error(err))
		setOutcome(repl, outcomePassed)
		return result{outcome: outcomePassed, err: err}, next.ServeHTTP(w, r)
	}
	return result{outcome: outcomeStoreError, err: err},
		h.tryLater(w, r, http.StatusServiceUnavailable, fmt.Errorf("idempotency store unavailable: %w", err))
}

// tryLater answers an error status with Retry-After. A 503 is a store
// failure, whose detail (addresses, driver messages) stays in the log; a
// 409's err is the gateway's own sentence.
func (h *Handler) tryLater(w http.ResponseWriter, r *http.Request, status int, err error) error {
	w.Header().Set("Retry-After", "5")
	msg := err.Error()
	if status == http.StatusServiceUnavailable {
		msg = msgStore
	}
	return h.refuse(w, r, status, msg, err)
}

// claim claims key, bounded by store_timeout and not by the request: a
// claim that was sent is the key's, and its outcome must be known even if
// the platform hangs up meanwhile (storeContext).
func (h *Handler) claim(key, fp string) (cache.ClaimResult, error) {
	ctx, cancel := h.storeContext()
	defer cancel()
	return h.store.Claim(ctx, key, fp, time.Duration(h.LockTTL))
}
