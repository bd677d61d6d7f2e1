package cache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// scriptCounter counts the scripts a client sends (EVALSHA and EVAL, in
// pipelines too): a replay from memory sends none.
type scriptCounter struct{ n atomic.Int64 }

func (c *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}
func (c *scriptCounter) count(cmd redis.Cmder) {
	if n := cmd.Name(); n == "evalsha" || n == "eval" {
		c.n.Add(1)
	}
}

// hotPair is two gateway instances with hot answers on one Redis (or
// Cluster), each with its own client; b's scripts are counted.
func hotPair(t *testing.T, cluster bool) (a, b *Redis, bScripts *scriptCounter) {
	var ca, cb redis.UniversalClient
	if cluster {
		c := redistest.StartCluster(t, 3)
		addrs := c.Client().Options().Addrs
		ca = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		cb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	} else {
		srv := redistest.Start(t)
		ca = redis.NewClient(&redis.Options{Addr: srv.Addr()})
		cb = redis.NewClient(&redis.Options{Addr: srv.Addr()})
	}
	bScripts = &scriptCounter{}
	cb.AddHook(bScripts)
	a = NewRedis(ca, RedisOptions{Prefix: "hot", HotAnswers: 100})
	b = NewRedis(cb, RedisOptions{Prefix: "hot", HotAnswers: 100})
	t.Cleanup(func() {
		a.Close()
		b.Close()
		ca.Close()
		cb.Close()
	})
	eventually(t, "both leases start", func() bool { return a.hot.leased() && b.hot.leased() })
	return a, b, bScripts
}

// answered claims and completes key on s.
func answered(t *testing.T, s Store, key string, ttl time.Duration) {
	t.Helper()
	won := claim(t, s, key, "fp", ttl, Won)
	if err := s.Complete(ctxT(t), key, won.Token, answer, ttl, Journal{}); err != nil {
		t.Fatal(err)
	}
}

// TestHotAnswers: a duplicate of an answered key is replayed from memory
// with no script sent, its copies are counted in Redis (exactly, once
// flushed), and a purge or a reopen on another instance is seen by the
// first claim that starts after it returned.
func TestHotAnswers(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			a, b, scripts := hotPair(t, cluster)
			answered(t, a, "k", longTTL)
			claim(t, b, "k", "fp", longTTL, Answered) // from Redis: kept
			before := scripts.n.Load()
			for i := range 50 {
				r := claim(t, b, "k", "fp", longTTL, Answered)
				if r.Record.Status != answer.Status || string(r.Record.Body) != string(answer.Body) {
					t.Fatalf("replay %d from memory: %d %q", i, r.Record.Status, r.Record.Body)
				}
				if r.Record.Copies != int64(3+i) {
					t.Fatalf("replay %d: copies %d, want %d", i, r.Record.Copies, 3+i)
				}
			}
			if n := scripts.n.Load() - before; n != 0 {
				// The flush may have run one count script meanwhile.
				if n > 3 {
					t.Fatalf("50 replays from memory sent %d scripts", n)
				}
			}
			// A different fingerprint is Redis's to count as a conflict.
			claim(t, b, "k", "other", longTTL, Conflict)
			// Counted: a's lookup sees b's copies within a flush.
			eventually(t, "b's copies counted in Redis", func() bool {
				r := lookup(t, a, "k")
				return r.Copies == 52 && r.CopyOutcomes.Replayed == 51 && r.Conflicts == 1
			})

			// A purge on a: the next claim on b reaches Redis and wins.
			if err := a.Delete(ctxT(t), "k"); err != nil {
				t.Fatal(err)
			}
			won := claim(t, b, "k", "fp", longTTL, Won)
			if err := b.Complete(ctxT(t), "k", won.Token, answer, longTTL, Journal{}); err != nil {
				t.Fatal(err)
			}
			claim(t, b, "k", "fp", longTTL, Answered)
			claim(t, a, "k", "fp", longTTL, Answered) // both keep it
			if r := claim(t, a, "k", "fp", longTTL, Answered); r.Record.Copies != 4 {
				t.Fatalf("a's replay from memory: %d copies, want 4", r.Record.Copies)
			}

			// A reopen on b (its own entry) and on a (the other's).
			if err := b.Reopen(ctxT(t), "k", longTTL); err != nil {
				t.Fatal(err)
			}
			claim(t, a, "k", "fp", longTTL, Won)
			// The new record's copies: b's first and replay, a's replay
			// from Redis and from memory (counted within a flush), and
			// a's win after the reopen.
			eventually(t, "the new record counts 5 copies", func() bool { return lookup(t, b, "k").Copies == 5 })
		})
	}
}

