package store

import (
	"context"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// countHook counts what a real client sends: commands by name (each of a
// pipeline's too) and round trips (a command alone or a pipeline).
type countHook struct {
	mu    sync.Mutex
	cmds  map[string]int
	trips int
}

func newCountHook() *countHook { return &countHook{cmds: map[string]int{}} }

func (h *countHook) add(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trips++
	for _, c := range cmds {
		h.cmds[c.Name()]++
	}
}

func (h *countHook) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmds, h.trips = map[string]int{}, 0
}

func (h *countHook) count(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cmds[name]
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds...)
		return next(ctx, cmds)
	}
}

// redisKeys is every key matching pattern, on each master of a cluster.
func redisKeys(t *testing.T, c redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := ctxT(t)
	var mu sync.Mutex
	var keys []string
	get := func(ctx context.Context, n *redis.Client) error {
		ks, err := n.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, get)
	} else {
		err = get(ctx, c.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// settleKeys claims and settles keys in order, answered or failed (fail),
// at least gap apart, and returns them newest first (list order).
func settleKeys(t *testing.T, s Store, keys []string, ttl, gap time.Duration, fail func(i int) bool) []string {
	t.Helper()
	ctx := ctxT(t)
	for i, key := range keys {
		won := claim(t, s, key, "", time.Minute, Won)
		var err error
		if fail != nil && fail(i) {
			err = s.Release(ctx, key, won.Token, ttl, Journal{Attempt: attempt(500, AttemptFailed, "")})
		} else {
			err = s.Complete(ctx, key, won.Token, answer, ttl, Journal{})
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(gap)
	}
	out := slices.Clone(keys)
	slices.Reverse(out)
	return out
}

// TestRedisListPrefixBoundedByWhatItFinds: a prefix that matches two keys
// among hundreds is listed in one page, reading two records and a bounded
// number of round trips (the index's buckets), not the whole index page
// by page (it took one page per 4×Limit keys: 2,732 pages at 1M keys).
func TestRedisListPrefixBoundedByWhatItFinds(t *testing.T) {
	s, c := redisStore(t)
	var keys []string
	for i := range 600 {
		keys = append(keys, fmt.Sprintf("bulk:%04d", i))
		if i == 100 || i == 500 {
			keys = append(keys, fmt.Sprintf("rare:%d", i))
		}
	}
	settleKeys(t, s, keys, time.Minute, 0, nil)
	h := newCountHook()
	c.AddHook(h)
	h.reset()
	q := ListQuery{State: StateAnswered, Prefix: "rare:", Limit: 5}
	pages := 0
	var got []string
	for {
		p, err := s.List(ctxT(t), q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range p.Records {
			got = append(got, r.Key)
		}
		if q.Cursor = p.Next; q.Cursor == "" || pages > 1000 {
			break
		}
	}
	if !slices.Equal(got, []string{"rare:500", "rare:100"}) {
		t.Fatalf("listed %v, want [rare:500 rare:100]", got)
	}
	if reads := h.count("hmget"); pages != 1 || reads > 2 || h.trips > 16 {
		t.Fatalf("%d pages, %d records read, %d round trips (%v): want 1 page, 2 records, at most 16 round trips",
			pages, reads, h.trips, h.cmds)
	}
}

// TestRedisListAcrossBuckets: keys settled over many time buckets (the
// class of a 40 s ttl has buckets of 100 ms) list newest first, each once,
// whatever the page size and however small a page's budget of buckets
// (which ends pages on a time cursor); a cursor taken before newer keys
// are settled goes on where it was. On a single server (the settle script
// writes the bucket) and on Cluster (the settle's pipeline does).
func TestRedisListAcrossBuckets(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		s, c := redisStore(t)
		testListAcrossBuckets(t, s, c)
	})
	t.Run("cluster", func(t *testing.T) {
		testenv.Slow(t, "starts a Redis Cluster")
		c := redistest.StartCluster(t, 3).Client()
		s := NewRedis(c, RedisOptions{Prefix: "across"})
		t.Cleanup(func() { s.Close() })
		testListAcrossBuckets(t, s, c)
	})
}

func testListAcrossBuckets(t *testing.T, s *Redis, c redis.UniversalClient) {
	var keys []string
	for i := range 24 {
		keys = append(keys, fmt.Sprintf("across:%02d", i))
	}
	fail := func(i int) bool { return i%3 == 2 }
	all := settleKeys(t, s, keys, 40*time.Second, 30*time.Millisecond, fail)
	var answered, failed []string
	for _, k := range all {
		var i int
		fmt.Sscanf(k, "across:%d", &i)
		if fail(i) {
			failed = append(failed, k)
		} else {
			answered = append(answered, k)
		}
	}
	if b := redisKeys(t, c, s.prefix+":ib:{answered:40000:*"); len(b) < 4 {
		t.Fatalf("answered entries in %d buckets %v, want them spread over at least 4", len(b), b)
	}
	for _, probes := range []int{listBucketBudget, 3} {
		s.pageProbes = probes
		for _, limit := range []int{1, 4, 7, 100} {
			if got := listAll(t, s, ListQuery{State: StateAnswered, Limit: limit}); !slices.Equal(got, answered) {
				t.Fatalf("budget %d, limit %d: answered %v\nwant %v", probes, limit, got, answered)
			}
			if got := listAll(t, s, ListQuery{State: StateFailed, Limit: limit}); !slices.Equal(got, failed) {
				t.Fatalf("budget %d, limit %d: failed %v\nwant %v", probes, limit, got, failed)
			}
			want := slices.DeleteFunc(slices.Clone(answered), func(k string) bool { return !strings.HasPrefix(k, "across:1") })
			if got := listAll(t, s, ListQuery{State: StateAnswered, Prefix: "across:1", Limit: limit}); !slices.Equal(got, want) {
				t.Fatalf("budget %d, limit %d: prefix across:1 %v\nwant %v", probes, limit, got, want)
			}
		}
	}
	s.pageProbes = listBucketBudget
	// A cursor taken, then newer keys: the listing goes on where it was.
	p, err := s.List(ctxT(t), ListQuery{State: StateAnswered, Limit: 5})
	if err != nil || len(p.Records) != 5 || p.Next == "" {
		t.Fatalf("first page: %d records, next %q, %v", len(p.Records), p.Next, err)
	}
	settleKeys(t, s, []string{"across:late:1", "across:late:2"}, 40*time.Second, 0, nil)
	rest := listAll(t, s, ListQuery{State: StateAnswered, Limit: 3, Cursor: p.Next})
	if !slices.Equal(rest, answered[5:]) {
		t.Fatalf("after the cursor: %v\nwant %v", rest, answered[5:])
	}
}

// TestRedisListBucketExpiry: a bucket lives as long as the records it
// lists (their ttl, the bucket's width and ixSkew), so nothing trims it;
// once its records are gone its entries read stale and list nothing.
func TestRedisListBucketExpiry(t *testing.T) {
	s, c := redisStore(t)
	const ttl = 300 * time.Millisecond
	settleKeys(t, s, []string{"exp:1", "exp:2", "exp:3"}, ttl, 40*time.Millisecond, nil)
	buckets := redisKeys(t, c, s.prefix+":ib:{answered:300:*")
	if len(buckets) == 0 {
		t.Fatal("no bucket written")
	}
	for _, b := range buckets {
		pttl, err := c.PTTL(ctxT(t), b).Result()
		if err != nil || pttl <= ttl || pttl > ttl+ixMinWidth+ixSkew {
			t.Fatalf("bucket %s lives %v (%v), want between %v and %v", b, pttl, err, ttl, ttl+ixMinWidth+ixSkew)
		}
	}
	time.Sleep(2 * ttl)
	if got := listAll(t, s, ListQuery{State: StateAnswered, Limit: 10}); len(got) != 0 {
		t.Fatalf("listed %v after the records expired", got)
	}
}

// TestRedisListOldLayoutIgnored: a store written by an earlier version
// left sorted sets <prefix>:ix:{<state>:<ttl>:<shard>} (and a member
// that is none); listing neither fails nor reads them: only what the time
// buckets hold is listed.
func TestRedisListOldLayoutIgnored(t *testing.T) {
	s, c := redisStore(t)
	ctx := ctxT(t)
	settleKeys(t, s, []string{"old:1"}, time.Minute, 0, nil)
	rec, err := s.Lookup(ctx, "old:1")
	if err != nil {
		t.Fatal(err)
	}
	// old:1 as the earlier version indexed it, and only so.
	for _, b := range redisKeys(t, c, s.prefix+":ib:*") {
		c.Del(ctx, b)
	}
	old := s.ixShardKey(StateAnswered, "60000", ixShard("old:1"))
	if err := c.ZAdd(ctx, old, redis.Z{Member: ixMember(rec.Changed.UnixMilli(), "old:1")}, redis.Z{Member: "not a member"}).Err(); err != nil {
		t.Fatal(err)
	}
	settleKeys(t, s, []string{"new:1"}, time.Minute, 0, nil)
	if got := listAll(t, s, ListQuery{State: StateAnswered, Limit: 10}); !slices.Equal(got, []string{"new:1"}) {
		t.Fatalf("listed %v, want [new:1] (the old sorted set is not read)", got)
	}
	if n, _ := c.ZCard(ctx, old).Result(); n != 2 {
		t.Fatalf("the old sorted set holds %d members, want it left alone", n)
	}
}

// TestRedisListBucketsCompacted: a finished bucket is written again
// (sorted) in a string of its own length (APPEND had grown it to up to
// twice that), after the first settle two buckets on; its entries and
// lifetime stay.
func TestRedisListBucketsCompacted(t *testing.T) {
	s, c := redisStore(t)
	ctx := ctxT(t)
	var keys []string
	for i := range 400 {
		keys = append(keys, fmt.Sprintf("stripe:evt_1NG8Du2eZvKYlo2C%06d", i))
	}
	settleKeys(t, s, keys[:300], time.Minute, time.Millisecond, nil) // over 3 buckets or more
	time.Sleep(3 * ixMinWidth)                                       // the next settles are two buckets on
	settleKeys(t, s, keys[300:], time.Minute, 0, nil)
	s.bg.Wait() // the sorts the settles started
	buckets := redisKeys(t, c, s.prefix+":ib:{answered:60000:*")
	if len(buckets) < 3 {
		t.Fatalf("entries in %d buckets %v, want at least 3", len(buckets), buckets)
	}
	if got := listAll(t, s, ListQuery{State: StateAnswered, Limit: 1000}); len(got) != len(keys) {
		t.Fatalf("listed %d of %d keys", len(got), len(keys))
	}
	// The finished ones: all but the newest two (bucket numbers have as
	// many digits: the names sort by number).
	var entries, used int64
	for _, b := range buckets[:len(buckets)-2] {
		n, _ := c.StrLen(ctx, b).Result()
		m, _ := c.MemoryUsage(ctx, b, 0).Result()
		if pttl, _ := c.PTTL(ctx, b).Result(); pttl <= 0 {
			t.Fatalf("bucket %s lives %v", b, pttl)
		}
		if v, _ := c.GetRange(ctx, b, 0, 2).Result(); v != ixSortedMagic {
			t.Fatalf("bucket %s not sorted: starts %q", b, v)
		}
		entries += n
		used += m - 96 // the key's own overhead
	}
	t.Logf("finished buckets: %d bytes for %d bytes of entries", used, entries)
	if used > entries*6/5 {
		t.Fatalf("finished buckets use %d bytes for %d bytes of entries", used, entries)
	}
}

// ixShard is crc32.ChecksumIEEE of the key, computed without a copy.
func TestIxShardIsCRC32(t *testing.T) {
	for _, key := range []string{"", "a", "alipay:2026120522001", "stripe:evt_a1b2c3d4e5f60100000042", strings.Repeat("k\xff", 600)} {
		if got, want := ixShard(key), int(crc32.ChecksumIEEE([]byte(key))%ixShards); got != want {
			t.Errorf("ixShard(%q) = %d, want %d", key, got, want)
		}
	}
}
