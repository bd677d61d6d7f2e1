package store

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis store's search index (see Searcher): a string per reference,
//
//	<prefix>:sr:<digest>
//
// (digest16 of the reference), of the hash names of the keys filed under
// it, without the prefix, each ended by "\n" ("{<order>}:<event>", as
// hashKey writes them: a key is told back from its name). On a single
// server the settling script writes it (complete.lua, release.lua,
// leave.lua: the entries end the script's KEYS, told apart by their
// ":sr:"); on Cluster it lives on other nodes and search.lua writes it in
// the settle's own pipeline, as the order indexes are (settle).

//go:embed search.lua
var searchLua string

var searchScript = redis.NewScript(searchLua)

// searchKey is ref's search entry.
func (s *Redis) searchKey(ref string) string { return s.prefix + ":sr:" + digest16(ref) }

// searchIx is what a settle files for search: the entries, the key's
// hash name as they hold it, and for how long (ms).
type searchIx struct {
	keys  []string
	entry string
	ttl   int64
}

// searchIxOf is key's search writes for refs, kept ttl; nil for none.
func (s *Redis) searchIxOf(key string, refs []string, ttl time.Duration) *searchIx {
	if len(refs) == 0 || ttl <= 0 {
		return nil
	}
	sx := &searchIx{entry: strings.TrimPrefix(s.hashKey(key), s.prefix+":") + "\n", ttl: ms(ttl)}
	for _, ref := range refs {
		sx.keys = append(sx.keys, s.searchKey(ref))
	}
	return sx
}

// write queues sx's writes on p (Cluster), one script call per entry.
// EVAL, not EVALSHA: a lost script cache must not lose the entries, and
// the script is short.
func (sx *searchIx) write(ctx context.Context, p redis.Pipeliner) {
	ttl := strconv.FormatInt(sx.ttl+indexSlack.Milliseconds(), 10)
	for _, k := range sx.keys {
		searchScript.Eval(ctx, p, []string{k}, sx.entry, ttl)
	}
}

func (s *Redis) KeysByRef(ctx context.Context, ref string) ([]string, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	v, err := s.c.Get(ctx, s.searchKey(ref)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap("search", err)
	}
	var out []string
	for _, name := range strings.Split(v, "\n") {
		if key, ok := keyOfHashName(name); ok {
			out = append(out, key)
		}
	}
	return out[max(len(out)-MaxSearch, 0):], nil
}

// keyOfHashName reads a key back from its hash name without the prefix:
// "{<order>}:<event>" or "{<key>}", escaped (escapeKey).
func keyOfHashName(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "{")
	if !ok {
		return "", false
	}
	tag, event, ok := strings.Cut(rest, "}")
	if !ok {
		return "", false
	}
	key := unescapeKey(tag)
	if event != "" {
		e, ok := strings.CutPrefix(event, ":")
		if !ok {
			return "", false
		}
		key += ":" + unescapeKey(e)
	}
	return key, true
}

// unescapeKey undoes escapeKey.
func unescapeKey(s string) string {
	if s == "%" {
		return ""
	}
	if !strings.Contains(s, "%") {
		return s
	}
	r := strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")
	return r.Replace(s)
}

var _ Searcher = (*Redis)(nil)
