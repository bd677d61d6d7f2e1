package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Catching up (补单, "Missing notifications" in the docs): the gateway asks
// a platform's API for payments whose notification never reached the
// backend (package catchup). Two extensions serve it, beside the claim
// contract like the refused list: a lease, so that one instance of a
// fleet sharing a store asks at a time ("a fleet asks once"), and the
// missing list, which every instance sees: what was found missing, what
// the gateway did and the outcome.

// Leaser holds named leases: one owner at a time, for a ttl.
type Leaser interface {
	// Lease takes the lease name for owner for ttl, if it is free or
	// already owner's (then it is renewed); held says whether owner
	// holds it now. Atomic across the instances sharing the store.
	Lease(ctx context.Context, name, owner string, ttl time.Duration) (held bool, err error)
	// ReleaseLease frees the lease if owner holds it; else nothing.
	ReleaseLease(ctx context.Context, name, owner string) error
}

// MissingLog keeps the missing items of each scope.
type MissingLog interface {
	// PutMissing keeps m, replacing the item of the same (Scope, ID),
	// and drops its scope's least recently updated beyond MissingCap.
	PutMissing(ctx context.Context, m Missing) error
	// MissingItem returns the item (scope, id), or ErrNotFound.
	MissingItem(ctx context.Context, scope, id string) (*Missing, error)
	// Missing lists the items q selects, most recently updated first.
	Missing(ctx context.Context, q MissingQuery) ([]Missing, error)
}

// MissingCap is how many missing items a store keeps per scope.
const MissingCap = 1000

// What the gateway did with a missing item (Missing.Action).
const (
	MissingResent     = "resent"      // asked the platform to send it again
	MissingQueried    = "queried"     // asked the platform about the order
	MissingQueryRoute = "query_route" // called the merchant's status-query route
	MissingAlerted    = "alerted"     // alert only
)

// Missing is one payment or event the platform holds and the backend may
// not have seen, and what was done about it. Times are the caller's
// (the catch-up engine's clock).
type Missing struct {
	Scope    string `json:"scope"`
	Platform string `json:"platform"`
	// ID is the platform's event id (Stripe, PayPal) or order's name in
	// the scope (Alipay's trade_no, WeChat Pay's transaction_id, or the
	// merchant's out_trade_no when only it is known).
	ID string `json:"id"`
	// Order is the order's name in the store ("<scope>:<merchant>:<id>")
	// where the platform is queried by order, "" where it is not known.
	Order string `json:"order,omitempty"`
	// MerchantRef is the merchant's order number.
	MerchantRef string `json:"merchant_ref,omitempty"`
	Amount      string `json:"amount,omitempty"`
	Currency    string `json:"currency,omitempty"`
	// At is when the platform says it happened.
	At time.Time `json:"at,omitzero"`
	// Action is what the gateway did last (MissingResent, …).
	Action string `json:"action,omitempty"`
	// Outcome: "recovered", "missing", "alert only", "not paid", or
	// "unknown" when nothing could be concluded (Reason says why).
	Outcome string `json:"outcome"`
	// Key is the key that ran, once recovered.
	Key string `json:"key,omitempty"`
	// Reason is why nothing was concluded: the API is down, the answer
	// did not verify, NOT_EXIST, the API refused the key.
	Reason string `json:"reason,omitempty"`
	// Attempts counts the gateway's actions; NextAt is when it acts
	// again (zero: never, a final state).
	Attempts int       `json:"attempts"`
	NextAt   time.Time `json:"next_at,omitzero"`
	// Found is when the gateway first found it, Updated when it last
	// changed.
	Found   time.Time `json:"found"`
	Updated time.Time `json:"updated"`
}

// MissingQuery selects missing items (a capped list's query, capped.go):
// at most MissingCap.
type MissingQuery = ScopeQuery

func (m *Missing) bound() {
	m.ID = cutText(m.ID, refusedKeyMax)
	m.Key = cutText(m.Key, refusedKeyMax)
	m.MerchantRef = cutText(m.MerchantRef, refusedTextMax)
	m.Reason = cutText(m.Reason, refusedTextMax)
}

// recentFirst sorts items by Updated, most recent first, and keeps limit.
func recentFirst(ms []Missing, limit int) []Missing {
	return mostRecent(ms, limit, func(a, b Missing) int {
		if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		return compareStrings(a.ID, b.ID)
	})
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// catchupMem is the memory store's leases and missing list.
type catchupMem struct {
	mu      sync.Mutex
	leases  map[string]memLease
	missing map[string]map[string]Missing
}

type memLease struct {
	owner string
	until time.Time
}

// Lease takes or renews a lease (Leaser).
func (s *Memory) Lease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	now := s.now()
	g := &s.catchup
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leases == nil {
		g.leases = map[string]memLease{}
	}
	if l, ok := g.leases[name]; ok && l.owner != owner && now.Before(l.until) {
		return false, nil
	}
	g.leases[name] = memLease{owner, now.Add(ttl)}
	return true, nil
}

// ReleaseLease frees a lease owner holds (Leaser).
func (s *Memory) ReleaseLease(ctx context.Context, name, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g := &s.catchup
	g.mu.Lock()
	defer g.mu.Unlock()
	if l, ok := g.leases[name]; ok && l.owner == owner {
		delete(g.leases, name)
	}
	return nil
}

