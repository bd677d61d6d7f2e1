package caddymodule

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/cache"
)

// backendCeiling bounds a forwarded request once the platform's connection
// no longer does.
const backendCeiling = 10 * time.Minute

// ceiling is backendCeiling, or a test's.
func (h *Handler) ceiling() time.Duration {
	if h.testCeiling > 0 {
		return h.testCeiling
	}
	return backendCeiling
}

// forward sends the winning copy to the backend, renewing the claim while
// the backend works, and settles the claim by what the backend did. The
// settling is deferred, so a panic (reverse_proxy's http.ErrAbortHandler
// when the backend breaks mid-answer) or an early return settles too:
// ambiguous, the claim held until lock_ttl.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	repl *caddy.Replacer, key, fp, token string, nt notice,
) (res result, err error) {
	setOutcome(repl, outcomeForwarded)
	defer h.settler.Local(key)() // runs after the claim is settled below
	note := h.notification(r)
	start := time.Now()
	// The backend's request outlives the platform's connection: platforms
	// hang up after a few seconds, and a backend cut off mid-way leaves an
	// outcome nobody knows. Let it finish, remember its answer, and the
	// platform's retry gets the replay. The hold's timer cuts it off at the
	// ceiling, so a hung backend does not hold the key (renewed) forever;
	// the timer the hold runs anyway, rather than a context's own.
	bctx, cut := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cut()
	hold := h.hold(key, token, note, start.Add(h.ceiling()), cut)
	settled := false
	defer func() {
		if !settled {
			// Ambiguous: the claim is left to expire after lock_ttl. The
			// decision record logs it (ServeHTTP presets the outcome).
			hold.stop()
			h.leave(key, token, cache.Journal{Notification: note, Attempt: &cache.Attempt{
				Start: start, Duration: time.Since(start), Outcome: cache.AttemptAmbiguous}})
		}
	}()

	tw := newTeeWriter(w, int(h.MaxAnswer))
	defer tw.release()
	sent := &sendTrace{}
	bctx = httptrace.WithClientTrace(bctx, sent.clientTrace())
	err = next.ServeHTTP(tw, r.WithContext(bctx))
	took := time.Since(start)

	var body []byte
	if !tw.overflow {
		body = tw.buf.Bytes()
	}
	kind := classify(backendResult{
		err: err, attempted: sent.attempted.Load(), written: sent.written.Load(),
		answered: tw.wroteHeader, success: err == nil && h.success.judge(r.Method, tw.statusCode(), tw.header, body),
	})
	hold.stop()
	settled = true

	res = result{outcome: kind.outcome(), status: tw.statusCode(), backend: took, err: err}
	j := cache.Journal{Notification: note, Attempt: attemptOf(r, kind, start, tw, body, err)}
	switch kind {
	case backendAnswered:
		res.err = nil
		ans := cache.Answer{Status: tw.statusCode(), Header: tw.header, BodyCached: !tw.overflow, Order: nt.run}
		if ans.BodyCached {
			ans.Body = bytes.Clone(body)
		}
		h.complete(key, token, fp, ans, j)
	case backendFailed, backendUnreachable:
		if kind == backendFailed {
			res.hint = h.success.hint(r.Method, tw.statusCode(), tw.header, body)
		}
		h.release(key, token, j)
		res.journal = h.failedJournal(key)
	default:
		h.leave(key, token, j)
	}
	// backendAmbiguous: the request may have reached the backend. The
	// claim is held until lock_ttl runs out, so an immediate retry does
	// not run the business logic twice, and a later one can.
	if kind == backendAnswered || kind == backendFailed {
		return res, nil
	}
	return res, err
}

// backendKind is what became of a forwarded request.
type backendKind int

const (
	// backendAnswered: the backend answered success by the platform's rule.
	backendAnswered backendKind = iota + 1
	// backendFailed: the backend answered, not a success.
	backendFailed
	// backendUnreachable: the request never reached the backend.
	backendUnreachable
	// backendAmbiguous: the request may have reached the backend, and no
	// whole answer came back.
	backendAmbiguous
)

func (k backendKind) outcome() outcome {
	switch k {
	case backendAnswered:
		return outcomeForwarded
	case backendFailed:
		return outcomeBackendFailed
	case backendUnreachable:
		return outcomeBackendUnreachable
	}
	return outcomeAmbiguous
}

// backendResult is what forward saw of the next handler's work.
type backendResult struct {
	err error // what the next handler returned
	// attempted: the HTTP transport took a connection for the request;
	// written: it wrote the request on one. Both stay false when the next
	// handler is not an HTTP proxy.
	attempted, written bool
	answered           bool // a response header reached the client
	success            bool // the answer is a success by the platform's rule
}

// classify is the one place that decides whether a forwarded request ran,
// failed, never left, or may have run: a pure function of what was seen.
func classify(b backendResult) backendKind {
	if b.err == nil {
		if b.success {
			return backendAnswered
		}
		return backendFailed
	}
	if b.answered || b.written {
		return backendAmbiguous
	}
	var de reverseproxy.DialError
	var he caddyhttp.HandlerError
	switch {
	case errors.As(b.err, &de):
		return backendUnreachable
	case b.attempted:
		// A connection was taken but nothing was written on it.
		return backendUnreachable
	case errors.As(b.err, &he) && he.StatusCode == http.StatusServiceUnavailable:
		// reverse_proxy's "no upstreams available": nothing was sent.
		return backendUnreachable
	}
	return backendAmbiguous
}

