// Package cache holds the stores behind idemgate: the place where an
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
package cache

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Sentinel errors. Stores wrap transport failures in their own errors; these
// are the ones callers branch on.
var (
	// ErrNotOwner: the token given no longer owns the claim (it expired and
	// perhaps another request claimed the key since, or it was purged).
	ErrNotOwner = errors.New("cache: claim not held by this owner")
	// ErrNotFound: no record for the key.
	ErrNotFound = errors.New("cache: no such key")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("cache: store closed")
)

// State is where a key stands.
type State string

const (
	// StateInFlight: claimed, its first copy is at the backend.
	StateInFlight State = "in_flight"
	// StateAnswered: the backend's successful answer is remembered.
	StateAnswered State = "answered"
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

	// Fingerprint is an opaque digest of what must match between copies of
	// one key; empty means "no fingerprint check".
	Fingerprint string `json:"fingerprint,omitempty"`
	// Copies counts every claim of the key, the first included.
	Copies int64 `json:"copies"`
	// Conflicts counts claims refused for a different fingerprint.
	Conflicts int64     `json:"conflicts,omitempty"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// ExpiresAt is when the store forgets the record (the lock TTL for an
	// in-flight claim, the answer TTL for an answered one).
	ExpiresAt time.Time `json:"expires_at"`
}

// ClaimResult is what Claim found or did.
type ClaimResult struct {
	Outcome Outcome
	// Token is the owner token when Outcome is Won.
	Token string
	// Record is the stored record for Answered (with the answer), InFlight
	// and Conflict (metadata only: state, fingerprint, copies, times).
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
}

// Store is the claim/complete/release/renew/lookup contract every store
// implements. Keys are opaque strings of any bytes; stores namespace them.
// Every method honours ctx's deadline.
type Store interface {
	// Claim atomically claims key for lockTTL if it is free (Won, with a new
	// token). Otherwise it counts the copy (Copies+1, LastSeen) and returns
	// InFlight or Answered — or Conflict when fingerprint is not empty and
	// differs from the stored one (counted in Conflicts, Copies unchanged).
	Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (ClaimResult, error)

	// Complete stores the answer for a key the token owns, keeps it for ttl
	// and wakes the key's waiters. ErrNotOwner if the token lost the claim.
	Complete(ctx context.Context, key, token string, answer Answer, ttl time.Duration) error

	// Release forgets a claim the token owns (the backend failed, so the
	// platform's retry must go through) and wakes the key's waiters.
	// ErrNotOwner if the token lost the claim.
	Release(ctx context.Context, key, token string) error

	// Renew extends a claim the token owns to lockTTL from now.
	// ErrNotOwner if the token lost the claim.
	Renew(ctx context.Context, key, token string, lockTTL time.Duration) error

	// Lookup returns the record for key, or ErrNotFound. It counts nothing.
	Lookup(ctx context.Context, key string) (*Record, error)

	// Wait returns a channel that is closed once key is completed, released
	// or deleted, after Wait returned. The caller must call stop when done
	// waiting. Subscribe first, then re-check with Lookup or Claim, so a
	// completion between the two is not missed.
	Wait(ctx context.Context, key string) (done <-chan struct{}, stop func(), err error)

	// Delete forgets key whatever its state (the admin purge) and wakes its
	// waiters. ErrNotFound if there was nothing.
	Delete(ctx context.Context, key string) error

	// InFlight lists in-flight claims, at most limit of them, starting at an
	// opaque cursor ("" for the first page). next is "" on the last page.
	// Stores bound the work per call; a page may hold fewer than limit
	// records even when next is not "".
	InFlight(ctx context.Context, cursor string, limit int) (recs []*Record, next string, err error)

	// Close releases the store's resources.
	Close() error
}
