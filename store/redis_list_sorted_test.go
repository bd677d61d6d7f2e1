package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// ixEntries is what a bucket lists, in list order.
func ixEntries(b string) []listPos {
	var es []listPos
	eachIxEntry(b, func(ms int64, key string) { es = append(es, listPos{Changed: ms, Key: key}) })
	slices.SortFunc(es, func(a, b listPos) int { return strings.Compare(ixMember(a.Changed, a.Key), ixMember(b.Changed, b.Key)) })
	return es
}

// randomIxKeys are keys meant to break a binary search: shared starts,
// keys that start others, bytes past 0x7f (where a locale's collation
// parts from byte order) and empty ones.
func randomIxKeys(r *rand.Rand, n int) []string {
	starts := []string{"", "a", "ab", "abc", "stripe:evt_", "alipay:2026120", "\xc3\xa9", "\xff", "A", "z"}
	keys := make([]string, n)
	for i := range keys {
		k := starts[r.IntN(len(starts))]
		for range r.IntN(6) {
			k += string("aAbz0\x00\x80é"[r.IntN(9)])
		}
		keys[i] = k
	}
	return keys
}

// TestSortIxBucket: a bucket written sorted lists the entries it listed
// as written (duplicates once), and so does one with a tail of entries
// appended after, and written again with it; a sorted bucket without a
// tail is not written again; and for every prefix its head points to the
// entries that match.
func TestSortIxBucket(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var b strings.Builder
		for _, k := range randomIxKeys(r, r.IntN([]int{40, 3000}[round%2])) {
			b.WriteString(ixEntry(int64(r.IntN(5)), k))
		}
		raw := b.String()
		sorted, ok := sortIxBucket(raw)
		want := slices.Compact(ixEntries(raw))
		if len(want) == 0 {
			if ok {
				t.Fatalf("round %d: an empty bucket written sorted", round)
			}
			continue
		}
		if !ok || !strings.HasPrefix(sorted, ixSortedMagic) {
			t.Fatalf("round %d: not sorted (%v)", round, ok)
		}
		if got := ixEntries(sorted); !slices.Equal(got, want) {
			t.Fatalf("round %d: sorted bucket lists %v\nwant %v", round, got, want)
		}
		if _, again := sortIxBucket(sorted); again {
			t.Fatalf("round %d: a sorted bucket written again", round)
		}
		tail := ixEntry(9, "late:1") + ixEntry(9, "a")
		withTail := sorted + tail
		want2 := slices.Compact(ixEntries(raw + tail))
		if got := ixEntries(withTail); !slices.Equal(got, want2) {
			t.Fatalf("round %d: with a tail lists %v\nwant %v", round, got, want2)
		}
		resorted, ok := sortIxBucket(withTail)
		if !ok || !slices.Equal(ixEntries(resorted), want2) {
			t.Fatalf("round %d: sorted again with its tail: %v", round, ok)
		}
		// Every prefix: what ixFindRange points to, and the tail, hold
		// every entry that matches, and of the sorted entries at most two
		// fences' spans more.
		step := max(ixFenceEvery, (len(want)+ixFences-2)/(ixFences-1))
		for _, p := range ixPrefixes(raw) {
			from, to, end, ok := ixFindRange(withTail[:min(len(withTail), ixFindHead)], p)
			if !ok || from > to || end != len(sorted) {
				t.Fatalf("round %d, prefix %q: range %d..%d, end %d, %v", round, p, from, to, end, ok)
			}
			read := ixEntries(withTail[from:to])
			if got, want := matching(ixEntries(withTail[from:to]+tail), p), matching(want2, p); !slices.Equal(slices.Compact(got), want) {
				t.Fatalf("round %d, prefix %q: found %v\nwant %v", round, p, got, want)
			}
			if extra := len(read) - len(matching(read, p)); extra > 2*step {
				t.Fatalf("round %d, prefix %q: read %d entries that do not match", round, p, extra)
			}
		}
	}
	// A damaged head: any byte of it set to 0x00 or 0xff, ixFindRange
	// points at entries before the end it read (readBuckets slices a
	// head read whole only within it) or says read it whole, and neither
	// it nor eachIxEntry panics.
	var b strings.Builder
	for i := range 100 {
		b.WriteString(ixEntry(int64(i), fmt.Sprintf("k:%03d", i)))
	}
	whole, _ := sortIxBucket(b.String())
	for i := range ixSortedHead + 8*ixFenceSize {
		for _, v := range []byte{0x00, 0xff} {
			d := []byte(whole)
			d[i] = v
			from, to, end, ok := ixFindRange(string(d), "k:05")
			if ok && (from > to || to > end || (from < to && from < ixSortedHead)) {
				t.Fatalf("byte %d set to %#x: range %d..%d, end %d of %d bytes", i, v, from, to, end, len(d))
			}
			eachIxEntry(string(d), func(int64, string) {})
		}
	}
	// Cut anywhere, a sorted bucket lists no entry it does not hold.
	sorted, _ := sortIxBucket(ixEntry(1, "k:1") + ixEntry(2, "k:2"))
	for n := range len(sorted) {
		for _, e := range ixEntries(sorted[:n]) {
			if e.Key != "k:1" && e.Key != "k:2" {
				t.Fatalf("cut at %d: lists %q", n, e.Key)
			}
		}
	}
}

