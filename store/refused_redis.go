package store

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"slices"
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
var refusedScript = newWriteScript("", clockLua, refusedLua)

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
	sc := s.script(refusedScript)
	list := s.refusedKey(r.Scope)
	if _, cluster := s.c.(*redis.ClusterClient); !cluster {
		err := sc.Run(ctx, s.c, []string{list, s.refusedScopesKey()}, v, RefusedCap, r.Scope).Err()
		return s.wrap("refused", err)
	}
	send := func(load bool) error {
		var cmd *redis.Cmd
		_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if load {
				cmd = sc.Eval(ctx, p, []string{list}, v, RefusedCap, r.Scope)
			} else {
				cmd = sc.EvalSha(ctx, p, []string{list}, v, RefusedCap, r.Scope)
			}
			p.SAdd(ctx, s.refusedScopesKey(), r.Scope)
			return nil
		})
		if cmd != nil && cmd.Err() != nil {
			return cmd.Err()
		}
		return err
	}
	err = send(false)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		err = send(true) // the SADD again: a set does not mind
	}
	return s.wrap("refused", err)
}

// Refused lists the kept refusals (RefusedLog): the newest Limit of each
// scope asked, in one pipeline, merged.
func (s *Redis) Refused(ctx context.Context, q RefusedQuery) ([]Refusal, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	q.normalize()
	scopes := []string{q.Scope}
	if q.Scope == "" {
		var err error
		if scopes, err = s.c.SMembers(ctx, s.refusedScopesKey()).Result(); err != nil {
			return nil, s.wrap("refused", err)
		}
		slices.Sort(scopes)
	}
	lists := make([]*redis.StringSliceCmd, len(scopes))
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sc := range scopes {
			lists[i] = p.LRange(ctx, s.refusedKey(sc), 0, int64(q.Limit)-1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, s.wrap("refused", err)
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
