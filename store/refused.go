package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// The refused list: notifications a gateway refused before claiming their
// key (a bad signature, an empty key, a body too large, a fingerprint
// conflict), kept in the store so that every gateway instance sharing it
// sees them — a key rotated on one side only shows up as a list of 401s
// with their bodies' prefixes, not only as a count in a chart. It is an
// extension beside the claim contract (Store): a store offers it by
// implementing RefusedLog, and callers ask with a type assertion.

// RefusedLog keeps the latest refusals of each scope.
type RefusedLog interface {
	// AddRefused keeps r, stamped with the store's time (the Redis
	// server's clock), and drops its scope's oldest beyond RefusedCap.
	// Fields past their bounds are cut (see Refusal).
	AddRefused(ctx context.Context, r Refusal) error
	// Refused lists the kept refusals q selects, newest first.
	Refused(ctx context.Context, q RefusedQuery) ([]Refusal, error)
}

// RefusedCap is how many refusals a store keeps per scope. A flood of bad
// requests only replaces the scope's list: the storage stays bounded.
const RefusedCap = 1000

// Bounds of what a refusal keeps.
const (
	// RefusedPrefixMax bounds the body's bytes kept.
	RefusedPrefixMax = 256
	refusedTextMax   = 256  // Reason, Route
	refusedKeyMax    = 1024 // the handler's own bound on keys
)

// Refusal is one refused notification. The body is kept only as its
// length, digest and first bytes, as received: operator output escapes
// what could steer a terminal. No header is kept, so no credential is.
type Refusal struct {
	// Time is when the store kept it.
	Time  time.Time `json:"time"`
	Scope string    `json:"scope"`
	// Route is the handler that refused it ("<scope>#<n>").
	Route  string `json:"route,omitempty"`
	Status int    `json:"status"`
	// Class is the reason class: the request's outcome
	// (rejected_signature, rejected_merchant, bad_request, too_large,
	// conflict).
	Class string `json:"class"`
	// Reason is what the sender was told (no internal detail).
	Reason string `json:"reason,omitempty"`
	// Key is the rendered key, when the refusal came after it (a
	// fingerprint conflict, a fingerprint that would not render).
	Key string `json:"key,omitempty"`
	// Length is the body's length in bytes; -1 when it was not read
	// (a 413 whose sender declared no length).
	Length int64 `json:"length"`
	// SHA256 is the hex digest of the whole body, when it was read.
	SHA256 string `json:"sha256,omitempty"`
	// Prefix is the body's first RefusedPrefixMax bytes (base64 in JSON).
	Prefix []byte `json:"prefix,omitempty"`
}

// RefusedQuery selects refusals (a capped list's query, capped.go): at
// most RefusedCap.
type RefusedQuery = ScopeQuery

// bound cuts r's fields to their bounds; the prefix is copied (the
// memory store keeps it, and the caller's buffer is the request's).
func (r *Refusal) bound() {
	r.Prefix = bytes.Clone(r.Prefix[:min(len(r.Prefix), RefusedPrefixMax)])
	r.Reason = cutText(r.Reason, refusedTextMax)
	r.Route = cutText(r.Route, refusedTextMax)
	r.Key = cutText(r.Key, refusedKeyMax)
}

func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.FullRuneInString(s[max(0, len(s)-utf8.UTFMax):]) {
		s = s[:len(s)-1]
	}
	return s
}

// newestFirst sorts refusals by time, newest first, and keeps limit.
func newestFirst(rs []Refusal, limit int) []Refusal {
	return mostRecent(rs, limit, func(a, b Refusal) int { return b.Time.Compare(a.Time) })
}

// refusedRing is the memory store's refused list: per scope, oldest first.
type refusedRing struct {
	mu     sync.Mutex
	scopes map[string][]Refusal
}

// AddRefused keeps r in memory (RefusedLog).
func (s *Memory) AddRefused(ctx context.Context, r Refusal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.bound()
	r.Time = s.now()
	g := &s.refused
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.scopes == nil {
		g.scopes = map[string][]Refusal{}
	}
	l := append(g.scopes[r.Scope], r)
	if len(l) > RefusedCap {
		l = slices.Delete(l, 0, len(l)-RefusedCap)
	}
	g.scopes[r.Scope] = l
	return nil
}

// Refused lists the memory store's refusals (RefusedLog).
func (s *Memory) Refused(ctx context.Context, q RefusedQuery) ([]Refusal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q.normalize(RefusedCap)
	g := &s.refused
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Refusal
	for scope, l := range g.scopes {
		if !q.selects(scope) {
			continue
		}
		for i, n := len(l)-1, 0; i >= 0 && n < q.Limit; i-- {
			if !l[i].Time.Before(q.Since) {
				out = append(out, l[i])
				n++
			}
		}
	}
	return newestFirst(out, q.Limit), nil
}

// The embedded store's refused list: bucket "refused", one bucket per
// scope (bkey(scope)) inside it, of 8-byte big-endian sequence numbers →
// the refusal's JSON; written with the store's group commit.
var bucketRefused = []byte("refused")

// AddRefused keeps r in the file (RefusedLog).
func (s *Embedded) AddRefused(ctx context.Context, r Refusal) error {
	r.bound()
	return s.update(ctx, func(tx *bolt.Tx, t time.Time) error {
		b, err := scopeBucket(tx, bucketRefused, r.Scope)
		if err != nil {
			return err
		}
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		r.Time = t
		v, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), v); err != nil {
			return err
		}
		// Drop what fell past the cap: usually the one entry before the
		// window (collected first: a bbolt cursor skips after Delete).
		var old [][]byte
		c := b.Cursor()
		for k, _ := c.First(); k != nil && len(k) == 8 && binary.BigEndian.Uint64(k)+RefusedCap <= seq; k, _ = c.Next() {
			old = append(old, k)
		}
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// Refused lists the file's refusals (RefusedLog).
func (s *Embedded) Refused(ctx context.Context, q RefusedQuery) ([]Refusal, error) {
	q.normalize(RefusedCap)
	var out []Refusal
	err := s.view(ctx, func(tx *bolt.Tx, _ time.Time) error {
		return eachScope(tx, bucketRefused, q, func(b *bolt.Bucket) error {
			c := b.Cursor()
			n := 0
			for k, v := c.Last(); k != nil && n < q.Limit; k, v = c.Prev() {
				var r Refusal
				if err := json.Unmarshal(v, &r); err != nil {
					return errCorrupt
				}
				if !r.Time.Before(q.Since) {
					out = append(out, r)
					n++
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return newestFirst(out, q.Limit), nil
}

// Interface guards
var (
	_ RefusedLog = (*Memory)(nil)
	_ RefusedLog = (*Embedded)(nil)
	_ RefusedLog = (*Redis)(nil)
)