// ixPrefixes are prefixes to look for in bucket b: starts of its keys,
// keys and what follows them, and some that start none.
func ixPrefixes(b string) []string {
	ps := []string{"a", "ab", "abc", "abcz", "stripe:evt_", "\xc3", "\xff", "\x00", "zz", "A", "alipay:2026120", "{"}
	n, every := 0, 7
	eachIxEntry(b, func(_ int64, _ string) { every = max(every, n/15); n++ })
	n = 0
	eachIxEntry(b, func(_ int64, k string) {
		if n++; n%every == 0 && k != "" {
			ps = append(ps, k, k+"\x00", k[:len(k)/2+1])
		}
	})
	return slices.DeleteFunc(ps, func(p string) bool { return p == "" })
}

// matching is es's entries whose key starts with p.
func matching(es []listPos, p string) []listPos {
	var out []listPos
	for _, e := range es {
		if strings.HasPrefix(e.Key, p) {
			out = append(out, e)
		}
	}
	return out
}

// TestRedisReadBucketsByPrefix: readBuckets on a real server, against
// Go's own byte order, on buckets as written (within a head's read and
// past it), sorted (read whole with the head, and past it) and sorted
// with a tail: for every prefix it reads every entry that starts with it,
// and of a sorted bucket's sorted entries at most two fences' spans more.
func TestRedisReadBucketsByPrefix(t *testing.T) {
	s, c := redisStore(t)
	ctx := ctxT(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 60, 1500, 5000} {
		keys := randomIxKeys(r, n)
		if n >= 1500 {
			for i := range keys {
				keys[i] += fmt.Sprintf(":%08d", i)
			}
		}
		var b strings.Builder
		for i, k := range keys {
			b.WriteString(ixEntry(int64(i%3), k))
		}
		raw := b.String()
		sorted, _ := sortIxBucket(raw)
		tail := ixEntry(5, "ab:late") + ixEntry(5, "\xff")
		forms := []struct{ name, v string }{{"as written", raw}, {"sorted", sorted}, {"sorted, a tail", sorted + tail}}
		if n >= 1500 && len(raw) <= ixFindHead {
			t.Fatalf("%d keys: %d bytes, within a head's read", n, len(raw))
		}
		step := max(ixFenceEvery, (n+ixFences-2)/(ixFences-1))
		for _, f := range forms {
			bucket := fmt.Sprintf("t:find:%d:%s", n, f.name)
			if err := c.Set(ctx, bucket, f.v, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			for _, p := range ixPrefixes(raw) {
				got, err := s.readBuckets(ctx, []string{bucket, "t:find:none"}, p)
				if err != nil || len(got) != 2 || got[1] != "" {
					t.Fatalf("%d keys, %s, prefix %q: %q, %v", n, f.name, p, got, err)
				}
				read := ixEntries(got[0])
				if found, want := slices.Compact(matching(read, p)), slices.Compact(matching(ixEntries(f.v), p)); !slices.Equal(found, want) {
					t.Fatalf("%d keys, %s, prefix %q: found %v\nwant %v", n, f.name, p, found, want)
				}
				if extra := len(read) - len(matching(read, p)); f.name == "sorted" && extra > 2*step {
					t.Fatalf("%d keys, sorted, prefix %q: read %d entries that do not match", n, p, extra)
				}
			}
		}
	}
}

// replyBytes counts the bytes of the buckets a client reads (GET,
// GETRANGE): of their heads (a listing by prefix reads ixFindHead bytes
// first, and a sorted bucket's head again after), and the rest.
type replyBytes struct {
	passHooks   // a listing reads buckets in pipelines only
	heads, rest int
}

func (h *replyBytes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(c)
		}
		return err
	}
}