// TestHotAnswersPurgeUnderLoad: goroutines on b replay a key from memory
// without pause while a purges it; every claim that starts after the
// purge returned reaches Redis (one wins, none replays the old answer).
func TestHotAnswersPurgeUnderLoad(t *testing.T) {
	a, b, _ := hotPair(t, false)
	for round := range 5 {
		key := fmt.Sprintf("k%d", round)
		answered(t, a, key, longTTL)
		claim(t, b, key, "fp", longTTL, Answered)
		var purged atomic.Bool
		var stale, won atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					after := purged.Load()
					r, err := b.Claim(context.Background(), key, "fp", longTTL)
					if err != nil {
						t.Error(err)
						return
					}
					switch {
					case r.Outcome == Won:
						won.Add(1)
					case after && r.Outcome == Answered:
						stale.Add(1)
					}
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		if err := a.Delete(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
		purged.Store(true)
		time.Sleep(20 * time.Millisecond)
		close(stop)
		wg.Wait()
		if stale.Load() != 0 || won.Load() != 1 {
			t.Fatalf("round %d: %d stale replays after the purge returned, %d wins (want 0, 1)", round, stale.Load(), won.Load())
		}
	}
}

// TestHotAnswersFence: a purge waits for every live instance to drop the
// key; one that never says so (its pub/sub connection is gone, say) is
// waited out for a lease, after which it cannot be replaying from memory.
func TestHotAnswersFence(t *testing.T) {
	a, b, _ := hotPair(t, false)
	answered(t, a, "k", longTTL)
	purgeQuickly(t, a, "k", "with every instance answering")
	// A ghost: registered, never answering.
	if err := hotBeatScript.Run(ctxT(t), b.c, []string{b.hotLiveKey()}, "ghost", ms(hotLease), "nowhere", "").Err(); err != nil {
		t.Fatal(err)
	}
	answered(t, a, "k", longTTL)
	start := time.Now()
	if err := a.Reopen(ctxT(t), "k", longTTL); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < hotLease {
		t.Fatalf("a reopen returned after %v with an instance that never answered: want ≥ the lease %v", d, hotLease)
	}
}

// TestHotAnswersConnectionLoss: when b's pub/sub connection drops, b
// forgets its hot answers and stops replaying from memory until a new
// lease; when Redis stops answering (SIGSTOP), b replays from memory for
// at most a lease, then its claims fail like any store call.
func TestHotAnswersConnectionLoss(t *testing.T) {
	srv := redistest.Start(t)
	ca := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	scripts := &scriptCounter{}
	cb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	cb.AddHook(scripts)
	a := NewRedis(ca, RedisOptions{Prefix: "hot", HotAnswers: 100})
	b := NewRedis(cb, RedisOptions{Prefix: "hot", HotAnswers: 100})
	defer ca.Close()
	defer cb.Close()
	defer a.Close()
	defer b.Close()
	eventually(t, "b's lease starts", b.hot.leased)

	answered(t, a, "k", longTTL)
	claim(t, b, "k", "fp", longTTL, Answered)
	n := scripts.n.Load()
	claim(t, b, "k", "fp", longTTL, Answered)
	if scripts.n.Load() != n {
		t.Fatal("the replay went to Redis")
	}
	if err := ca.Do(ctxT(t), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b forgets its hot answers", func() bool {
		b.hot.mu.Lock()
		defer b.hot.mu.Unlock()
		return len(b.hot.m) == 0
	})
	n = scripts.n.Load()
	claim(t, b, "k", "fp", longTTL, Answered)
	if scripts.n.Load() == n {
		t.Fatal("after losing its pub/sub connection, b replayed from memory")
	}
	eventually(t, "b's lease starts again", b.hot.leased)
	claim(t, b, "k", "fp", longTTL, Answered) // kept again

	srv.Pause()
	paused := time.Now()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		r, err := b.Claim(ctx, "k", "fp", longTTL)
		if err != nil {
			break
		}
		if r.Outcome != Answered {
			t.Fatalf("while paused: %v", r.Outcome)
		}
		if time.Since(paused) > hotLease+time.Second {
			t.Fatalf("b replayed from memory %v after Redis stopped answering", time.Since(paused))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHotAnswersExpiry: an entry never outlives its record.
func TestHotAnswersExpiry(t *testing.T) {
	a, b, _ := hotPair(t, false)
	answered(t, a, "k", shortTTL)
	claim(t, b, "k", "fp", shortTTL, Answered)
	eventuallyWithin(t, shortTTL+2*time.Second, "the key is free once its ttl ran out", func() bool {
		r, err := b.Claim(ctxT(t), "k", "fp", shortTTL)
		if err != nil {
			t.Fatal(err)
		}
		return r.Outcome == Won
	})
}

// TestHotAnswersCountsGuarded: copies replayed from memory for a record
// that was purged are not counted in a new record of the same key.
func TestHotAnswersCountsGuarded(t *testing.T) {
	a, b, _ := hotPair(t, false)
	answered(t, a, "k", longTTL)
	claim(t, b, "k", "fp", longTTL, Answered)
	for range 10 {
		claim(t, b, "k", "fp", longTTL, Answered)
	}
	// Held back, as a flush that comes late.
	b.hot.mu.Lock()
	held := b.hot.pending
	b.hot.pending = make(map[string]hotCount)
	b.hot.mu.Unlock()
	if held["k"].n == 0 {
		t.Fatal("nothing pending: the replays did not come from memory")
	}
	if err := a.Delete(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // another first-seen time
	answered(t, a, "k", longTTL)
	b.hot.mu.Lock()
	b.hot.pending = held
	b.hot.mu.Unlock()
	b.hot.flush(context.Background())
	if r := lookup(t, a, "k"); r.Copies != 1 {
		t.Fatalf("the new record has %d copies, want 1", r.Copies)
	}
}

// TestHotAnswersGeneration: a claim reply that left Redis before an
// invalidation reached the process is not kept.
func TestHotAnswersGeneration(t *testing.T) {
	a, b, _ := hotPair(t, false)
	answered(t, a, "k", longTTL)
	rec := lookup(t, a, "k")
	rec.LastSeen = time.Now()
	ticket, ok := b.hot.begin()
	if !ok {
		t.Fatal("no lease")
	}
	b.hot.unblock("other", "nonce") // bumps the generation, as any drop
	b.hot.keep("k", rec, ticket)
	if _, ok := b.hot.claim("k", "fp"); ok {
		t.Fatal("a reply from before an invalidation was kept")
	}
	ticket, _ = b.hot.begin()
	b.hot.keep("k", rec, ticket)
	if _, ok := b.hot.claim("k", "fp"); !ok {
		t.Fatal("a fresh reply was not kept")
	}
}

// TestHotAnswersBounded: entries are bounded in number and in bytes, and
// an answer too large for its share is never kept.
func TestHotAnswersBounded(t *testing.T) {
	_, b, _ := hotPair(t, false)
	h := b.hot
	rec := func(body int) *Record {
		now := time.Now()
		return &Record{Key: "k", State: StateAnswered, Status: 200, Body: make([]byte, body), BodyCached: true,
			LastSeen: now, ExpiresAt: now.Add(time.Minute)}
	}
	keep := func(key string, r *Record) {
		ticket, ok := h.begin()
		if !ok {
			t.Fatal("no lease")
		}
		h.keep(key, r, ticket)
	}
	for i := range 300 {
		keep(fmt.Sprint("small", i), rec(10))
	}
	h.mu.Lock()
	if len(h.m) != h.max {
		t.Errorf("%d entries kept, want the most, %d", len(h.m), h.max)
	}
	h.mu.Unlock()
	for i := range 300 {
		keep(fmt.Sprint("big", i), rec(20_000))
	}
	h.mu.Lock()
	var sum int64
	for k, e := range h.m {
		sum += entrySize(k, e.rec)
	}
	if sum != h.bytes || h.bytes > h.room || len(h.m) >= h.max {
		t.Errorf("%d entries of %d bytes (counted %d), room %d: want fewer entries, within the room", len(h.m), sum, h.bytes, h.room)
	}
	h.mu.Unlock()
	keep("huge", rec(int(h.room)))
	if _, ok := h.claim("huge", ""); ok {
		t.Error("an answer larger than an eighth of the room was kept")
	}
}

// TestHotAnswersCloseLeaves: a closed instance leaves the registry, so a
// purge does not wait for it.
func TestHotAnswersCloseLeaves(t *testing.T) {
	a, b, _ := hotPair(t, false)
	b.Close()
	answered(t, a, "k", longTTL)
	purgeQuickly(t, a, "k", "after the other instance closed")
}

// purgeQuickly deletes key on s and fails unless that took well under a
// lease: no instance was waited out.
func purgeQuickly(t *testing.T, s *Redis, key, when string) {
	t.Helper()
	start := time.Now()
	if err := s.Delete(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > hotLease/2 {
		t.Fatalf("a purge %s took %v", when, d)
	}
}

// TestHotAnswersFences: a key two purges are dropping at once stays out of
// memory until both have run; a flood of purges keeps everything out.
func TestHotAnswersFences(t *testing.T) {
	_, b, _ := hotPair(t, false)
	h := b.hot
	now := time.Now()
	rec := &Record{Key: "k", State: StateAnswered, Status: 200, LastSeen: now, ExpiresAt: now.Add(time.Minute)}
	kept := func(key string) bool {
		ticket, ok := h.begin()
		if !ok {
			t.Fatal("no lease")
		}
		h.keep(key, rec, ticket)
		_, ok = h.claim(key, "")
		return ok
	}
	h.block("k", "one")
	h.block("k", "two")
	h.block("k", "two") // its own message, after the purger blocked it
	h.unblock("k", "one")
	if kept("k") {
		t.Fatal("kept while a second purge still holds it")
	}
	h.unblock("k", "two")
	if !kept("k") {
		t.Fatal("not kept once both purges ran")
	}
	h.unblock("k", "never blocked here") // a purge from before this instance joined
	if h.nblocks != 0 || len(h.blocked) != 0 {
		t.Fatalf("%d fences left over", h.nblocks)
	}
	for i := range 4*h.max + 1 {
		h.block(fmt.Sprint("flood", i), "n")
	}
	if kept("other") {
		t.Fatal("kept during a flood of purges")
	}
	if h.nblocks != 0 || len(h.m) != 0 {
		t.Fatalf("a flood left %d fences and %d entries", h.nblocks, len(h.m))
	}
}
