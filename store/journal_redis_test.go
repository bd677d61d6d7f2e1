package store

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestRedisClusterListPages: 5,000 answered and failed keys on a real
// 3-master Cluster, paged with small and large pages: every key listed
// once, none missing, newest first, and every page's work bounded.
func TestRedisClusterListPages(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster")
	c := redistest.StartCluster(t, 3).Client()
	s := NewRedis(c, RedisOptions{Prefix: "pages"})
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const n = 5000
	want := map[State]map[string]bool{StateAnswered: {}, StateFailed: {}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			key := fmt.Sprintf("stripe:evt_%05d", i)
			won, err := s.Claim(ctx, key, "", time.Minute)
			if err != nil || won.Outcome != Won {
				t.Errorf("claim %s: %v %v", key, won.Outcome, err)
				return
			}
			st := StateAnswered
			if i%3 == 0 {
				st = StateFailed
				err = s.Release(ctx, key, won.Token, time.Hour, Journal{Attempt: attempt(500, AttemptFailed, "")})
			} else {
				err = s.Complete(ctx, key, won.Token, answer, time.Hour, Journal{})
			}
			if err != nil {
				t.Errorf("settle %s: %v", key, err)
				return
			}
			mu.Lock()
			want[st][key] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, st := range []State{StateAnswered, StateFailed} {
		for _, limit := range []int{7, 100, 1000} {
			q := ListQuery{State: st, Limit: limit}
			seen := map[string]bool{}
			var last *Record
			pages := 0
			for {
				p, err := s.List(ctx, q)
				if err != nil {
					t.Fatalf("List %s: %v", st, err)
				}
				pages++
				for _, r := range p.Records {
					if seen[r.Key] {
						t.Fatalf("%s limit %d: %s listed twice", st, limit, r.Key)
					}
					if last != nil && listOrder(last, r) > 0 {
						t.Fatalf("%s limit %d: %s (%v) after %s (%v): not newest first", st, limit, r.Key, r.Changed, last.Key, last.Changed)
					}
					seen[r.Key] = true
					last = r
				}
				if p.Next == "" {
					break
				}
				q.Cursor = p.Next
			}
			if len(seen) != len(want[st]) {
				missing := 0
				for k := range want[st] {
					if !seen[k] {
						missing++
					}
				}
				t.Fatalf("%s limit %d: listed %d of %d (%d missing)", st, limit, len(seen), len(want[st]), missing)
			}
			t.Logf("%s: %d keys in %d pages of %d", st, len(seen), pages, limit)
		}
	}
	// A prefix on the full key.
	p, err := s.List(ctx, ListQuery{State: StateFailed, Prefix: "stripe:evt_0000", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Records {
		if !strings.HasPrefix(r.Key, "stripe:evt_0000") {
			t.Fatalf("prefix listed %s", r.Key)
		}
	}
}

// TestRedisMemoryPerKey measures MEMORY USAGE of an answered key that
// journals a 1KiB notification and a short answer: the hash, the
// notification, the attempts and its list index entry (contract: ≤ 1.5KiB),
// for a Stripe event as Stripe sends it and for one padded with
// near-identical lines.
func TestRedisMemoryPerKey(t *testing.T) {
	for name, n := range map[string]*Notification{"stripe_event": stripeEventNotification(), "stripe_like_padded": stripeLikeNotification()} {
		t.Run(name, func(t *testing.T) { testRedisMemoryPerKey(t, n) })
	}
}

func testRedisMemoryPerKey(t *testing.T, n *Notification) {
	s, c := redisStore(t)
	ctx := context.Background()

	const keys = 200
	for i := range keys {
		key := fmt.Sprintf("stripe:evt_1NG8Du2eZvKYlo2C%06d", i)
		won, err := s.Claim(ctx, key, "3f1c2d", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		a := Answer{Status: 200, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte("success"), BodyCached: true}
		if err := s.Complete(ctx, key, won.Token, a, 72*time.Hour, Journal{Notification: n, Attempt: attempt(200, AttemptAnswered, "")}); err != nil {
			t.Fatal(err)
		}
	}
	var total, hash, notif, atts int64
	for i := range keys {
		ks := s.keys(fmt.Sprintf("stripe:evt_1NG8Du2eZvKYlo2C%06d", i), false)
		for j, k := range ks[:3] { // the order state has a budget of its own (TestRedisMemoryPerOrder)
			m, err := c.MemoryUsage(ctx, k).Result()
			if err != nil {
				t.Fatalf("MEMORY USAGE %s: %v", k, err)
			}
			total += m
			switch j {
			case 0:
				hash += m
			case 1:
				notif += m
			case 2:
				atts += m
			}
		}
	}
	// The index: its buckets' memory spread over the keys.
	var ix int64
	buckets, err := c.Keys(ctx, s.prefix+":ib:*").Result()
	if err != nil || len(buckets) == 0 {
		t.Fatalf("index buckets %v: %v", buckets, err)
	}
	for _, b := range buckets {
		if m, err := c.MemoryUsage(ctx, b).Result(); err == nil {
			ix += m
		}
	}
	enc, _ := c.ObjectEncoding(ctx, s.keys("stripe:evt_1NG8Du2eZvKYlo2C000000", false)[0]).Result()
	per := (total + ix) / keys
	t.Logf("Redis memory per answered key with a %d-byte notification stored in %d bytes: %d bytes (hash %d [%s], notification %d, attempts %d, index %d)",
		len(n.Body), len(encodeNotification(n)), per, hash/keys, enc, notif/keys, atts/keys, ix/keys)
	if per > 1536 {
		t.Fatalf("%d bytes per key, contract ≤ 1536", per)
	}
}

// TestRedisIndexMixedTTLs: two routes with other ttls on one store. Each
// settle trims its index of entries older than its own ttl; a short ttl
// must not cut a long-lived record's entry out of the listing (it did when
// every ttl shared one index).
func TestRedisIndexMixedTTLs(t *testing.T) {
	c := redistest.Start(t).Client()
	s := NewRedis(c, RedisOptions{Prefix: "mixed"})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	settle := func(key string, ttl time.Duration, fail bool) {
		t.Helper()
		won := claim(t, s, key, "", time.Minute, Won)
		var err error
		if fail {
			err = s.Release(ctx, key, won.Token, ttl, Journal{Attempt: attempt(500, AttemptFailed, "")})
		} else {
			err = s.Complete(ctx, key, won.Token, answer, ttl, Journal{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	settle("long:answered", 72*time.Hour, false)
	settle("long:failed", 72*time.Hour, true)
	time.Sleep(20 * time.Millisecond)
	// The short route's settles trim entries older than 5ms: its own.
	for i := range 3 {
		settle(fmt.Sprintf("short:%d", i), 5*time.Millisecond, i == 1)
	}
	time.Sleep(20 * time.Millisecond)
	if got := listAll(t, s, ListQuery{State: StateAnswered, Limit: 10}); len(got) != 1 || got[0] != "long:answered" {
		t.Fatalf("answered: %v, want the long-lived record", got)
	}
	if got := listAll(t, s, ListQuery{State: StateFailed, Limit: 10}); len(got) != 1 || got[0] != "long:failed" {
		t.Fatalf("failed: %v, want the long-lived record", got)
	}
	classes, err := c.SMembers(ctx, s.ixClassesKey()).Result()
	if err != nil || len(classes) != 4 {
		t.Fatalf("index classes %v (%v), want answered and failed for each ttl", classes, err)
	}
}

// stripeLikeNotification is a realistic ~1 KiB JSON notification (a
// Stripe-like event), as a journal keeps it.
func stripeLikeNotification() *Notification {
	var body strings.Builder
	body.WriteString(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2022-11-15","type":"payment_intent.succeeded","data":{"object":{"id":"pi_3NG8Dt2eZvKYlo2C0yq2O8Xw","object":"payment_intent","amount":2000,"currency":"usd","status":"succeeded","metadata":{`)
	for i := 0; body.Len() < 1000; i++ {
		fmt.Fprintf(&body, `"order_line_%d":"sku-%04d",`, i, i*37)
	}
	body.WriteString(`"end":"1"}}}}`)
	return &Notification{Method: "POST", URI: "/stripe/webhook", Host: "pay.example.com", BodySize: int64(body.Len()),
		Body: []byte(body.String()), Addr: "10.0.0.5:443", TLS: true,
		Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}, "User-Agent": {"Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
			"Stripe-Signature": {"t=1686089970,v1=6b2cf8ca2ea1cb4ae2bd8ac3bf5e7c4a0d3b0b7cd3a2b1b9a8f3e1e5d4c3b2a1,v0=5f2e0b7a6c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f"},
			"Accept":           {"*/*; q=0.5, application/xml"}, "Content-Length": {fmt.Sprint(body.Len())}}}
}