func (h *replyBytes) count(c redis.Cmder) {
	sc, ok := c.(*redis.StringCmd)
	if k, _ := c.Args()[1].(string); !ok || !strings.Contains(k, ":ib:{") {
		return // not a bucket (a record)
	}
	if a := c.Args(); c.Name() == "getrange" && a[2] == int64(0) && (a[3] == int64(ixFindHead-1) || a[3] == int64(ixSortedHead-1)) {
		h.heads += len(sc.Val())
	} else {
		h.rest += len(sc.Val())
	}
}

// fillBuckets settles keys into `buckets` time buckets (100 ms each: a
// 1-minute ttl), perBucket keys each, then a key ("tick") three buckets on,
// which sorts the last of them, and waits for the sorts. Every rare-th key
// is "zrare:<i>", the others "<scope>:bulk:<i>", scopes alpha and beta by
// turns.
func fillBuckets(t *testing.T, s *Redis, buckets, perBucket, rare int) (keys []string) {
	t.Helper()
	ctx := ctxT(t)
	for i := range buckets * perBucket {
		k := fmt.Sprintf("%s:bulk:%06d", []string{"alpha", "beta"}[i%2], i)
		if i%rare == rare/2 {
			k = fmt.Sprintf("zrare:%d", i)
		}
		keys = append(keys, k)
		won := claim(t, s, k, "", time.Minute, Won)
		if err := s.Complete(ctx, k, won.Token, answer, time.Minute, Journal{}); err != nil {
			t.Fatal(err)
		}
		if i%perBucket == perBucket-1 {
			time.Sleep(ixMinWidth)
		}
	}
	time.Sleep(3 * ixMinWidth)
	settleKeys(t, s, []string{"tick"}, time.Minute, 0, nil)
	s.bg.Wait()
	return keys
}

// TestRedisListPrefixReadsWhatItFinds: once its buckets are finished (and
// sorted), a listing by a prefix reads of each bucket its head (at most
// ixFindHead bytes), and past it only the entries near what it finds:
// held to the same bound whether the buckets hold 150 keys each or 600.
// A listing of one scope reads that scope's entries, not the other's. A
// listing without a prefix still reads every entry.
func TestRedisListPrefixReadsWhatItFinds(t *testing.T) {
	entry := len(ixEntry(0, "alpha:bulk:000000"))
	for _, perBucket := range []int{150, 600} {
		s, c := redisStore(t)
		keys := fillBuckets(t, s, 5, perBucket, 5*perBucket/2) // two rare keys
		beta := len(slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return !strings.HasPrefix(k, "beta:") }))
		buckets := redisKeys(t, c, s.prefix+":ib:{answered:60000:*")
		sorted := 0
		for _, b := range buckets {
			if v, _ := c.GetRange(ctxT(t), b, 0, 2).Result(); v == ixSortedMagic {
				sorted++
			}
		}
		if len(buckets) < 6 || sorted != len(buckets)-1 {
			t.Fatalf("%d buckets, %d of them sorted: want at least 6, all but the newest sorted", len(buckets), sorted)
		}
		h := &replyBytes{}
		c.AddHook(h)
		list := func(q ListQuery, want int) {
			t.Helper()
			h.heads, h.rest = 0, 0
			q.State, q.Limit = StateAnswered, 5000
			if got := listAll(t, s, q); len(got) != want {
				t.Fatalf("%d a bucket, %+v: listed %d keys, want %d", perBucket, q, len(got), want)
			}
			t.Logf("%d keys a bucket, scope %q, prefix %q: %d keys, %d bytes of heads and %d more read",
				perBucket, q.Scope, q.Prefix, want, h.heads, h.rest)
		}
		list(ListQuery{Prefix: "zrare:"}, 2)
		// Two rare entries, the tick's bucket (not sorted: read whole),
		// and of the buckets they are in, up to two spans of 16 entries.
		if most := 3*entry + 2*2*16*entry; h.rest > most || h.heads > len(buckets)*(ixFindHead+ixSortedHead) {
			t.Fatalf("%d a bucket: read %d bytes past the heads (want at most %d), %d of heads", perBucket, h.rest, most, h.heads)
		}
		list(ListQuery{Prefix: "~"}, 0) // after every key
		if h.rest != 0 {
			t.Fatalf("%d a bucket, a prefix after every key: read %d bytes past the heads", perBucket, h.rest)
		}
		list(ListQuery{Scope: "beta"}, beta)
		if most := (beta+len(buckets)*2*16)*entry + ixFindHead; h.rest > most {
			t.Fatalf("%d a bucket, one scope of two: read %d bytes past the heads, want at most %d", perBucket, h.rest, most)
		}
		list(ListQuery{}, len(keys)+1)
		if h.rest < 5*perBucket*entry {
			t.Fatalf("%d a bucket, no prefix: read %d bytes, want every entry", perBucket, h.rest)
		}
	}
}

