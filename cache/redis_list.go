package cache

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// List: in-flight claims by SCAN (listInFlight), answered and failed
// records from the list indexes (listIndexed).
func (s *Redis) List(ctx context.Context, q ListQuery) (ListPage, error) {
	if s.closed.Load() {
		return ListPage{}, ErrClosed
	}
	if err := q.normalize(); err != nil {
		return ListPage{}, err
	}
	if q.State == StateInFlight {
		recs, next, err := s.listInFlight(ctx, q)
		return ListPage{Records: recs, Next: next}, err
	}
	return s.listIndexed(ctx, q)
}

// listIndexed merges the state's index shards newest first. Each shard
// gives at most Limit members after the cursor (ZRANGE BYLEX, one pipeline);
// the merge goes no further than the horizon, the earliest last member of a
// shard that gave a full Limit (beyond it that shard may hold more). The
// candidates' records are read in batches of Limit (one pipeline each, at
// most 4), checked (state, changed time, filters) and stale index entries
// dropped. Work per page: 16 range reads and at most 4×Limit records.
func (s *Redis) listIndexed(ctx context.Context, q ListQuery) (ListPage, error) {
	after, err := decodeListCursor(q.Cursor)
	if err != nil {
		return ListPage{}, err
	}
	st := q.State
	if st == StateDead {
		st = StateFailed
	}
	from := "-"
	if q.Cursor != "" {
		from = "(" + ixMember(after.Changed, after.Key)
	}
	shards := make([]*redis.StringSliceCmd, ixShards)
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range shards {
			shards[i] = p.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.ixShardKey(st, i), Start: from, Stop: "+",
				ByLex: true, Count: int64(q.Limit)})
		}
		return nil
	})
	if err != nil {
		return ListPage{}, s.wrap("list", err)
	}
	var horizon string
	type cand struct {
		member, shard string
		pos           listPos
	}
	var cands []cand
	for i, c := range shards {
		ms := c.Val()
		if len(ms) == q.Limit && (horizon == "" || ms[len(ms)-1] < horizon) {
			horizon = ms[len(ms)-1]
		}
		for _, m := range ms {
			if pos, ok := parseIxMember(m); ok {
				cands = append(cands, cand{member: m, shard: s.ixShardKey(st, i), pos: pos})
			}
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return strings.Compare(a.member, b.member) })
	var page ListPage
	more := false // a shard may hold more beyond what this page reads
	for i, c := range cands {
		if c.pos.Changed < q.Since.UnixMilli() {
			cands = cands[:i]
			break
		}
		if horizon != "" && c.member >= horizon {
			cands = cands[:i+1]
			more = true
			break
		}
	}
	var stale []cand
	consumed := 0
	for batch := 0; consumed < len(cands) && batch < 4 && len(page.Records) < q.Limit; batch++ {
		chunk := cands[consumed:min(len(cands), consumed+q.Limit)]
		cmds := make([]*redis.SliceCmd, len(chunk))
		_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range chunk {
				if q.keyMatches(c.pos.Key) {
					cmds[i] = p.HMGet(ctx, s.hashKey(c.pos.Key), recordFields...)
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return ListPage{}, s.wrap("list", err)
		}
		for i, c := range chunk {
			consumed++
			after = c.pos
			if cmds[i] == nil {
				continue
			}
			v := cmds[i].Val()
			var rec *Record
			if len(v) > 1 && v[1] != nil {
				if rec, err = parseRecord(v); err != nil {
					return ListPage{}, s.wrap("list", err)
				}
			}
			if rec == nil || rec.Changed.UnixMilli() != c.pos.Changed ||
				(rec.State != st && !(st == StateFailed && rec.State == StateInFlight)) {
				stale = append(stale, c)
				continue
			}
			if q.matches(rec) {
				page.Records = append(page.Records, rec)
				if len(page.Records) == q.Limit {
					break
				}
			}
		}
	}
	if more || consumed < len(cands) {
		page.Next = encodeListCursor(after)
	}
	if len(stale) > 0 {
		// Read-repair: entries whose record moved on or is gone.
		_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range stale {
				p.ZRem(ctx, c.shard, c.member)
			}
			return nil
		})
	}
	return page, nil
}

