package caddymodule

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/journal"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/orders"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/store"
)

// The Caddy side of the request path: the gate (package gate) decides,
// ServeHTTP acts on its outcome (writes the answer, or calls the next
// handler for a forward, which the gate then settles), and record
// (decision.go) records it once.

// ServeHTTP runs one notification through the gate; see the contract's
// answer table. The outcome is recorded once (decision.go), also when the
// backend's handler panics.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.run.recovery.Seen(r, next, h.reg) {
		return nil // a redelivery's probe looking for its route (package redeliver)
	}
	start := time.Now()
	ctx, span := startSpan(r, h.Platform)
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	var res result
	defer func() { h.record(ctx, span, repl, start, &res) }()

	var o gate.Outcome
	if err := h.start(); err != nil {
		o = h.gate.StoreDown(err) // the store did not open
	} else {
		o = h.gate.Decide(r)
	}
	res = resultOf(o)
	return h.act(w, r, next, repl, o, &res)
}

// act does what the gate decided. A forward goes to the backend, and what
// became of it replaces the decision in res.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *caddy.Replacer,
	o gate.Outcome, res *result,
) error {
	switch o.Action {
	case gate.Forward:
		// What a panic past this point leaves: reverse_proxy panics with
		// http.ErrAbortHandler when the backend breaks mid-answer.
		res.outcome = outcomeAmbiguous
		setOutcome(repl, outcomeForwarded)
		settled := resultOf(h.forward(w, r, next, o.Claim))
		settled.key, settled.keyID, settled.verified = res.key, res.keyID, res.verified
		settled.published = outcomeForwarded
		if settled.outcome == outcomeBackendFailed || settled.outcome == outcomeBackendUnreachable {
			settled.journal = journal.ReadFailed(h.store, settled.key, time.Duration(h.StoreTimeout), h.app.Now, h.retryWindow())
		}
		*res = settled
		return settled.err
	case gate.Replay:
		setOutcome(repl, res.outcome)
		res.published = res.outcome
		return h.replay(w, r, repl, o.Record)
	case gate.Ack:
		setOutcome(repl, res.outcome)
		res.published = res.outcome
		return writeAck(w, r, h.dlv.ack, false)
	case gate.Pass:
		passed := *res
		res.outcome = outcomeAmbiguous // as for a forward, should the next handler panic
		h.logger.Warn("store unreachable: forwarding WITHOUT idempotency protection (on_store_error pass)",
			zap.String("key", h.obs.LogKey(o.Key)), zap.Error(o.Err))
		setOutcome(repl, outcomePassed)
		err := next.ServeHTTP(w, r)
		*res = passed
		return err
	case gate.Drop:
		return caddyhttp.Error(499, o.Err)
	}
	if o.RetryAfter {
		w.Header().Set("Retry-After", "5")
	}
	if o.Allow != "" {
		w.Header().Set("Allow", o.Allow)
	}
	return h.refuse(w, r, o.Status, o.Msg, o.Cause, o.Body)
}

// resultOf is the result to record of a gate's outcome.
func resultOf(o gate.Outcome) result {
	res := result{key: o.Key, keyID: o.KeyID, outcome: outcome(o.Label), copies: o.Copies, err: o.Err,
		storeOp: o.StoreOp, verified: o.Verified}
	if o.Action == gate.Forward {
		res.status, res.backend, res.hint = o.Status, o.Backend, o.Hint
	}
	return res
}

// provisionGate builds the route's gate from its resolved settings.
func (h *Handler) provisionGate() {
	h.gate = &gate.Gate{
		Config: gate.Config{
			LockTTL: time.Duration(h.LockTTL), TTL: time.Duration(h.TTL),
			InFlightWait: time.Duration(h.InFlightWait), StoreTimeout: time.Duration(h.StoreTimeout),
			RejectInFlight: h.InFlight == "reject", PassOnStoreError: h.OnStoreError == "pass",
			MaxBody: h.MaxBody, Verified: h.Platform != platforms.Default && !h.VerifyOff,
			Ceiling: h.opts.backendCeiling(),
		},
		Platform: h.platform,
		Route:    gateRoute{h},
	}
	if h.async() {
		h.gate.Queue = asyncQueue{h}
	}
}

// gateRoute is the handler as the gate's Route.
type gateRoute struct{ h *Handler }

func (g gateRoute) Store() store.Store                             { return g.h.store }
func (g gateRoute) Settler() *store.Settler                        { return g.h.settler }
func (g gateRoute) VerifyTime(r *http.Request) time.Time           { return g.h.verifyTime(r) }
func (g gateRoute) VerifiedBy(kr *keying.Request) (string, string) { return g.h.keys.verifiedBy(kr) }
func (g gateRoute) Keys(r *http.Request, n *keying.Notification, body []byte) (string, string, error) {
	return g.h.renderKeys(r, n, body)
}

func (g gateRoute) OrderRun(key string, n *keying.Notification) *store.OrderRun {
	return orders.RunOf(g.h.preset(), time.Duration(g.h.OrderTTL), key, n)
}

func (g gateRoute) ClaimTrouble(key, op string, err error) { g.h.obs.ClaimTrouble(key, op, err) }

func (g gateRoute) Kept(key string) {
	g.h.obs.StoreError("complete")
	g.h.logger.Warn("store failed to remember the backend's answer: kept in this process and retried",
		zap.String("key", g.h.obs.LogKey(key)))
}

func (g gateRoute) Settled(key string) {
	g.h.logger.Info("answer settled in the store after a retry", zap.String("key", g.h.obs.LogKey(key)))
}

var (
	_ gate.Route = gateRoute{}
	_ gate.Queue = asyncQueue{}
)
