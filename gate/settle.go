package gate

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/store"
)

// BackendCeiling bounds a forwarded request once the platform's
// connection no longer does.
const BackendCeiling = 10 * time.Minute

// Kind is what became of a forwarded request.
type Kind int

const (
	// BackendAnswered: the backend answered success by the platform's
	// rule.
	BackendAnswered Kind = iota + 1
	// BackendRefused: the backend answered, not a success.
	BackendRefused
	// BackendNotReached: the request never reached the backend.
	BackendNotReached
	// BackendUnknown: the request may have reached the backend, and no
	// whole answer came back.
	BackendUnknown
)

// Label is what a forward that came to k is recorded as.
func (k Kind) Label() Label {
	switch k {
	case BackendAnswered:
		return Forwarded
	case BackendRefused:
		return BackendFailed
	case BackendNotReached:
		return BackendUnreachable
	}
	return Ambiguous
}

// Answer is what the backend did with a forwarded copy, as the adapter
// saw it.
type Answer struct {
	Kind   Kind
	Status int // the answer's status (200 when none was written)
	Header http.Header
	// Body is the answer's body, whole when BodyCached (it fit
	// max_answer); the gate copies what it keeps.
	Body       []byte
	BodyCached bool
	Attempt    *store.Attempt // what the journal keeps of the attempt
	Hint       string         // for BackendRefused: how another success rule would take it
	Err        error          // what the backend's handler returned
}

// Backend sends the claimed copy to the backend with ctx, which outlives
// the platform's connection, and tells what became of it; start is when
// the forward began.
type Backend func(ctx context.Context, start time.Time) Answer

// Forward sends claim c's copy to the backend, renewing the claim while
// the backend works, and settles the claim by what the backend did:
// completed (answered), released for the platform's retry (failed,
// unreachable) or left held until lock_ttl (ambiguous). The settling is
// deferred, so a panic (reverse_proxy's http.ErrAbortHandler when the
// backend breaks mid-answer) settles too: ambiguous. note is the
// notification for the journal (nil: none kept).
func (g *Gate) Forward(ctx context.Context, c Claim, note *store.Notification, send Backend) Outcome {
	defer g.Route.Settler().Local(c.Key).Settled() // runs after the claim is settled below
	start := time.Now()
	// The backend's request outlives the platform's connection: platforms
	// hang up after a few seconds, and a backend cut off mid-way leaves an
	// outcome nobody knows. Let it finish, remember its answer, and the
	// platform's retry gets the replay. The hold's timer cuts it off at the
	// ceiling, so a hung backend does not hold the key (renewed) forever;
	// the timer the hold runs anyway, rather than a context's own.
	bctx, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	hold := g.hold(c.Key, c.Token, note, start.Add(g.ceiling()), cut)
	settled := false
	defer func() {
		if !settled {
			// Ambiguous: the claim is left to expire after lock_ttl. The
			// adapter records it (it presets the outcome).
			hold.stop()
			g.leave(c.Key, c.Token, store.Journal{Notification: note, Attempt: &store.Attempt{
				Start: start, Duration: time.Since(start), Outcome: store.AttemptAmbiguous}})
		}
	}()

	a := send(bctx, start)
	took := time.Since(start)
	hold.stop()
	settled = true

	o := Outcome{Action: Forward, Label: a.Kind.Label(), Claim: c, Key: c.Key, Status: a.Status, Backend: took, Err: a.Err}
	j := store.Journal{Notification: note, Attempt: a.Attempt}
	switch a.Kind {
	case BackendAnswered:
		o.Err = nil
		ans := store.Answer{Status: a.Status, Header: a.Header, BodyCached: a.BodyCached, Order: c.Run}
		if ans.BodyCached {
			ans.Body = bytes.Clone(a.Body)
		}
		g.complete(c.Key, c.Token, c.Fingerprint, ans, j)
	case BackendRefused, BackendNotReached:
		o.Hint = a.Hint
		g.release(c.Key, c.Token, j)
	default:
		// The request may have reached the backend. The claim is held
		// until lock_ttl runs out, so an immediate retry does not run the
		// business logic twice, and a later one can.
		g.leave(c.Key, c.Token, j)
	}
	return o
}

func (g *Gate) ceiling() time.Duration {
	if g.Ceiling > 0 {
		return g.Ceiling
	}
	return BackendCeiling
}

// complete remembers a successful answer; when the store cannot take it
// now, the settler keeps it and retries (store.Settler).
func (g *Gate) complete(key, token, fp string, ans store.Answer, j store.Journal) {
	ctx, cancel := g.storeContext()
	defer cancel()
	err := g.Route.Settler().Complete(ctx, key, token, fp, ans, g.TTL, j, func(err error) {
		if err != nil {
			g.Route.ClaimTrouble(key, "complete", err)
			return
		}
		g.Route.Settled(key)
	})
	switch {
	case errors.Is(err, store.ErrKept):
		g.Route.Kept(key)
	case err != nil:
		g.Route.ClaimTrouble(key, "complete", err)
	}
}