// sendTrace follows the forwarded request through the HTTP transport, and
// refuses a re-send: Go's transport silently re-sends a request it deems
// replayable (GET, or a bodiless request with an Idempotency-Key header)
// when a kept-alive connection breaks before the answer, and Caddy's own
// load-balancing retries re-send GETs. Once the request has been written,
// any further connection for it is closed before a byte goes out, so the
// backend never runs twice for one forward: the broken attempt is
// ambiguous instead.
type sendTrace struct {
	attempted, written atomic.Bool
	refused            atomic.Int32
}

func (s *sendTrace) clientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if s.written.Load() {
				s.refused.Add(1)
				_ = info.Conn.Close()
				return
			}
			s.attempted.Store(true)
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			// Even a failed write may have delivered part or all of the
			// request.
			s.written.Store(true)
		},
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
}

// keepAfter: a claim still at the backend this long journals its
// notification (see hold).
const keepAfter = 250 * time.Millisecond

// hold renews the claim while the backend works. A backend slower than
// keepAfter gets its notification journaled on the claim as well (Leave,
// without an attempt): should this gateway die before it settles, the
// record outlives the claim as a failed notification an operator can see
// and redeliver, instead of vanishing with the lock. Fast backends, most of
// them, cost nothing extra.
//
// At ceiling it calls cut, which ends the backend's request; the renewals
// go on until the forward settles the claim (stop).
func (h *Handler) hold(key, token string, note *cache.Notification, ceiling time.Time, cut context.CancelFunc) *heldClaim {
	c := &heldClaim{ceiling: ceiling, cut: cut}
	every := time.Duration(h.LockTTL) / 3
	first := every
	if note != nil {
		first = min(keepAfter, every)
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
			return h.store.Renew(ctx, key, token, time.Duration(h.LockTTL))
		}
		if n := note; n != nil {
			// Once: the later runs of this timer renew.
			note = nil
			op, call = "keep", func(ctx context.Context) error {
				return h.store.Leave(ctx, key, token, time.Duration(h.TTL), cache.Journal{Notification: n})
			}
		}
		if err := h.storeCall(ctx, call); err != nil && ctx.Err() == nil {
			h.claimTrouble(key, op, err)
			if errors.Is(err, cache.ErrNotOwner) {
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
func (h *Handler) storeCall(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(h.StoreTimeout))
	defer cancel()
	return call(ctx)
}

// complete remembers a successful answer; when the store cannot take it
// now, the settler keeps it and retries (cache.Settler).
func (h *Handler) complete(key, token, fp string, ans cache.Answer, j cache.Journal) {
	ctx, cancel := h.storeContext()
	defer cancel()
	err := h.settler.Complete(ctx, key, token, fp, ans, time.Duration(h.TTL), j, func(err error) {
		if err != nil {
			h.claimTrouble(key, "complete", err)
			return
		}
		h.logger.Info("answer settled in the store after a retry", zap.String("key", h.logKey(key)))
	})
	switch {
	case errors.Is(err, cache.ErrKept):
		h.metrics.storeError(ctx, h.route(), "complete")
		h.logger.Warn("store failed to remember the backend's answer: kept in this process and retried",
			zap.String("key", h.logKey(key)))
	case err != nil:
		h.claimTrouble(key, "complete", err)
	}
}

// release frees the key for the platform's retry; the record stays,
// failed, with its journal.
func (h *Handler) release(key, token string, j cache.Journal) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(h.StoreTimeout))
	defer cancel()
	if err := h.store.Release(ctx, key, token, time.Duration(h.TTL), j); err != nil {
		h.claimTrouble(key, "release", err)
	}
}

// leave journals an ambiguous attempt; the claim is held until lock_ttl
// runs out, then the key is free and the record reads as failed.
func (h *Handler) leave(key, token string, j cache.Journal) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(h.StoreTimeout))
	defer cancel()
	if err := h.store.Leave(ctx, key, token, time.Duration(h.TTL), j); err != nil {
		h.claimTrouble(key, "leave", err)
	}
}

// claimTrouble logs and counts a claim that could not be settled. A lost
// claim (ErrNotOwner) means another request may have run the backend too.
func (h *Handler) claimTrouble(key, op string, err error) {
	if errors.Is(err, cache.ErrNotOwner) {
		h.metrics.lostClaim(context.Background(), h.route(), op)
		h.emit("idempotency.lost_claim", key, 0)
		h.logger.Error("lost the claim on an idempotency key while its request was at the backend",
			zap.String("op", op), zap.String("key", h.logKey(key)), zap.Error(err))
		return
	}
	h.metrics.storeError(context.Background(), h.route(), op)
	h.logger.Error("store failed to settle a claim; it expires after lock_ttl",
		zap.String("op", op), zap.String("key", h.logKey(key)), zap.Error(err))
}
