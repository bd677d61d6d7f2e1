package store

import (
	"context"
	_ "embed"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis store's refused list: one list per scope,
// <prefix>:refused:{<scope>} (its own hash tag, so Cluster spreads the
// scopes), of "<server ms> <refusal JSON>", newest first, trimmed to
// RefusedCap by the script that pushes; and the set
// <prefix>:refused:scopes naming the scopes that have one, for a listing
// of every scope. One refusal is one round trip: the script (and on
// Cluster the set's SADD beside it, to its own node, in the same
// pipeline).

//go:embed refused.lua
var refusedLua string

// Not allow-oom: at maxmemory a refusal is not worth the memory.
var refusedScript = newScopedScript(clockLua, refusedLua)

func (s *Redis) refusedKey(scope string) string {
	return s.prefix + ":refused:{" + escapeKey(scope) + "}"
}

func (s *Redis) refusedScopesKey() string { return s.prefix + ":refused:scopes" }

// AddRefused keeps r (RefusedLog).
func (s *Redis) AddRefused(ctx context.Context, r Refusal) error {
	if s.closed.Load() {
		return ErrClosed
	}
	r.bound()
	r.Time = time.Time{} // the script's clock sets it
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.writeScoped(ctx, refusedScript, []string{s.refusedKey(r.Scope)}, s.refusedScopesKey(), r.Scope, "refused", v, RefusedCap)
}

// Refused lists the kept refusals (RefusedLog): the newest Limit of each
// scope asked, in one pipeline, merged.
func (s *Redis) Refused(ctx context.Context, q RefusedQuery) ([]Refusal, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	q.normalize(RefusedCap)
	scopes, err := s.scopesOf(ctx, q, s.refusedScopesKey(), "refused")
	if err != nil {
		return nil, err
	}
	lists, err := s.readScopes(ctx, scopes, "refused", func(p redis.Pipeliner, scope string) *redis.StringSliceCmd {
		return p.LRange(ctx, s.refusedKey(scope), 0, int64(q.Limit)-1)
	})
	if err != nil {
		return nil, err
	}
	var out []Refusal
	for _, l := range lists {
		for _, e := range l.Val() {
			ms, js, ok := strings.Cut(e, " ")
			n, err := strconv.ParseInt(ms, 10, 64)
			var r Refusal
			if !ok || err != nil || json.Unmarshal([]byte(js), &r) != nil {
				return nil, errCorrupt
			}
			r.Time = time.UnixMilli(n)
			if r.Time.Before(q.Since) {
				break // the rest is older
			}
			out = append(out, r)
		}
	}
	return newestFirst(out, q.Limit), nil
}