// release frees the key for the platform's retry; the record stays,
// failed, with its journal.
func (g *Gate) release(key, token string, j store.Journal) {
	ctx, cancel := context.WithTimeout(context.Background(), g.StoreTimeout)
	defer cancel()
	if err := g.Route.Store().Release(ctx, key, token, g.TTL, j); err != nil {
		g.Route.ClaimTrouble(key, "release", err)
	}
}

// leave journals an ambiguous attempt; the claim is held until lock_ttl
// runs out, then the key is free and the record reads as failed.
func (g *Gate) leave(key, token string, j store.Journal) {
	ctx, cancel := context.WithTimeout(context.Background(), g.StoreTimeout)
	defer cancel()
	if err := g.Route.Store().Leave(ctx, key, token, g.TTL, j); err != nil {
		g.Route.ClaimTrouble(key, "leave", err)
	}
}

// heldClaim is a won claim while its copy is at the backend: renewed at a
// third of lock_ttl until stop, which waits for a renewal under way. A
// timer, not a goroutine per request: most backends answer before it
// first fires.
type heldClaim struct {
	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	cancel  context.CancelFunc // the store call under way, if any
	busy    sync.WaitGroup

	ceiling time.Time          // when the backend's request is cut off
	cut     context.CancelFunc // cuts it off
	// note is the notification the timer's first run journals, nil once
	// it did (or when none is kept); only the timer's runs read it.
	note *store.Notification
}

// KeepAfter: a claim still at the backend this long journals its
// notification (see hold).
const KeepAfter = 250 * time.Millisecond

// hold renews the claim while the backend works. A backend slower than
// KeepAfter gets its notification journaled on the claim as well (Leave,
// without an attempt): should this gateway die before it settles, the
// record outlives the claim as a failed notification an operator can see
// and redeliver, instead of vanishing with the lock. Fast backends, most of
// them, cost nothing extra.
//
// At ceiling it calls cut, which ends the backend's request; the renewals
// go on until the forward settles the claim (stop).
func (g *Gate) hold(key, token string, note *store.Notification, ceiling time.Time, cut context.CancelFunc) *heldClaim {
	c := &heldClaim{ceiling: ceiling, cut: cut, note: note}
	every := g.LockTTL / 3
	first := every
	if note != nil {
		first = min(KeepAfter, every)
	}
	// Set under the lock: a run (begin) waits for the timer to be known.
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = time.AfterFunc(c.until(first), func() {
		ctx, ok := c.begin()
		if !ok {
			return
		}
		defer c.end(every)
		if !time.Now().Before(c.ceiling) {
			c.cut()
		}
		op, call := "renew", func(ctx context.Context) error {
			return g.Route.Store().Renew(ctx, key, token, g.LockTTL)
		}
		if n := c.note; n != nil {
			// Once: the later runs of this timer renew.
			c.note = nil
			op, call = "keep", func(ctx context.Context) error {
				return g.Route.Store().Leave(ctx, key, token, g.TTL, store.Journal{Notification: n})
			}
		}
		if err := g.storeCall(ctx, call); err != nil && ctx.Err() == nil {
			g.Route.ClaimTrouble(key, op, err)
			if errors.Is(err, store.ErrNotOwner) {
				c.halt()
			}
		}
	})
	return c
}

// begin starts one run of the timer, unless the claim was stopped.
func (c *heldClaim) begin() (context.Context, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, false
	}
	var ctx context.Context
	ctx, c.cancel = context.WithCancel(context.Background())
	c.busy.Add(1)
	return ctx, true
}

// until is d, or less when the ceiling comes sooner.
func (c *heldClaim) until(d time.Duration) time.Duration {
	if left := time.Until(c.ceiling); left > 0 {
		return min(d, left)
	}
	return d
}

// end finishes a run and sets the next one.
func (c *heldClaim) end(next time.Duration) {
	c.mu.Lock()
	c.cancel()
	c.cancel = nil
	if !c.stopped {
		c.timer.Reset(c.until(next))
	}
	c.mu.Unlock()
	c.busy.Done()
}

// stop ends the renewals and waits for one under way (its store call is
// canceled).
func (c *heldClaim) stop() {
	c.mu.Lock()
	c.stopped = true
	c.timer.Stop()
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
	c.busy.Wait()
}

// halt, from the timer's own run, sets no further run: the claim is lost.
func (c *heldClaim) halt() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
}

// storeCall runs one store call bounded by store_timeout.
func (g *Gate) storeCall(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.StoreTimeout)
	defer cancel()
	return call(ctx)
}
