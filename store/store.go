// Package store holds the stores behind idemgate: the place where an
// idempotency key is claimed by exactly one request, where the answer to that
// request is remembered, and from where it is replayed to every duplicate.
//
// Three stores implement [Store]: an embedded one on a bbolt file (the default,
// one process, survives restarts), an in-memory one (tests and throw-away
// setups) and a Redis one (several gateway instances; single, Sentinel or
// Cluster). All of them give the same guarantees, which the contract tests in
// this package check against each:
//
//   - Claim is atomic: of any number of concurrent claimers of one key, on any
//     number of gateway instances sharing the store, exactly one wins and gets a
//     random owner token.
//   - Complete, Release and Renew act only while the caller's token still owns
//     the claim; otherwise they return ErrNotOwner and change nothing.
//   - A claim that is neither completed nor renewed expires after its lock TTL,
//     so a gateway that dies mid-request never blocks a key forever.
//
// This package must not import Caddy: it is plain Go, testable alone.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinel errors. Stores wrap transport failures in their own errors; these
// are the ones callers branch on.
var (
	// ErrNotOwner: the token given no longer owns the claim (it expired and
	// perhaps another request claimed the key since, or it was purged).
	ErrNotOwner = errors.New("store: claim not held by this owner")
	// ErrNotFound: no record for the key.
	ErrNotFound = errors.New("store: no such key")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: store closed")
	// ErrUnfit: the store's server no longer keeps what the gateway's
	// promise needs (a Redis that turned evicting after start): claims are
	// refused until it is fixed, whatever on_store_error says.
	ErrUnfit = errors.New("store: the store's server no longer fits the gateway")
	// ErrNoExtension: the store does not implement the extension a
	// caller needs (see As).
	ErrNoExtension = errors.New("store: store lacks a feature")
)

// State is where a key stands.
type State string

const (
	// StateInFlight: claimed, its first copy is at the backend.
	StateInFlight State = "in_flight"
	// StateAnswered: the backend's successful answer is remembered.
	StateAnswered State = "answered"
	// StateFailed and StateDead: see journal.go.
)

// Outcome is the answer to a Claim.
type Outcome int

const (
	// Won: the caller owns the key and must forward the request, then
	// Complete or Release with the token it got.
	Won Outcome = iota + 1
	// InFlight: another request owns the key and has not answered yet.
	InFlight
	// Answered: the key has a remembered answer, returned with the claim.
	Answered
	// Conflict: the key exists with another fingerprint.
	Conflict
)

func (o Outcome) String() string {
	switch o {
	case Won:
		return "won"
	case InFlight:
		return "in_flight"
	case Answered:
		return "answered"
	case Conflict:
		return "conflict"
	}
	return "unknown"
}

// Record is what a store keeps for one key.
type Record struct {
	Key   string `json:"key"`
	State State  `json:"state"`

	// The remembered answer (StateAnswered only).
	Status int         `json:"status,omitempty"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// BodyCached is false when the answer's body was larger than the
	// store's cap: the key is answered but the body is not replayed.
	BodyCached bool `json:"body_cached"`
	// FromOrder: the key's own record is gone (its ttl passed), and its
	// order remembers that its business event ran (see Order): Claim
	// answers it so, with no answer to replay; FirstSeen, LastSeen and
	// Changed are when the event ran.
	FromOrder bool `json:"from_order,omitempty"`

	// Fingerprint is an opaque digest of what must match between copies of
	// one key; empty means "no fingerprint check".
	Fingerprint string `json:"fingerprint,omitempty"`
	// Copies counts every claim of the key, the first included.
	Copies int64 `json:"copies"`
	// Conflicts counts claims refused for a different fingerprint.
	Conflicts int64     `json:"conflicts,omitempty"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// ExpiresAt is when the state ends: for an in-flight claim its lock
	// (then the key is free and the record reads as failed, if it holds a
	// journal, or is gone), for answered and failed records their ttl.
	ExpiresAt time.Time `json:"expires_at"`
	// Changed is when the record entered its state; listings are ordered
	// by it, newest first.
	Changed time.Time `json:"changed"`
	// Dead marks a record whose last attempt ended its deliveries for
	// good (Attempt.Dead): failed, it reads dead at once (StateAt). The
	// settle that journals the attempt writes the mark in the record
	// itself, so List sees it without the attempts; the next claim (a
	// redelivery) clears it. A record stored before the mark has none.
	Dead bool `json:"dead,omitempty"`

	// The journal (see Journal). Lookup fills Notification and Attempts;
	// Claim and List leave them out.
	CopyOutcomes CopyCounts    `json:"copy_outcomes"`
	AttemptCount int64         `json:"attempt_count"`
	Notification *Notification `json:"notification,omitempty"`
	Attempts     []Attempt     `json:"attempts,omitempty"`
}

