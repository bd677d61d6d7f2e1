package store

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
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
		return s.listIndexed(ctx, q)
	}
	return s.listBuckets(ctx, q)
}

// listIndexed merges the in-flight index's shards newest first. Each shard
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
	classes := []string{""} // in-flight claims have one class
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
	class  string       // the ttl in ms
	name   string       // "<state>/<class>", as ixClassesKey lists it
	ttl    int64        // ms
	width  int64        // of its time buckets (ms): ixWidth
	bttl   string       // a bucket's lifetime (ms): ttl, its width and ixSkew
	bucket string       // the buckets' names up to their number (bucketKey)
	named  atomic.Int64 // when this process last named the class (ns)
	newest atomic.Int64 // the newest bucket this process wrote
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
		v, _ = s.classes.LoadOrStore(id, s.newIxClass(st, id.ttl))
	}
	c = v.(*ixClass)
	t := time.Now().UnixNano()
	last := c.named.Load()
	if last != 0 && time.Duration(t-last) < ixClassRefresh {
		return c, false
	}
	return c, c.named.CompareAndSwap(last, t)
}

func (s *Redis) newIxClass(st State, ttl int64) *ixClass {
	c := &ixClass{class: strconv.FormatInt(ttl, 10), ttl: ttl, width: ixWidth(ttl)}
	c.name = string(st) + "/" + c.class
	c.bttl = strconv.FormatInt(ttl+c.width+ixSkew.Milliseconds(), 10)
	c.bucket = s.prefix + ":ib:{" + string(st) + ":" + c.class + ":" + strconv.FormatInt(c.width, 10) + ":"
	return c
}

// The list index of answered and failed records: time buckets. A class
// (a state and a ttl) files each settled key in the bucket of its changed
// time, a string <prefix>:ib:{<state>:<ttl>:<width>:<n>} holding the
// entries (ixEntry) of the keys settled in [n×width, (n+1)×width) ms, in
// the order they came. A settle appends its entry (one APPEND: the same
// work at ten keys as at a million); the entry that creates a bucket
// gives it the lifetime of the records it lists (ttl, the bucket's width
// and ixSkew), so buckets expire with them and nothing is trimmed. A class
// has at most some ixBuckets live buckets: its width grows with its ttl.
// Once finished, a bucket is written again sorted by key (compactBuckets),
// so a listing by a key prefix (or a scope) reads of each bucket its head
// and the entries near the prefix (readBuckets): its work is some
// ixBuckets small reads a class plus the entries it finds, whatever the
// store holds.
//
// The sorted sets of an earlier layout (<prefix>:ix:{<state>:<ttl>:<shard>})
// are not read: a record settled before the change is not listed (until it
// settles again), never misread.
const (
	ixBuckets  = 4096
	ixMinWidth = 100 * time.Millisecond
	// ixSkew: how far a gateway's clock (the entries' times) may run ahead
	// of the one reading, or Redis's; a listing starts that far ahead.
	ixSkew = 10 * time.Second
)

// ixWidth is the width (ms) of the time buckets of a class of ttl ms.
func ixWidth(ttl int64) int64 { return max(ixMinWidth.Milliseconds(), ttl/ixBuckets) }

// bucketOf is the number of the bucket holding time ms.
func (c *ixClass) bucketOf(ms int64) int64 {
	b := ms / c.width
	if ms < 0 && b*c.width != ms {
		b--
	}
	return b
}

// moved notes that this process writes bucket n; the first time it moves
// past its newest (l), it returns the buckets it wrote that are now two or
// more behind and not yet sorted (l-1 and l), which compactBuckets then
// sorts.
func (c *ixClass) moved(n int64) []string {
	l := c.newest.Load()
	if n <= l || !c.newest.CompareAndSwap(l, n) {
		return nil
	}
	if l == 0 {
		return []string{c.bucketKey(n - 2)}
	}
	var old []string
	for b := l - 1; b <= l && b <= n-2; b++ {
		old = append(old, c.bucketKey(b))
	}
	return old
}

