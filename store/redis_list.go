package store

import (
	"context"
	"errors"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// List reads the list indexes (listIndexed): answered and failed records
// are indexed when settled, in-flight claims as redis_inflight.go says.
func (s *Redis) List(ctx context.Context, q ListQuery) (ListPage, error) {
	if s.closed.Load() {
		return ListPage{}, ErrClosed
	}
	if err := q.normalize(); err != nil {
		return ListPage{}, err
	}
	if q.State == StateInFlight {
		// This process's claims not written to the index yet are.
		s.ifx.flush(ctx, false)
	}
	return s.listIndexed(ctx, q)
}

// listIndexed merges the state's index shards newest first. Each shard
// gives at most Limit members after the cursor (ZRANGE BYLEX, one pipeline);
// the merge goes no further than the horizon, the earliest last member of a
// shard that gave a full Limit (beyond it that shard may hold more). The
// candidates' records are read in batches of Limit (one pipeline each, at
// most 4), checked (state, changed time, filters) and stale index entries
// dropped. Work per page: 16 range reads per class (one class per ttl in
// use) and at most 4×Limit records.
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
	// The shards to merge: in-flight claims have one class, answered and
	// failed records one per ttl.
	classes := []string{""}
	if st != StateInFlight {
		names, err := s.c.SMembers(ctx, s.ixClassesKey()).Result()
		if err != nil {
			return ListPage{}, s.wrap("list", err)
		}
		classes = classes[:0]
		for _, n := range names {
			if c, ok := strings.CutPrefix(n, string(st)+"/"); ok {
				classes = append(classes, c)
			}
		}
		slices.Sort(classes)
	}
	shardKeys := make([]string, 0, len(classes)*ixShards)
	for _, c := range classes {
		for i := range ixShards {
			shardKeys = append(shardKeys, s.ixShardKey(st, c, i))
		}
	}
	shards := make([]*redis.StringSliceCmd, len(shardKeys))
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range shardKeys {
			shards[i] = p.ZRangeArgs(ctx, redis.ZRangeArgs{Key: k, Start: from, Stop: "+",
				ByLex: true, Count: int64(q.Limit)})
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
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
				cands = append(cands, cand{member: m, shard: shardKeys[i], pos: pos})
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
		cmds := make([]*redis.StringCmd, len(chunk))
		_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range chunk {
				if q.keyMatches(c.pos.Key) {
					cmds[i] = p.Get(ctx, s.hashKey(c.pos.Key))
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
			if err := cmds[i].Err(); err != nil && !errors.Is(err, redis.Nil) {
				return ListPage{}, s.wrap("list", err) // a record of an earlier layout: errOldLayout
			}
			var rec *Record
			if v := cmds[i].Val(); v != "" {
				if rec, err = listedRecord(v); err != nil {
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

// ixShards is the number of list index shards per state.
const ixShards = 16

// ixKey is the list index shard of key in state st and class (the ttl in
// ms; "" for in-flight claims).
func (s *Redis) ixKey(st State, class, key string) string {
	if st == StateInFlight && class == "" {
		return s.ifShards[ixShard(key)]
	}
	return s.ixShardKey(st, class, ixShard(key))
}

func (s *Redis) ixShardKey(st State, class string, shard int) string {
	if class == "" {
		return s.prefix + ":ix:{" + string(st) + ":" + strconv.Itoa(shard) + "}"
	}
	return s.prefix + ":ix:{" + string(st) + ":" + class + ":" + strconv.Itoa(shard) + "}"
}

func (s *Redis) ixClassesKey() string { return s.prefix + ":ix:classes" }

// ixClassRefresh: a class is named in ixClassesKey again this often, so a
// Redis that lost it (restarted without persistence) learns it back.
const ixClassRefresh = time.Minute

// ixClass is what a settle into one state and ttl class writes beside
// its record, named once per store rather than on every settle (building
// the names cost a settle some 3 µs of its gateway's CPU).
type ixClass struct {
	class  string                 // the ttl in ms
	name   string                 // "<state>/<class>", as ixClassesKey lists it
	shards [ixShards]string       // ixShardKey of each shard
	trims  [ixShards]atomic.Int64 // when this process last trimmed each shard (ms)
	named  atomic.Int64           // when this process last named the class (ns)
}

type ixClassID struct {
	st  State
	ttl int64
}

// ixClassOf returns the class of ttl in state st, and whether this
// settle must name it in ixClassesKey.
func (s *Redis) ixClassOf(st State, ttl time.Duration) (c *ixClass, register bool) {
	id := ixClassID{st, ttl.Milliseconds()}
	v, ok := s.classes.Load(id)
	if !ok {
		n := &ixClass{class: strconv.FormatInt(id.ttl, 10)}
		n.name = string(st) + "/" + n.class
		for i := range n.shards {
			n.shards[i] = s.ixShardKey(st, n.class, i)
		}
		v, _ = s.classes.LoadOrStore(id, n)
	}
	c = v.(*ixClass)
	t := time.Now().UnixNano()
	last := c.named.Load()
	if last != 0 && time.Duration(t-last) < ixClassRefresh {
		return c, false
	}
	return c, c.named.CompareAndSwap(last, t)
}

// ixShard is the list index shard key is filed in.
func ixShard(key string) int { return int(crc32.ChecksumIEEE([]byte(key)) % ixShards) }

// trimEvery: one process trims a list index shard of the entries past
// their ttl at most this often, not on every settle.
const trimEvery = time.Second

// trimDue reports whether the settle at now (ms) trims the class's shard.
func (c *ixClass) trimDue(shard int, now int64) bool {
	last := &c.trims[shard]
	l := last.Load()
	return now-l >= trimEvery.Milliseconds() && last.CompareAndSwap(l, now)
}