// listInFlight lists in-flight claims with SCAN, never KEYS: a global index
// (a sorted set) would have to live in one slot and be written by every
// claim, which Cluster refuses (CROSSSLOT) and which would be a hot key.
// SCAN MATCH <prefix>:{* TYPE hash walks each master in address order; the
// opaque cursor holds the node, its SCAN cursor and, when a SCAN batch held
// more claims than the page had room for, the last hash key returned (that
// batch is re-read and continued from there). One call makes at most
// ScanSteps SCAN calls. As with SCAN itself, a key may be listed twice when
// Redis resizes its table between pages, and one that comes or goes while
// listing may or may not appear.
func (s *Redis) listInFlight(ctx context.Context, q ListQuery) ([]*Record, string, error) {
	limit := q.Limit
	pos, err := decodeScanCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return nil, "", s.wrap("in_flight", err)
	}
	i := 0
	if pos.Node != "" {
		// The node of the cursor, or the next one if it left the cluster.
		i, _ = slices.BinarySearchFunc(nodes, pos.Node, func(n scanNode, a string) int { return cmp.Compare(n.addr, a) })
		if i == len(nodes) || nodes[i].addr != pos.Node {
			pos = scanCursor{}
		}
	}
	match := globEscape(s.prefix) + ":{*"
	var recs []*Record
	for step := 0; step < s.opts.ScanSteps && i < len(nodes); step++ {
		n := nodes[i]
		keys, next, err := n.c.ScanType(ctx, pos.Cur, match, int64(s.opts.ScanCount), "hash").Result()
		if err != nil {
			return nil, "", s.wrap("in_flight", err)
		}
		found, err := s.inFlightOf(ctx, n.c, keys, string(pos.After), &q)
		if err != nil {
			return nil, "", s.wrap("in_flight", err)
		}
		if room := limit - len(recs); len(found) > room {
			recs = append(recs, found[:room]...)
			last := s.hashKey(recs[len(recs)-1].Key)
			return recs, encodeScanCursor(scanCursor{Node: n.addr, Cur: pos.Cur, After: []byte(last)}), nil
		}
		recs = append(recs, found...)
		pos = scanCursor{Node: n.addr, Cur: next}
		if next == 0 {
			i++
			if i == len(nodes) {
				return recs, "", nil
			}
			pos = scanCursor{Node: nodes[i].addr}
		}
		if len(recs) == limit {
			break
		}
	}
	return recs, encodeScanCursor(pos), nil
}

// inFlightOf reads the records of keys (one pipeline on the node that
// holds them) and returns the in-flight ones sorted by hash key, after the
// hash key after.
func (s *Redis) inFlightOf(ctx context.Context, c redis.Cmdable, keys []string, after string, q *ListQuery) ([]*Record, error) {
	slices.Sort(keys)
	if after != "" {
		i, _ := slices.BinarySearch(keys, after)
		for i < len(keys) && keys[i] <= after {
			i++
		}
		keys = keys[i:]
	}
	if len(keys) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.SliceCmd, len(keys))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, k, recordFields...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var recs []*Record
	for _, cmd := range cmds {
		v := cmd.Val()
		if len(v) < 2 || str(v[1]) != string(StateInFlight) {
			continue // answered, or gone since SCAN saw it
		}
		rec, err := parseRecord(v)
		if err != nil {
			return nil, err
		}
		if q.matches(rec) {
			recs = append(recs, rec)
		}
	}
	return recs, nil
}

type scanNode struct {
	addr string
	c    redis.Cmdable
}

// scanNodes lists where to SCAN: each master of a Cluster, sorted by
// address so a cursor can name its position; otherwise the client itself.
func (s *Redis) scanNodes(ctx context.Context) ([]scanNode, error) {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok {
		return []scanNode{{c: s.c}}, nil
	}
	var mu sync.Mutex
	var nodes []scanNode
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, scanNode{addr: c.Options().Addr, c: c})
		mu.Unlock()
		return nil
	})
	slices.SortFunc(nodes, func(a, b scanNode) int { return cmp.Compare(a.addr, b.addr) })
	return nodes, err
}

type scanCursor struct {
	Node  string `json:"n,omitempty"`
	Cur   uint64 `json:"c,omitempty"`
	After []byte `json:"k,omitempty"`
}

func encodeScanCursor(c scanCursor) string {
	b, _ := json.Marshal(c)
	return "r" + base64.RawURLEncoding.EncodeToString(b)
}

func decodeScanCursor(s string) (scanCursor, error) {
	var c scanCursor
	if s == "" {
		return c, nil
	}
	if s[0] != 'r' {
		return c, errBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s[1:])
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, errBadCursor
	}
	return c, nil
}

// globEscape quotes the glob characters of SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if strings.IndexByte(`*?[]\`, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}
