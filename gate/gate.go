// Package gate is the request path of the idempotency gateway, free of
// Caddy: one notification is parsed and verified (parse.go), its key
// claimed and the claim's result turned into what to do (decide.go):
// forward it, replay an answer, or refuse it; a forwarded copy's claim is
// then settled by what the backend did (settle.go).
//
// Decide, then act: the gate returns an Outcome and writes nothing. The
// adapter (the Caddy handler) writes the answer, calls the backend and
// records the outcome once (log line, span, metrics). Optional features
// attach at named points of Route and Queue, so the path reads without
// them.
package gate

import (
	"context"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// Gate is one route's request path: its settings and the points its
// features attach at. It holds no per-request state.
type Gate struct {
	Config
	// Platform verifies and parses the route's notifications.
	Platform keying.Platform
	// Route is the route the gate serves (its store, templates, orders).
	Route Route
	// Queue is the route's delivery queue (deliver async); nil delivers
	// through the backend in the request (sync).
	Queue Queue
}

// Config is a route's settings, resolved.
type Config struct {
	LockTTL      time.Duration // a claim's life without renewal
	TTL          time.Duration // an answer's life
	InFlightWait time.Duration // how long a copy waits for the first
	StoreTimeout time.Duration // bounds each store call
	// RejectInFlight answers a copy of an in-flight key 409 at once
	// (in_flight reject) instead of waiting.
	RejectInFlight bool
	// PassOnStoreError forwards unprotected when the store cannot claim
	// (on_store_error pass).
	PassOnStoreError bool
	MaxBody          int64 // bounds the body read
	// Verified: the route checks signatures (a preset, not verify_off), so
	// each notification names the key that verified it.
	Verified bool
	// Ceiling bounds a forwarded request once the platform's connection
	// no longer does (default: BackendCeiling).
	Ceiling time.Duration
}

// Route is what the gate asks of the route it serves.
type Route interface {
	// Store and Settler are where claims and answers live; read at each
	// call, as they are set when the route starts.
	Store() store.Store
	Settler() *store.Settler
	// VerifyTime is the time a request's signature is judged against.
	VerifyTime(r *http.Request) time.Time
	// VerifiedBy names the key that verified kr (id, for the log; label,
	// a bounded metric label).
	VerifiedBy(kr *keying.Request) (id, label string)
	// Keys renders the route's key and fingerprint templates for a
	// verified notification (key is set when only the fingerprint
	// failed).
	Keys(r *http.Request, n *keying.Notification, body []byte) (key, fp string, err error)
	// OrderRun is what key's order remembers once it ran (nil: none).
	OrderRun(key string, n *keying.Notification) *store.OrderRun
	// ClaimTrouble reports a claim that could not be settled or renewed;
	// store.ErrNotOwner: it was lost.
	ClaimTrouble(key, op string, err error)
	// Kept reports an answer the store could not take now, kept in this
	// process and retried (store.Settler); Settled, that a retry stored
	// it (a failed retry is a ClaimTrouble).
	Kept(key string)
	Settled(key string)
}

// Queue is a route's delivery queue (deliver async), where a won claim
// goes instead of the backend.
type Queue interface {
	// Enqueue holds claim c for its delivery and queues the notification:
	// an Ack, or a refusal (the claim freed) when the store fails.
	Enqueue(ctx context.Context, r *http.Request, c Claim) Outcome
	// Copy answers a copy of an in-flight key: an Ack when the key is
	// queued, a Replay when its delivery ended, else a refusal; again when
	// the key was released meanwhile (the copy is a retry: claim again).
	Copy(ctx context.Context, key, fp string, copies int64) (o Outcome, again bool)
}

// Claim is a won claim on a key.
type Claim struct {
	Key, Token, Fingerprint string
	// Run is what the key's order remembers once it ran; nil: none.
	Run *store.OrderRun
	// Body is the request's body as the gate read it, and MerchantRefs
	// the merchant's references its verified notification named
	// (keying.Notification.MerchantRefs): what the journal keeps of the
	// copy, handed over here rather than read back from the request.
	Body         []byte
	MerchantRefs []string
}

// storeContext bounds one store call of the request path (the claim, the
// completion) by store_timeout. It carries neither the request's values
// nor its cancellation: a store call that was sent learns its outcome
// even when the platform has hung up (the claim of a copy whose platform
// left is still the key's claim, and its backend answer is still
// remembered for the retry). On Redis it sets no timer
// (store.CallContext).
func (g *Gate) storeContext() (context.Context, context.CancelFunc) {
	return store.CallContext(g.Route.Store(), g.StoreTimeout)
}