// ClaimResult is what Claim found or did.
type ClaimResult struct {
	Outcome Outcome
	// Token is the owner token when Outcome is Won.
	Token string
	// Record is the stored record for InFlight and Conflict (metadata
	// only: state, fingerprint, copies, times). For Answered it holds at
	// least what a replay needs: the answer, Key, State, Fingerprint,
	// Copies, CopyOutcomes.Replayed, FirstSeen, LastSeen and ExpiresAt; a
	// store may leave the rest zero (the Redis store does: reading every
	// field cost a replay 45% more of Redis's work), and Lookup has them.
	// It is nil for Won: the caller knows what it just claimed.
	Record *Record
}

// Answer is what Complete stores.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
	// BodyCached false: Body is dropped (too large) but the key is answered.
	BodyCached bool
	// Order, when set, remembers in the key's order that its business
	// event ran (see Order).
	Order *OrderRun
}

// Store is the claim contract: what the gate needs on the request path,
// and all it needs. Every store implements it and every extension besides
// (Lister, Recovery, OrderBook, OrderIndex, Searcher, RefusedLog, Queuer):
// the extensions serve the operator, reconciliation and async delivery,
// and are apart so the request path depends on the claim contract alone
// and each feature's callers name the one they use. Keys are opaque
// strings of any bytes; stores namespace them. Every method honours ctx's
// deadline.
type Store interface {
	// Claim atomically claims key for lockTTL if it is free (Won, with a new
	// token). Otherwise it counts the copy (Copies+1, LastSeen) and returns
	// InFlight or Answered — or Conflict when fingerprint is not empty and
	// differs from the stored one (counted in Conflicts, Copies unchanged).
	// A key with no record whose business event ran in its order (see
	// Order) is Answered with a FromOrder record, and nothing is written.
	Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (ClaimResult, error)

	// Complete stores the answer for a key the token owns, keeps it (and
	// the journal j) for ttl and wakes the key's waiters; with
	// answer.Order, the key's order remembers its event ran, for
	// answer.Order.TTL. ErrNotOwner if the token lost the claim.
	Complete(ctx context.Context, key, token string, answer Answer, ttl time.Duration, j Journal) error

	// Release frees a claim the token owns (the backend failed, so the
	// platform's retry must go through): the record stays, in StateFailed
	// with the journal j, for ttl, and the key's next Claim wins. It wakes
	// the key's waiters. A ttl of 0 keeps nothing: the key is forgotten.
	// ErrNotOwner if the token lost the claim.
	Release(ctx context.Context, key, token string, ttl time.Duration, j Journal) error

	// Leave journals j on a claim the token owns and leaves the claim to
	// run out at its lock TTL (an ambiguous outcome: the backend may have
	// run). The record is then kept, failed, for ttl. ErrNotOwner if the
	// token lost the claim.
	Leave(ctx context.Context, key, token string, ttl time.Duration, j Journal) error

	// Renew extends a claim the token owns to lockTTL from now.
	// ErrNotOwner if the token lost the claim.
	Renew(ctx context.Context, key, token string, lockTTL time.Duration) error

	// Lookup returns the record for key with its journal, or ErrNotFound.
	// It counts nothing. A failed record is returned (StateFailed): the key
	// is free, but its history is kept.
	Lookup(ctx context.Context, key string) (*Record, error)

	// Wait returns a channel that is closed once key is completed, released
	// or deleted, after Wait returned. The caller must call stop when done
	// waiting. Subscribe first, then re-check with Lookup or Claim, so a
	// completion between the two is not missed. A completion may wake only
	// the waiters of a key a Claim has found in flight (the waiting copy's
	// own: WaitAnswer's protocol), so a first copy nobody duplicated costs
	// Redis no PUBLISH; a release or a delete wakes every waiter.
	Wait(ctx context.Context, key string) (done <-chan struct{}, stop func(), err error)

	// Close releases the store's resources.
	Close() error
}

// As returns s as the extension X (Lister, Recovery, OrderBook, …), or
// ErrNoExtension with what the store lacks, in words ("listings").
// Every store of this package implements every extension; a wrapper (a
// test's fault injector) may not.
func As[X any](s Store, what string) (X, error) {
	x, ok := s.(X)
	if !ok {
		return x, fmt.Errorf("%w: store %T keeps no %s", ErrNoExtension, s, what)
	}
	return x, nil
}
