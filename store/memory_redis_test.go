package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRedisMemoryPerKey measures what an answered key costs a real Redis
// as the gateway writes it: N keys claimed and completed through the
// store (each with its notification journaled, one attempt and a short
// answer whose headers, as a backend sends them, are longer than 64
// bytes: Redis's hash-max-listpack-value), then INFO memory's used_memory
// grown, divided by N. It counts what MEMORY USAGE leaves out (the
// keyspace's and the expiry table's entries) and the list index as it is
// at N keys. Contract: ≤ 1.5 KiB for a ~1 KiB JSON notification. The
// tiny case, a header-keyed request with a few bytes of body, is
// reported only.
func TestRedisMemoryPerKey(t *testing.T) {
	n := 50000
	if testing.Short() {
		n = 10000
	}
	if v, err := strconv.Atoi(os.Getenv("IDEMGATE_MEMORY_KEYS")); err == nil && v > 0 {
		n = v
	}
	answer := Answer{Status: 200, Header: http.Header{
		"Content-Type": {"application/json; charset=utf-8"},
		"Date":         {"Fri, 04 Dec 2026 23:12:45 GMT"},
	}, Body: []byte(`{"received":true}`), BodyCached: true}
	if h := appendHeader(nil, answer.Header); len(h) <= 64 {
		t.Fatalf("the answer's headers encode in %d bytes: not past Redis's hash-max-listpack-value", len(h))
	}
	tiny := &Notification{Method: "POST", URI: "/pay/notify", Host: "pay.example.com", BodySize: 12,
		Body: []byte(`{"id":"n-1"}`), Addr: "10.0.0.5:443", TLS: true, Route: "notify",
		Header: http.Header{"Idempotency-Key": {"k"}, "Content-Type": {"application/json"}}}
	for _, c := range []struct {
		name   string
		n      *Notification
		budget int64
	}{
		{"stripe_like_1KiB", stripeLikeNotification(), 1536},
		{"tiny_header_keyed", tiny, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			per, one := redisMemoryPerKey(t, n, c.n, answer)
			t.Logf("%d keys, %d-byte notification (stored in %d): %d bytes of Redis memory per answered key; a record: %s",
				n, len(c.n.Body), len(encodeNotification(c.n)), per, one)
			if c.budget > 0 && per > c.budget {
				t.Errorf("%d bytes per key, contract ≤ %d", per, c.budget)
			}
		})
	}
}

// redisMemoryPerKey fills a fresh Redis with n answered keys through the
// store and returns used_memory's growth per key and what one record is
// (its OBJECT ENCODING, its value's length, its MEMORY USAGE).
func redisMemoryPerKey(t *testing.T, n int, notif *Notification, a Answer) (int64, string) {
	c := redistest.Start(t).Client()
	s := NewRedis(c, RedisOptions{})
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	used := func() int64 {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				m, _ := strconv.ParseInt(v, 10, 64)
				return m
			}
		}
		t.Fatal("INFO memory has no used_memory")
		return 0
	}
	key := func(i int) string { return fmt.Sprintf("stripe:evt_1NG8Du2eZvKYlo2C%08d", i) }
	// One key first, so what the first write allocates once (the index's
	// sets, the scripts' cache) is not counted per key.
	fill := func(from, to int) {
		var wg sync.WaitGroup
		var once sync.Once
		var ferr error
		const workers = 16
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + w; i < to; i += workers {
					won, err := s.Claim(ctx, key(i), "3f1c2d9a", time.Minute)
					if err == nil && won.Outcome != Won {
						err = fmt.Errorf("claim: %v", won.Outcome)
					}
					if err == nil {
						err = s.Complete(ctx, key(i), won.Token, a, 72*time.Hour,
							Journal{Notification: notif, Attempt: attempt(200, AttemptAnswered, `{"received":true}`)})
					}
					if err != nil {
						once.Do(func() { ferr = err })
						return
					}
				}
			}()
		}
		wg.Wait()
		if ferr != nil {
			t.Fatal(ferr)
		}
	}
	fill(0, 1)
	before := used()
	fill(1, n+1)
	per := (used() - before) / int64(n)
	h := s.hashKey(key(1))
	enc, err := c.ObjectEncoding(ctx, h).Result()
	if err != nil {
		t.Fatal(err)
	}
	typ, _ := c.Type(ctx, h).Result()
	size, _ := c.StrLen(ctx, h).Result()
	usage, _ := c.MemoryUsage(ctx, h).Result()
	// What was measured reads back as written.
	r, err := s.Lookup(ctx, key(n/2))
	if err != nil || r.State != StateAnswered || string(r.Body) != string(a.Body) ||
		r.Notification == nil || len(r.Attempts) != 1 {
		t.Fatalf("a measured key reads %+v, %v", r, err)
	}
	return per, fmt.Sprintf("%s (%s) of %d bytes, MEMORY USAGE %d", typ, enc, size, usage)
}

