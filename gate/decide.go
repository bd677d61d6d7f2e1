package gate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Decide runs one notification through parse, verify and claim, and says
// what to do with it: forward the first copy (Forward, whose claim
// Forward settles), replay an answered key, wait for an in-flight one
// (inside Decide: the outcome is then its replay or a refusal), or refuse
// it. A refused request touches no key.
func (g *Gate) Decide(r *http.Request) Outcome {
	p, o, ok := g.parse(r)
	if !ok {
		return o
	}
	if r.Method == http.MethodHead {
		o = g.head(r.Context(), p.key, p.fp)
	} else {
		o = g.claimKey(r, p)
		o.KeyID = p.keyID
	}
	o.Key, o.Verified = p.key, p.verified
	if o.Action == Refuse {
		o.Body = p.body
	}
	return o
}

// StoreDown is the outcome of a request whose store did not open: a
// store error, as on_store_error says.
func (g *Gate) StoreDown(err error) Outcome { return g.storeFailed(err) }

// claimKey claims the key and acts on the claim: forward the first copy,
// replay an answered key, wait for (or refuse) an in-flight one, refuse a
// fingerprint conflict.
func (g *Gate) claimKey(r *http.Request, p parsed) Outcome {
	ctx := r.Context()
	settler := g.Route.Settler()
	waited := false
	var deadline time.Time
	for {
		// An answer this process holds while the store cannot take it yet
		// (see store.Settler) is replayed without asking the store.
		if rec := settler.Kept(p.key); rec != nil {
			return g.replay(rec, p.fp, waited)
		}
		res, err := g.claim(p.key, p.fp)
		if err != nil && ctx.Err() != nil {
			// The platform hung up, and nobody is left to answer. The
			// claim's error is the store's all the same: a claim is not
			// bound by the request (see claim).
			o := Dropped(0, err)
			o.StoreOp = "claim"
			return o
		}
		if err != nil {
			// The first copy is at the backend from this process: its
			// answer is about to be completed or kept here, so wait for it
			// rather than fail.
			if deadline.IsZero() {
				deadline = time.Now().Add(g.InFlightWait)
			}
			wctx, cancel := context.WithDeadline(ctx, deadline)
			local := settler.AwaitLocal(wctx, p.key)
			cancel()
			// Or it settled (kept here) between this copy's look at the
			// kept answers and its claim.
			if local || settler.Kept(p.key) != nil {
				waited = true
				continue
			}
			return g.storeFailed(err)
		}
		switch res.Outcome {
		case store.Won:
			c := Claim{Key: p.key, Token: res.Token, Fingerprint: p.fp, Run: p.run, Body: p.body, MerchantRefs: p.refs}
			if g.Queue != nil {
				return g.Queue.Enqueue(ctx, r, c)
			}
			return Outcome{Action: Forward, Label: Forwarded, Claim: c}
		case store.Answered:
			return g.replay(res.Record, p.fp, waited)
		case store.Conflict:
			return conflict(res.Record.Copies)
		}

		// In flight.
		copies := res.Record.Copies
		if g.Queue != nil {
			o, again := g.Queue.Copy(ctx, p.key, p.fp, copies)
			if !again {
				if o.Action == Replay {
					// Delivered between this copy's claim and now.
					return g.replay(o.Record, p.fp, true)
				}
				return o
			}
			continue // released meanwhile: this copy is a retry and claims again
		}
		if g.RejectInFlight {
			return TryLater(copies, "the first copy of this notification is still being processed")
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(g.InFlightWait)
		}
		waited = true
		rec, err := store.WaitAnswer(ctx, g.Route.Store(), p.key, store.WaitOptions{
			Deadline: deadline, OpTimeout: g.StoreTimeout, Recheck: g.LockTTL / 3,
		})
		switch {
		case err != nil && settler.Kept(p.key) != nil:
			continue // the first copy's answer is here, kept while the store is down
		case err != nil && ctx.Err() != nil:
			return Dropped(copies, err)
		case errors.Is(err, store.ErrWaitTimeout):
			return TryLater(copies, "timed out waiting for the first copy of this notification")
		case err != nil:
			// The key is known to be in flight: whatever on_store_error
			// says, forwarding this copy could run the backend twice.
			o := StoreFailure("wait", err, fmt.Errorf("waiting for the first copy: %w", err))
			o.Copies = copies
			return o
		case rec != nil:
			return g.replay(rec, p.fp, true)
		}
		// The first copy was released (the backend failed): this copy is a
		// legitimate retry and claims again.
	}
}

// head answers a HEAD (a link checker, a prefetcher) without claiming,
// remembering or forwarding anything: a claimed HEAD would be forwarded
// and its body-less answer remembered as the key's, leaving the
// customer's GET an empty page for ttl; forwarded unclaimed, it would
// still run a legacy backend's GET code (PHP, Rails and Django answer
// HEAD by running GET), outside any claim. An answered key's HEAD gets
// the replay's status and headers; any other gets 405 with Allow, and the
// GET that follows is a copy like any other.
func (g *Gate) head(ctx context.Context, key, fp string) Outcome {
	rec := g.Route.Settler().Kept(key)
	if rec == nil {
		ctx, cancel := context.WithTimeout(ctx, g.StoreTimeout)
		var err error
		rec, err = g.Route.Store().Lookup(ctx, key)
		cancel()
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			// Never passed on, whatever on_store_error says: a HEAD is no
			// notification to deliver unprotected.
			return StoreFailure("lookup", err, fmt.Errorf("idempotency store unavailable: %w", err))
		}
	}
	if rec != nil && rec.State == store.StateAnswered {
		return g.replay(rec, fp, false)
	}
	err := errors.New("HEAD is answered only for an answered notification: it is never forwarded")
	o := refuse(BadRequest, http.StatusMethodNotAllowed, err.Error(), err)
	o.Allow = "GET, POST"
	return o
}

// replay answers a copy of an answered key, or refuses it when its
// fingerprint differs.
func (g *Gate) replay(rec *store.Record, fp string, waited bool) Outcome {
	if fp != "" && rec.Fingerprint != "" && fp != rec.Fingerprint {
		return conflict(rec.Copies)
	}
	l := Replayed
	if waited {
		l = Waited
	}
	return Outcome{Action: Replay, Label: l, Copies: rec.Copies, Record: rec}
}

func conflict(copies int64) Outcome {
	o := refuse(Conflict, http.StatusUnprocessableEntity, MsgConflict,
		errors.New("same key, different fingerprint: possible tampering"))
	o.Copies = copies
	return o
}

// storeFailed applies on_store_error. A store that no longer fits (a
// Redis turned evicting) is refused as at start: pass is for a store that
// is down, not one that forgets.
func (g *Gate) storeFailed(err error) Outcome {
	if g.PassOnStoreError && !errors.Is(err, store.ErrUnfit) {
		return Outcome{Action: Pass, Label: Passed, Err: err, StoreOp: "claim"}
	}
	return StoreFailure("claim", err, fmt.Errorf("idempotency store unavailable: %w", err))
}

// claim claims key, bounded by store_timeout and not by the request: a
// claim that was sent is the key's, and its outcome must be known even if
// the platform hangs up meanwhile (storeContext).
func (g *Gate) claim(key, fp string) (store.ClaimResult, error) {
	ctx, cancel := g.storeContext()
	defer cancel()
	return g.Route.Store().Claim(ctx, key, fp, g.LockTTL)
}
