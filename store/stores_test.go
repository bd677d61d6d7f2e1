package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// fakeClock is an injectable clock for the memory and embedded stores.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestEmbeddedSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := NewEmbedded(path, EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	won, err := s.Claim(ctx, "paid", "fp", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "paid", won.Token, answer, time.Hour, Journal{}); err != nil {
		t.Fatal(err)
	}
	inflight, err := s.Claim(ctx, "pending", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = NewEmbedded(path, EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Claim(ctx, "paid", "fp", time.Hour)
	if err != nil || r.Outcome != Answered || r.Record.Status != answer.Status ||
		string(r.Record.Body) != string(answer.Body) || r.Record.Copies != 2 {
		t.Fatalf("after reopen: %+v, %v", r, err)
	}
	// The in-flight claim is still held by its token across the restart.
	if err := s.Renew(ctx, "pending", inflight.Token, time.Hour); err != nil {
		t.Fatalf("Renew after reopen: %v", err)
	}
	recs, _, err := listInFlight(ctx, s, "", 10)
	if err != nil || len(recs) != 1 || recs[0].Key != "pending" {
		t.Fatalf("InFlight after reopen: %v, %v", recs, err)
	}
	// Copies counted by replays (kept in memory between flushes) are
	// written by Close.
	for range 3 {
		if _, err := s.Claim(ctx, "paid", "fp", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = NewEmbedded(path, EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rec, err := s.Lookup(ctx, "paid"); err != nil || rec.Copies != 5 {
		t.Fatalf("copies after second reopen: %+v %v", rec, err)
	}
}

func TestEmbeddedFlush(t *testing.T) {
	ctx := context.Background()
	s, err := NewEmbedded(filepath.Join(t.TempDir(), "idem.db"), EmbeddedOptions{NoSync: true, FlushInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	won, _ := s.Claim(ctx, "k", "", time.Hour)
	if err := s.Complete(ctx, "k", won.Token, answer, time.Hour, Journal{}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := s.Claim(ctx, "k", "", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	onDisk := func() int64 {
		var n int64
		s.db.View(func(tx *bolt.Tx) error {
			e, err := decodeEntry(tx.Bucket(bucketRecords).Get(bkey("k")))
			if err == nil {
				n = e.Copies
			}
			return nil
		})
		return n
	}
	eventually(t, "replay copies written", func() bool { return onDisk() == 5 })
	if rec := lookup(t, s, "k"); rec.Copies != 5 {
		t.Fatalf("Lookup copies %d after flush", rec.Copies)
	}
}

func TestMemoryClock(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	ctx := context.Background()
	s := NewMemory()
	s.now = clock.Now
	defer s.Close()
	won, _ := s.Claim(ctx, "k", "", time.Second)
	clock.Add(999 * time.Millisecond)
	if r, _ := s.Claim(ctx, "k", "", time.Second); r.Outcome != InFlight {
		t.Fatalf("before the lock TTL: %v", r.Outcome)
	}
	clock.Add(time.Millisecond)
	if err := s.Complete(ctx, "k", won.Token, answer, time.Hour, Journal{}); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Complete after the lock TTL: %v", err)
	}
	r, _ := s.Claim(ctx, "k", "", time.Second)
	if r.Outcome != Won {
		t.Fatalf("after the lock TTL: %v", r.Outcome)
	}
	if err := s.Complete(ctx, "k", r.Token, answer, time.Hour, Journal{}); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Hour - time.Millisecond)
	if r, _ := s.Claim(ctx, "k", "", time.Second); r.Outcome != Answered {
		t.Fatalf("before the ttl: %v", r.Outcome)
	}
	clock.Add(time.Millisecond)
	if _, err := s.Lookup(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the ttl: %v", err)
	}
}

// redisStore is a Redis store on a redis-server of its own, and a client
// of that server to look under the store.
func redisStore(t *testing.T) (*Redis, *redis.Client) {
	t.Helper()
	c := redistest.Start(t).Client()
	s := NewRedis(c, RedisOptions{})
	t.Cleanup(func() { s.Close() })
	return s, c
}

// TestRedisClusterHashTags: keys of different idempotency keys spread over
// slots (and nodes), every script runs on each without CROSSSLOT, and the
// hash and its wake channel share the tag.
func TestRedisClusterHashTags(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster")
	cl := redistest.StartCluster(t, 3).Client()
	ctx := context.Background()
	s := NewRedis(cl, RedisOptions{})
	defer s.Close()
	slots := map[int64]bool{}
	for i := range 60 {
		key := fmt.Sprintf("stripe:evt_%d{x}", i)
		hk := s.hashKey(key)
		slot, err := cl.ClusterKeySlot(ctx, hk).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
		if chSlot, _ := cl.ClusterKeySlot(ctx, s.channel(key)).Result(); chSlot != slot {
			t.Fatalf("%q: hash in slot %d, channel in %d", key, slot, chSlot)
		}
		if tagSlot, _ := cl.ClusterKeySlot(ctx, "{"+escapeKey(key)+"}").Result(); tagSlot != slot {
			t.Fatalf("%q: tag not intact in %q", key, hk)
		}
		won, err := s.Claim(ctx, key, "fp", time.Minute)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if err := s.Renew(ctx, key, won.Token, time.Minute); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		switch i % 3 {
		case 0:
			err = s.Complete(ctx, key, won.Token, answer, time.Minute, Journal{})
		case 1:
			err = s.Release(ctx, key, won.Token, time.Hour, Journal{})
		case 2:
			err = s.Delete(ctx, key)
		}
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if _, err := s.Claim(ctx, key, "other", time.Minute); err != nil {
			t.Fatalf("second Claim: %v", err)
		}
	}
	if len(slots) < 50 {
		t.Fatalf("60 keys in only %d slots", len(slots))
	}
	// And they landed on every master.
	var mu sync.Mutex
	perNode := map[string]int64{}
	err := cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		mu.Lock()
		perNode[m.Options().Addr] = n
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for addr, n := range perNode {
		if n == 0 {
			t.Fatalf("no keys on %s: %v", addr, perNode)
		}
	}
}

// TestRedisInFlightAcrossInstances: claims won by one gateway instance are
// listed by another, newest first and paged across a 3-master Cluster,
// once the first has written its notes (redis_inflight.go); settled
// claims leave the index.
func TestRedisInFlightAcrossInstances(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster")
	cl := redistest.StartCluster(t, 3).Client()
	ctx := context.Background()
	a := NewRedis(cl, RedisOptions{Prefix: "ifx"})
	defer a.Close()
	b := NewRedis(cl, RedisOptions{Prefix: "ifx"})
	defer b.Close()
	var want []string // newest first
	tokens := map[string]string{}
	for i := range 30 {
		key := fmt.Sprintf("k%02d", i)
		res, err := a.Claim(ctx, key, "", time.Minute)
		if err != nil || res.Outcome != Won {
			t.Fatal(res, err)
		}
		tokens[key] = res.Token
		want = append([]string{key}, want...)
		time.Sleep(2 * time.Millisecond) // distinct claim times
	}
	// Another store's keys on the same cluster are not listed.
	other := NewRedis(cl, RedisOptions{Prefix: "ifxx"})
	defer other.Close()
	if _, err := other.Claim(ctx, "k00", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			recs, next, err := listInFlight(ctx, b, cursor, 4)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got = append(got, r.Key)
			}
			if next == "" {
				return got
			}
			if pages > 100 {
				t.Fatal("no end")
			}
			cursor = next
		}
	}
	var got []string
	eventually(t, "the other instance lists every claim", func() bool {
		got = list()
		return len(got) == len(want)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v\nwant (newest first) %v", got, want)
	}
	// Settle the older half on a: they leave the listing and the index.
	for _, key := range want[15:] {
		if err := a.Complete(ctx, key, tokens[key], Answer{Status: 200}, time.Minute, Journal{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := list(); !slices.Equal(got, want[:15]) {
		t.Fatalf("after settling: %v, want %v", got, want[:15])
	}
	var entries int64
	for i := range ixShards {
		entries += cl.ZCard(ctx, a.ixShardKey(StateInFlight, "", i)).Val()
	}
	if entries != 15 {
		t.Fatalf("%d in-flight index entries left, want 15 (settling removes its own)", entries)
	}
}

// TestRedisOutage: while Redis is down every call fails with a wrapped
// error (not a hang, not a wrong outcome) and waiters are woken to
// re-check; once it is back the same store works again, Wait included.
func TestRedisOutage(t *testing.T) {
	testenv.Slow(t, "fault: Redis stopped and restarted")
	srv := redistest.Start(t)
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer cl.Close()
	s := NewRedis(cl, RedisOptions{})
	defer s.Close()
	ctx := context.Background()
	won, err := s.Claim(ctx, "k", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done, stop, err := s.Wait(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	srv.Stop()
	woken(t, done, "connection loss")
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.Claim(cctx, "k", "", time.Minute); err == nil || errors.Is(err, ErrNotOwner) {
		t.Fatalf("Claim while down: %v", err)
	}
	if err := s.Complete(cctx, "k", won.Token, answer, time.Minute, Journal{}); err == nil || errors.Is(err, ErrNotOwner) {
		t.Fatalf("Complete while down: %v", err)
	}
	if _, _, err := s.Wait(cctx, "k2"); err == nil {
		t.Fatal("Wait while down succeeded")
	}

	srv.Restart() // empty: the claim is gone, as after a failover without persistence
	var r ClaimResult
	eventually(t, "claims work again", func() bool {
		r, err = s.Claim(ctx, "k", "", time.Minute)
		return err == nil
	})
	if r.Outcome != Won {
		t.Fatalf("after restart: %v", r.Outcome)
	}
	var done2 <-chan struct{}
	eventually(t, "Wait works again", func() bool {
		var stop2 func()
		done2, stop2, err = s.Wait(ctx, "k")
		if err == nil {
			t.Cleanup(stop2)
		}
		return err == nil
	})
	// The waiter's own claim, as WaitAnswer's protocol has it: a
	// completion wakes a key a claim found in flight.
	if dup, err := s.Claim(ctx, "k", "", time.Minute); err != nil || dup.Outcome != InFlight {
		t.Fatalf("the waiter's claim after restart: %+v %v, want in flight", dup, err)
	}
	if err := s.Complete(ctx, "k", r.Token, answer, time.Minute, Journal{}); err != nil {
		t.Fatal(err)
	}
	woken(t, done2, "complete after restart")
}
