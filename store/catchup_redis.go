package store

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
	"time"
)

// The Redis store's leases: <prefix>:lease:{<name>} holding the owner's
// token, with a PX ttl; taken, renewed and released by scripts on that
// key alone, so each is atomic on a single server and on Cluster. Its
// missing list: per scope, the hash <prefix>:missing:{<scope>} (id →
// JSON) and the sorted set <prefix>:missing:{<scope>}:t (id by update
// time), on the scope's hash tag, written by one script that also trims
// to MissingCap; and the set <prefix>:missing:scopes naming the scopes
// that have one, added to in the same round trip (Redis.writeScoped).

var (
	//go:embed lease.lua
	leaseLua string
	//go:embed unlease.lua
	unleaseLua string
	//go:embed missing.lua
	missingLua string

	leaseScript   = newWriteScript("", leaseLua)
	unleaseScript = newWriteScript("", unleaseLua)
	missingScript = newScopedScript(missingLua)
)

func (s *Redis) leaseKey(name string) string {
	return s.prefix + ":lease:{" + escapeKey(name) + "}"
}

func (s *Redis) missingKeys(scope string) []string {
	h := s.prefix + ":missing:{" + escapeKey(scope) + "}"
	return []string{h, h + ":t"}
}

func (s *Redis) missingScopesKey() string { return s.prefix + ":missing:scopes" }

// Lease takes or renews a lease (Leaser).
func (s *Redis) Lease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	n, err := s.script(leaseScript).Run(ctx, s.c, []string{s.leaseKey(name)}, owner, max(ttl.Milliseconds(), 1)).Int()
	if err != nil {
		return false, s.wrap("lease", err)
	}
	return n == 1, nil
}

// ReleaseLease frees a lease owner holds (Leaser).
func (s *Redis) ReleaseLease(ctx context.Context, name, owner string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.script(unleaseScript).Run(ctx, s.c, []string{s.leaseKey(name)}, owner).Err()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return s.wrap("lease", err)
}

// PutMissing keeps m (MissingLog).
func (s *Redis) PutMissing(ctx context.Context, m Missing) error {
	if s.closed.Load() {
		return ErrClosed
	}
	m.bound()
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return s.writeScoped(ctx, missingScript, s.missingKeys(m.Scope), s.missingScopesKey(), m.Scope, "missing",
		m.ID, v, m.Updated.UnixMilli(), MissingCap)
}

// MissingItem reads one item (MissingLog).
func (s *Redis) MissingItem(ctx context.Context, scope, id string) (*Missing, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	v, err := s.c.HGet(ctx, s.missingKeys(scope)[0], id).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, s.wrap("missing", err)
	}
	m := new(Missing)
	if json.Unmarshal(v, m) != nil {
		return nil, errCorrupt
	}
	return m, nil
}

// Missing lists items (MissingLog): each scope's most recent Limit, in
// one pipeline, merged.
func (s *Redis) Missing(ctx context.Context, q MissingQuery) ([]Missing, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	q.normalize(MissingCap)
	scopes, err := s.scopesOf(ctx, q, s.missingScopesKey(), "missing")
	if err != nil {
		return nil, err
	}
	ids, err := s.readScopes(ctx, scopes, "missing", func(p redis.Pipeliner, scope string) *redis.StringSliceCmd {
		return p.ZRevRangeByScore(ctx, s.missingKeys(scope)[1], &redis.ZRangeBy{
			Min: strconv.FormatInt(q.Since.UnixMilli(), 10), Max: "+inf", Count: int64(q.Limit)})
	})
	if err != nil {
		return nil, err
	}
	var out []Missing
	for i, sc := range scopes {
		l := ids[i].Val()
		if len(l) == 0 {
			continue
		}
		vs, err := s.c.HMGet(ctx, s.missingKeys(sc)[0], l...).Result()
		if err != nil {
			return nil, s.wrap("missing", err)
		}
		for _, v := range vs {
			str, ok := v.(string)
			if !ok {
				continue // dropped between the two reads
			}
			var m Missing
			if json.Unmarshal([]byte(str), &m) != nil {
				return nil, errCorrupt
			}
			if !m.Updated.Before(q.Since) {
				out = append(out, m)
			}
		}
	}
	return recentFirst(out, q.Limit), nil
}
