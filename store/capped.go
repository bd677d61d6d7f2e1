package store

import (
	"context"
	_ "embed"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// A capped list is a store extension's items kept per scope, at most a
// cap of each scope, and listed most recent first across the scopes a
// query selects: the refused list (refused.go) and the missing list
// (catchup.go). What they share is here, for each store: the query, the
// order, the embedded store's bucket of one bucket per scope, and the
// Redis store's set of the scopes that have a list, named by the write
// that adds to one.

// ScopeQuery selects a capped list's items.
type ScopeQuery struct {
	// Scope keeps one scope's; "" every scope's.
	Scope string
	// Since keeps those kept (a refusal) or updated (a missing item) at
	// or after it.
	Since time.Time
	// Limit bounds the answer: default 100, at most the list's cap.
	Limit int
}

func (q *ScopeQuery) normalize(limit int) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	q.Limit = min(q.Limit, limit)
}

// selects tells whether q reads scope's list.
func (q *ScopeQuery) selects(scope string) bool { return q.Scope == "" || scope == q.Scope }

// mostRecent sorts items by newer (negative: a is the more recent), most
// recent first, and keeps limit.
func mostRecent[T any](items []T, limit int, newer func(a, b T) int) []T {
	slices.SortStableFunc(items, newer)
	return items[:min(len(items), limit)]
}

// scopeBucket is scope's bucket inside the bucket top, both made if need
// be (a write).
func scopeBucket(tx *bolt.Tx, top []byte, scope string) (*bolt.Bucket, error) {
	t, err := tx.CreateBucketIfNotExists(top)
	if err != nil {
		return nil, err
	}
	return t.CreateBucketIfNotExists(bkey(scope))
}

// eachScope calls f with the bucket of each scope inside the bucket top
// that q selects; none when there is no top yet.
func eachScope(tx *bolt.Tx, top []byte, q ScopeQuery, f func(*bolt.Bucket) error) error {
	t := tx.Bucket(top)
	if t == nil {
		return nil
	}
	return t.ForEachBucket(func(name []byte) error {
		if q.Scope != "" && string(name) != string(bkey(q.Scope)) {
			return nil
		}
		return f(t.Bucket(name))
	})
}

//go:embed scoped.lua
var scopedLua string

// newScopedScript is a capped list's write script, body, which calls
// name_scope (scoped.lua) with the count of its own keys.
func newScopedScript(parts ...string) *writeScript {
	return newWriteScript("", append([]string{scopedLua}, parts...)...)
}

// writeScoped runs sc on keys, the keys of one scope's list (on the
// scope's hash tag), with args, and names scope in the set scopes: on a
// single server the script does (scopes its last key, scope its last
// argument); on Cluster the set lives in another slot and is added to in
// the same pipeline. One round trip either way.
func (s *Redis) writeScoped(ctx context.Context, sc *writeScript, keys []string, scopes, scope, op string, args ...any) error {
	script := s.script(sc)
	args = append(args, scope)
	if _, cluster := s.c.(*redis.ClusterClient); !cluster {
		return s.wrap(op, script.Run(ctx, s.c, append(keys, scopes), args...).Err())
	}
	send := func(load bool) error {
		var cmd *redis.Cmd
		_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if load {
				cmd = script.Eval(ctx, p, keys, args...)
			} else {
				cmd = script.EvalSha(ctx, p, keys, args...)
			}
			p.SAdd(ctx, scopes, scope)
			return nil
		})
		if cmd != nil && cmd.Err() != nil {
			return cmd.Err()
		}
		return err
	}
	err := send(false)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		err = send(true) // the SADD again: a set does not mind
	}
	return s.wrap(op, err)
}

// scopesOf is the scopes a listing of q reads: its own, or every scope
// the set scopes names, sorted.
func (s *Redis) scopesOf(ctx context.Context, q ScopeQuery, scopes, op string) ([]string, error) {
	if q.Scope != "" {
		return []string{q.Scope}, nil
	}
	all, err := s.c.SMembers(ctx, scopes).Result()
	if err != nil {
		return nil, s.wrap(op, err)
	}
	slices.Sort(all)
	return all, nil
}

// readScopes reads each of scopes' lists with read, in one pipeline.
func (s *Redis) readScopes(ctx context.Context, scopes []string, op string, read func(p redis.Pipeliner, scope string) *redis.StringSliceCmd) ([]*redis.StringSliceCmd, error) {
	lists := make([]*redis.StringSliceCmd, len(scopes))
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sc := range scopes {
			lists[i] = read(p, sc)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, s.wrap(op, err)
	}
	return lists, nil
}