// bucketKey is the name of bucket n.
func (c *ixClass) bucketKey(n int64) string {
	var d [20]byte // n in decimal, not a string of its own
	return c.bucket + string(strconv.AppendInt(d[:0], n, 10)) + "}"
}

// ixShard is the list index shard key is filed in: the CRC-32 (IEEE) of
// key, computed on the string (crc32.ChecksumIEEE would take a copy of it
// as a []byte, an allocation on every settle).
func ixShard(key string) int {
	crc := ^uint32(0)
	for i := 0; i < len(key); i++ {
		crc = crc32.IEEETable[byte(crc)^key[i]] ^ crc>>8
	}
	return int(^crc % ixShards)
}

// listBuckets pages through the time buckets of the state's classes
// (answered or failed), newest first. Each class is walked from the cursor's
// time down to the oldest bucket its ttl can still hold, a few buckets per
// class a round (8, doubling to 1024; one pipeline of GETs a round). The
// entries of a round's buckets after the cursor and matching the key
// filters (Scope, Prefix: read here, so a prefix costs no record reads)
// are candidates; those at or after the horizon (the latest time down to
// which some class has not been read yet) are in their final order, and
// their records are read in that order (HMGET, in batches of Limit) and
// checked as before: state, changed time and the other filters. A page
// ends when it holds Limit records, after 4×Limit record reads, or after
// listBucketBudget buckets or listByteBudget bytes of entries: then its
// cursor is the time down to which everything was read, and the next page
// goes on from there. So the work of a page is bounded whatever the store
// holds. With a key prefix (or a scope) a round reads, of each sorted
// bucket, only the entries that match (readBuckets); the newest buckets,
// not sorted yet, are read whole.
func (s *Redis) listBuckets(ctx context.Context, q ListQuery) (ListPage, error) {
	after, below, err := decodeBucketCursor(q.Cursor)
	if err != nil {
		return ListPage{}, err
	}
	st := q.State
	if st == StateDead {
		st = StateFailed
	}
	kp, keeps := q.keyPrefix()
	if !keeps {
		return ListPage{}, nil // Scope and Prefix keep no key
	}
	names, err := s.c.SMembers(ctx, s.ixClassesKey()).Result()
	if err != nil {
		return ListPage{}, s.wrap("list", err)
	}
	isAfter := func(ms int64, key string) bool {
		if q.Cursor == "" {
			return true
		}
		if below {
			return ms < after.Changed
		}
		return listAfter(time.UnixMilli(ms), key, after)
	}
	now := time.Now().UnixMilli()
	top := now + ixSkew.Milliseconds()
	if q.Cursor != "" {
		top = after.Changed
		if below {
			top--
		}
	}
	since := q.Since.UnixMilli()
	type walk struct {
		c          *ixClass
		next, last int64 // the next bucket to read, the last one
	}
	var walks []*walk
	for _, n := range names {
		cl, ok := strings.CutPrefix(n, string(st)+"/")
		if !ok {
			continue
		}
		ttl, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || ttl <= 0 {
			continue
		}
		id := ixClassID{st, ttl}
		v, ok := s.classes.Load(id)
		if !ok {
			v, _ = s.classes.LoadOrStore(id, s.newIxClass(st, ttl))
		}
		c := v.(*ixClass)
		oldest := max(since, now-c.ttl-c.width-ixSkew.Milliseconds())
		if w := (&walk{c: c, next: c.bucketOf(top), last: c.bucketOf(oldest)}); w.next >= w.last {
			walks = append(walks, w)
		}
	}
	var (
		page     ListPage
		pool     []listPos // candidates not checked yet
		last     listPos   // the last candidate consumed
		consumed bool
		reads    int // records read
		probes   int // buckets read
		size     int // bytes of entries read
	)
	round := int64(8)
	for {
		// One round: the next buckets of every class not read to its end.
		var buckets []string
		for _, w := range walks {
			for b := w.next; b > w.next-round && b >= w.last; b-- {
				buckets = append(buckets, w.c.bucketKey(b))
			}
		}
		vals, err := s.readBuckets(ctx, buckets, kp)
		if err != nil {
			return ListPage{}, s.wrap("list", err)
		}
		for _, v := range vals {
			size += len(v)
			eachIxEntry(v, func(ms int64, key string) {
				if ms >= since && isAfter(ms, key) && q.keyMatches(key) {
					pool = append(pool, listPos{Changed: ms, Key: key})
				}
			})
		}
		probes += len(buckets)
		horizon := int64(math.MinInt64) // everything at or after it is read
		live := walks[:0]
		for _, w := range walks {
			w.next -= round
			if w.next >= w.last {
				live = append(live, w)
				horizon = max(horizon, (w.next+1)*w.c.width)
			}
		}
		walks = live
		round = min(2*round, 1024)
		// The candidates at or after the horizon, in list order.
		slices.SortFunc(pool, func(a, b listPos) int {
			if c := cmp.Compare(b.Changed, a.Changed); c != 0 {
				return c
			}
			return strings.Compare(a.Key, b.Key)
		})
		ready := len(pool)
		for ready > 0 && pool[ready-1].Changed < horizon {
			ready--
		}
		full := false
		for i := 0; i < ready && !full; {
			if reads >= 4*q.Limit {
				page.Next = encodeListCursor(last)
				return page, nil
			}
			var chunk []listPos
			for ; i < ready && len(chunk) < q.Limit; i++ {
				if consumed && pool[i] == last || len(chunk) > 0 && pool[i] == chunk[len(chunk)-1] {
					continue // written twice
				}
				chunk = append(chunk, pool[i])
			}
			cmds := make([]*redis.StringCmd, len(chunk))
			_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j, c := range chunk {
					cmds[j] = p.Get(ctx, s.hashKey(c.Key))
				}
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				return ListPage{}, s.wrap("list", err)
			}
			reads += len(chunk)
			for j, c := range chunk {
				last, consumed = c, true
				if err := cmds[j].Err(); err != nil && !errors.Is(err, redis.Nil) {
					return ListPage{}, s.wrap("list", err) // a record of an earlier layout: errOldLayout
				}
				var rec *Record
				if v := cmds[j].Val(); v != "" {
					if rec, err = listedRecord(v); err != nil {
						return ListPage{}, s.wrap("list", err)
					}
				}
				if rec == nil || rec.Changed.UnixMilli() != c.Changed ||
					(rec.State != st && !(st == StateFailed && rec.State == StateInFlight)) {
					continue // stale: the record moved on or is gone
				}
				if q.matches(rec) {
					page.Records = append(page.Records, rec)
					if len(page.Records) == q.Limit {
						full = true
						i = ready // the rest is the next page's
						break
					}
				}
			}
			if full {
				page.Next = encodeListCursor(last)
				return page, nil
			}
		}
		pool = pool[ready:]
		if len(walks) == 0 {
			return page, nil // every class read to its end
		}
		if probes >= s.pageProbes || size >= s.pageBytes {
			page.Next = encodeTimeCursor(horizon)
			return page, nil
		}
	}
}

// A page of listBuckets reads at most about this many buckets and bytes of
// entries before it hands back a cursor.
const (
	listBucketBudget = 8192
	listByteBudget   = 4 << 20
)

// encodeTimeCursor is the cursor of a page that read everything at or
// after ms: the next one lists what is older.
func encodeTimeCursor(ms int64) string {
	return "t" + base64.RawURLEncoding.EncodeToString(binary.AppendVarint(nil, ms))
}

// decodeBucketCursor reads a listBuckets cursor: a position (as every
// store's), or a time bound (below: everything before p.Changed).
func decodeBucketCursor(c string) (p listPos, below bool, err error) {
	if c == "" || c[0] != 't' {
		p, err = decodeListCursor(c)
		return p, false, err
	}
	b, err := base64.RawURLEncoding.DecodeString(c[1:])
	if err != nil {
		return listPos{}, false, ErrBadQuery
	}
	v, n := binary.Varint(b)
	if n <= 0 || n != len(b) {
		return listPos{}, false, ErrBadQuery
	}
	return listPos{Changed: v}, true, nil
}