// TestRedisOldLayoutRecord: a record as the store wrote it before a
// record was one value (a hash, its notification and attempts in two
// keys beside it) is refused with an error naming it by Claim, Lookup,
// List and the settling scripts, never misread (a claim must not take it
// for a free key and forward a copy again), and Delete purges it.
func TestRedisOldLayoutRecord(t *testing.T) {
	s, c := redisStore(t)
	ctx := context.Background()
	const key = "stripe:evt_old_layout"
	won := claim(t, s, key, "fp", time.Minute, Won)
	if err := s.Complete(ctx, key, won.Token, answer, time.Hour, Journal{}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Lookup(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The same answered record in the earlier layout, as its claim and
	// completion wrote it (its list index entry stays: the same changed).
	h := s.hashKey(key)
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	changed := strconv.FormatInt(r.Changed.UnixMilli(), 10)
	expires := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, h)
		p.HSet(ctx, h, "key", key, "state", "answered", "token", "", "fp", "fp", "copies", "1",
			"first", now, "last", now, "expires", expires, "changed", changed, "nf", "1",
			"status", "200", "headers", string(appendHeader(nil, answer.Header)), "body", "old answer",
			"body_cached", "1", "na", "1", "nn", "1")
		p.PExpire(ctx, h, time.Hour)
		p.Set(ctx, h+":n", encodeNotification(testNotification), time.Hour)
		a := encodeAttempt(attempt(200, AttemptAnswered, "old answer"))
		p.Set(ctx, h+":a", string([]byte{byte(len(a) >> 8), byte(len(a))})+string(a), time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errOldLayout) || !strings.Contains(err.Error(), "earlier idemgate layout") {
			t.Fatalf("%s of a record of the earlier layout: %v, want errOldLayout", what, err)
		}
	}
	got, err := s.Claim(ctx, key, "fp", time.Minute)
	refused(fmt.Sprintf("Claim (%+v)", got), err)
	got, err = s.Claim(ctx, key, "other-fp", time.Minute)
	refused(fmt.Sprintf("Claim of another fingerprint (%+v)", got), err)
	_, err = s.Lookup(ctx, key)
	refused("Lookup", err)
	_, err = s.List(ctx, ListQuery{State: StateAnswered, Limit: 10})
	refused("List", err)
	refused("Reopen", s.Reopen(ctx, key, time.Hour))
	refused("Complete", s.Complete(ctx, key, "tok", answer, time.Hour, Journal{}))
	refused("Release", s.Release(ctx, key, "tok", time.Hour, Journal{}))
	refused("Renew", s.Renew(ctx, key, "tok", time.Minute))
	refused("Leave", s.Leave(ctx, key, "tok", time.Hour, Journal{}))
	if typ, _ := c.Type(ctx, h).Result(); typ != "hash" {
		t.Fatalf("the refused record became a %s", typ)
	}
	// Delete purges it whatever its layout, and the key is free.
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, h, h+":n", h+":a").Result(); n != 0 {
		t.Fatalf("%d of the record's keys left after Delete", n)
	}
	claim(t, s, key, "fp", time.Minute, Won)
}

// TestRedisLookupMissingWaits: with WaitReplicas, a Lookup that finds no
// record reports a write it could not see replicated as such, as one
// that finds a record does (GET answers nil where HMGET answered a list
// of nils: the replication check must not be lost behind "not found").
func TestRedisLookupMissingWaits(t *testing.T) {
	c := redistest.Start(t).Client()
	s := NewRedis(c, RedisOptions{WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
	t.Cleanup(func() { s.Close() })
	if _, err := s.Lookup(context.Background(), "nobody"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Lookup of a missing key on a server without replicas: %v, want ErrNotReplicated", err)
	}
}