// rewriteAfterHeads writes a bucket again (as a process sorting it with
// its tail does) right after a listing's pipeline of heads, before it
// reads what they point to.
type rewriteAfterHeads struct {
	passHooks
	c          *redis.Client
	bucket, to string
	done       bool
}

func (h *rewriteAfterHeads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if a := cmds[0].Args(); !h.done && cmds[0].Name() == "getrange" && a[3] == int64(ixFindHead-1) {
			h.done = true
			if err := h.c.Set(ctx, h.bucket, h.to, time.Minute).Err(); err != nil {
				return err
			}
		}
		return err
	}
}

// TestRedisListBucketRewrittenWhileRead: a sorted bucket with a tail,
// written again (its tail sorted in, the offsets moved) between a
// listing's read of its head and its read of what the head points to, is
// read whole: every entry that matches is found, none misread at the old
// offsets. It fails without the head read again after.
func TestRedisListBucketRewrittenWhileRead(t *testing.T) {
	s, c := redisStore(t)
	ctx := ctxT(t)
	var b strings.Builder
	for i := range 400 {
		b.WriteString(ixEntry(int64(i), fmt.Sprintf("order:%05d", i*2)))
	}
	sorted, _ := sortIxBucket(b.String())
	var tail strings.Builder
	for i := range 60 { // late entries, sorting in before the matches
		tail.WriteString(ixEntry(int64(i), fmt.Sprintf("order:%05d", i*2+1)))
	}
	before := sorted + tail.String()
	after, ok := sortIxBucket(before)
	if !ok {
		t.Fatal("the bucket with a tail is not written again")
	}
	const bucket = "t:rewritten"
	if err := c.Set(ctx, bucket, before, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	h := &rewriteAfterHeads{c: redis.NewClient(&redis.Options{Addr: c.Options().Addr}), bucket: bucket, to: after}
	t.Cleanup(func() { h.c.Close() })
	c.AddHook(h)
	got, err := s.readBuckets(ctx, []string{bucket}, "order:006")
	if err != nil || !h.done {
		t.Fatalf("%v (rewritten: %v)", err, h.done)
	}
	var keys []string
	for _, e := range ixEntries(got[0]) {
		if strings.HasPrefix(e.Key, "order:006") {
			keys = append(keys, e.Key)
		}
	}
	slices.Sort(keys)
	var want []string
	for i := 600; i < 700; i += 2 {
		want = append(want, fmt.Sprintf("order:%05d", i))
	}
	if !slices.Equal(keys, want) {
		t.Fatalf("found %v\nwant %v", keys, want)
	}
}

// TestRedisCloseBoundsBackgroundSorts: a bucket's sort waiting on a
// server that stopped answering (SIGSTOP) holds Close no longer than
// bgWait, whatever the client's time-out; the bucket, left unsorted,
// still lists once the server answers again. Without the bound Close
// waited for the client's 5 s time-out.
func TestRedisCloseBoundsBackgroundSorts(t *testing.T) {
	testenv.Slow(t, "pauses redis-server")
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	t.Cleanup(func() { c.Close() })
	s := NewRedis(c, RedisOptions{})
	settleKeys(t, s, []string{"paused:1", "paused:2"}, time.Minute, 0, nil)
	buckets := redisKeys(t, c, s.prefix+":ib:{answered:60000:*")
	if len(buckets) == 0 {
		t.Fatal("no bucket written")
	}
	resume := srv.Resumer()
	srv.Pause()
	s.compactBuckets(buckets)
	time.Sleep(100 * time.Millisecond) // its STRLEN sent, unanswered
	start := time.Now()
	s.Close()
	took := time.Since(start)
	resume()
	if took > 2*time.Second { // bgWait is 1 s, the client's time-out 5 s
		t.Fatalf("Close took %v with a sort waiting on a paused server, want at most ~%v", took, bgWait)
	}
	s2 := NewRedis(c, RedisOptions{})
	t.Cleanup(func() { s2.Close() })
	if got := listAll(t, s2, ListQuery{State: StateAnswered, Prefix: "paused:", Limit: 10}); len(got) != 2 {
		t.Fatalf("listed %v after the server answered again, want both keys", got)
	}
}

// TestRedisBucketPastSortMaxLeftAsWritten: a bucket larger than ixSortMax
// is not read into the gateway to be sorted; it lists all the same.
func TestRedisBucketPastSortMaxLeftAsWritten(t *testing.T) {
	s, c := redisStore(t)
	ctx := ctxT(t)
	settleKeys(t, s, []string{"big:1", "big:2", "big:3"}, time.Minute, 0, nil)
	buckets := redisKeys(t, c, s.prefix+":ib:{answered:60000:*")
	if len(buckets) != 1 {
		t.Fatalf("%d buckets, want 1", len(buckets))
	}
	n, _ := c.StrLen(ctx, buckets[0]).Result()
	s.sortMax = n - 1
	if err := s.compactBucket(ctx, buckets[0]); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.GetRange(ctx, buckets[0], 0, 2).Result(); v == ixSortedMagic {
		t.Fatal("a bucket past ixSortMax was sorted")
	}
	s.sortMax = n
	if err := s.compactBucket(ctx, buckets[0]); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.GetRange(ctx, buckets[0], 0, 2).Result(); v != ixSortedMagic {
		t.Fatal("a bucket within ixSortMax was not sorted")
	}
	if got := listAll(t, s, ListQuery{State: StateAnswered, Prefix: "big:", Limit: 10}); len(got) != 3 {
		t.Fatalf("listed %v", got)
	}
}

// TestRedisSortedBucketNotReadAgain: a gateway moving past a bucket that
// another already sorted reads its length and head, not the bucket: no
// GET, no write. One with a tail a late settle appended is read and
// sorted again.
func TestRedisSortedBucketNotReadAgain(t *testing.T) {
	s, c := redisStore(t)
	ctx := ctxT(t)
	settleKeys(t, s, []string{"again:1", "again:2"}, time.Minute, 0, nil)
	buckets := redisKeys(t, c, s.prefix+":ib:{answered:60000:*")
	if len(buckets) == 0 {
		t.Fatal("no bucket written")
	}
	if err := s.compactBucket(ctx, buckets[0]); err != nil {
		t.Fatal(err)
	}
	v, _ := c.Get(ctx, buckets[0]).Result()
	entries := len(ixEntries(v))
	h := newCountHook()
	c.AddHook(h)
	if err := s.compactBucket(ctx, buckets[0]); err != nil {
		t.Fatal(err)
	}
	if n, w := h.count("get"), h.count("evalsha")+h.count("eval"); n != 0 || w != 0 {
		t.Fatalf("a sorted bucket: %d GETs and %d scripts (%v), want none", n, w, h.cmds)
	}
	c.Append(ctx, buckets[0], ixEntry(time.Now().UnixMilli(), "again:late"))
	h.reset()
	if err := s.compactBucket(ctx, buckets[0]); err != nil {
		t.Fatal(err)
	}
	v, _ = c.Get(ctx, buckets[0]).Result()
	if end, _, ok := sortedHead(v); h.count("get") != 2 || !ok || end != len(v) || len(ixEntries(v)) != entries+1 {
		t.Fatalf("a sorted bucket with a tail: %d GETs (the sort's and the test's), sorted again %v, %d entries",
			h.count("get"), ok && end == len(v), len(ixEntries(v)))
	}
}