// PutMissing keeps m (MissingLog).
func (s *Memory) PutMissing(ctx context.Context, m Missing) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.bound()
	g := &s.catchup
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.missing == nil {
		g.missing = map[string]map[string]Missing{}
	}
	l := g.missing[m.Scope]
	if l == nil {
		l = map[string]Missing{}
		g.missing[m.Scope] = l
	}
	l[m.ID] = m
	for len(l) > MissingCap {
		var old Missing
		first := true
		for _, x := range l {
			if first || x.Updated.Before(old.Updated) || (x.Updated.Equal(old.Updated) && x.ID < old.ID) {
				old, first = x, false
			}
		}
		delete(l, old.ID)
	}
	return nil
}

// MissingItem reads one item (MissingLog).
func (s *Memory) MissingItem(ctx context.Context, scope, id string) (*Missing, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g := &s.catchup
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.missing[scope][id]
	if !ok {
		return nil, ErrNotFound
	}
	return &m, nil
}

// Missing lists items (MissingLog).
func (s *Memory) Missing(ctx context.Context, q MissingQuery) ([]Missing, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q.normalize(MissingCap)
	g := &s.catchup
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Missing
	for scope, l := range g.missing {
		if !q.selects(scope) {
			continue
		}
		for _, m := range l {
			if !m.Updated.Before(q.Since) {
				out = append(out, m)
			}
		}
	}
	return recentFirst(out, q.Limit), nil
}

// The embedded store's leases: bucket "leases", name → 8-byte big-endian
// expiry (Unix ms, the store's clock) and the owner. Its missing list:
// bucket "missing", one bucket per scope (bkey(scope)), id → JSON.
var (
	bucketLeases  = []byte("leases")
	bucketMissing = []byte("missing")
)

// Lease takes or renews a lease (Leaser).
func (s *Embedded) Lease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	var held bool
	err := s.update(ctx, func(tx *bolt.Tx, t time.Time) error {
		held = false
		b, err := tx.CreateBucketIfNotExists(bucketLeases)
		if err != nil {
			return err
		}
		if v := b.Get([]byte(name)); len(v) >= 8 && string(v[8:]) != owner &&
			t.UnixMilli() < int64(binary.BigEndian.Uint64(v)) {
			return nil
		}
		held = true
		v := binary.BigEndian.AppendUint64(nil, uint64(t.Add(ttl).UnixMilli()))
		return b.Put([]byte(name), append(v, owner...))
	})
	return held && err == nil, err
}

// ReleaseLease frees a lease owner holds (Leaser).
func (s *Embedded) ReleaseLease(ctx context.Context, name, owner string) error {
	return s.update(ctx, func(tx *bolt.Tx, _ time.Time) error {
		b := tx.Bucket(bucketLeases)
		if b == nil {
			return nil
		}
		if v := b.Get([]byte(name)); len(v) >= 8 && string(v[8:]) == owner {
			return b.Delete([]byte(name))
		}
		return nil
	})
}

// PutMissing keeps m (MissingLog).
func (s *Embedded) PutMissing(ctx context.Context, m Missing) error {
	m.bound()
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return s.update(ctx, func(tx *bolt.Tx, _ time.Time) error {
		b, err := scopeBucket(tx, bucketMissing, m.Scope)
		if err != nil {
			return err
		}
		if err := b.Put([]byte(m.ID), v); err != nil {
			return err
		}
		n := 0
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		if n <= MissingCap {
			return nil
		}
		var all []Missing
		if err := b.ForEach(func(_, v []byte) error {
			var x Missing
			if json.Unmarshal(v, &x) != nil {
				return errCorrupt
			}
			all = append(all, x)
			return nil
		}); err != nil {
			return err
		}
		all = recentFirst(all, len(all))
		for _, x := range all[min(len(all), MissingCap):] {
			if err := b.Delete([]byte(x.ID)); err != nil {
				return err
			}
		}
		return nil
	})
}

// MissingItem reads one item (MissingLog).
func (s *Embedded) MissingItem(ctx context.Context, scope, id string) (*Missing, error) {
	var m *Missing
	err := s.view(ctx, func(tx *bolt.Tx, _ time.Time) error {
		top := tx.Bucket(bucketMissing)
		if top == nil {
			return ErrNotFound
		}
		b := top.Bucket(bkey(scope))
		if b == nil {
			return ErrNotFound
		}
		v := b.Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		m = new(Missing)
		if json.Unmarshal(v, m) != nil {
			return errCorrupt
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Missing lists items (MissingLog).
func (s *Embedded) Missing(ctx context.Context, q MissingQuery) ([]Missing, error) {
	q.normalize(MissingCap)
	var out []Missing
	err := s.view(ctx, func(tx *bolt.Tx, _ time.Time) error {
		return eachScope(tx, bucketMissing, q, func(b *bolt.Bucket) error {
			return b.ForEach(func(_, v []byte) error {
				var m Missing
				if json.Unmarshal(v, &m) != nil {
					return errCorrupt
				}
				if !m.Updated.Before(q.Since) {
					out = append(out, m)
				}
				return nil
			})
		})
	})
	if err != nil {
		return nil, err
	}
	return recentFirst(out, q.Limit), nil
}

// Interface guards
var (
	_ Leaser     = (*Memory)(nil)
	_ Leaser     = (*Embedded)(nil)
	_ Leaser     = (*Redis)(nil)
	_ MissingLog = (*Memory)(nil)
	_ MissingLog = (*Embedded)(nil)
	_ MissingLog = (*Redis)(nil)
)
