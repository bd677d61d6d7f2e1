package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// TestRedisMemoryPerOrder measures MEMORY USAGE of what Redis keeps of an
// order for order_ttl (400 days) after its records expire — the order's
// state and its reconciliation index entries (the day lists, and for
// Stripe the ref keys) — per order: an Alipay order with its payment, one
// with its payment and a partial refund a day later, with real-sized ids
// (a 16-digit app_id, a 28-digit trade_no); a Stripe payment event with its
// charge. Contract: ≤ 200 bytes an Alipay order, paid and refunded (the
// Stripe event, whose ref key is a key of its own, is held to 300). It
// also checks the order and its events share a hash slot. MEMORY USAGE
// leaves out each key's entry in the expiry table (about 32 bytes a key
// with a ttl), as it does for every key.
func TestRedisMemoryPerOrder(t *testing.T) {
	s, c := redisStore(t)
	ctx := context.Background()
	const orders = 500
	day := time.Date(2026, 10, 3, 10, 0, 0, 0, time.UTC)
	settle := func(key string, run *OrderRun) {
		won, err := s.Claim(ctx, key, "", time.Minute)
		if err != nil || won.Outcome != Won {
			t.Fatalf("claim %s: %+v %v", key, won, err)
		}
		if err := s.Complete(ctx, key, won.Token, Answer{Status: 200, Body: []byte("success"), BodyCached: true, Order: run}, time.Hour, Journal{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Del(ctx, s.hashKey(key)).Err(); err != nil { // as if ttl had passed
			t.Fatal(err)
		}
	}
	usage := func(pattern string) (total int64, n int) {
		t.Helper()
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			m, err := c.MemoryUsage(ctx, iter.Val(), 0).Result()
			if err != nil {
				t.Fatalf("MEMORY USAGE %s: %v", iter.Val(), err)
			}
			total += m
			n++
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		return total, n
	}
	measure := func(name string, max int64, keyOf func(i int) []string, run func(i, ev int) *OrderRun) {
		t.Helper()
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range orders {
			for ev, key := range keyOf(i) {
				settle(key, run(i, ev))
			}
		}
		state, n := usage("idem:{*}o*")
		days, nd := usage("idem:rx:*")
		refs, nr := usage("idem:rf:*")
		if n != orders {
			t.Fatalf("%s: %d order states for %d orders", name, n, orders)
		}
		per := (state + days + refs) / orders
		enc, _ := c.ObjectEncoding(ctx, s.orderKey(mustOrder(keyOf(0)[0]))).Result()
		t.Logf("%s: %d bytes an order in Redis (MEMORY USAGE): state %d [%s], day index %d (%d lists), ref index %d (%d keys)",
			name, per, state/orders, enc, days/orders, nd, refs/orders, nr)
		if per > max {
			t.Errorf("%s costs %d bytes an order in Redis, want ≤ %d", name, per, max)
		}
		o := mustOrder(keyOf(0)[0])
		if got, want := redisSlot(s.orderKey(o)), redisSlot(s.hashKey(keyOf(0)[0])); got != want {
			t.Fatalf("order state in slot %d, its event in %d", got, want)
		}
	}
	trade := func(i int) string { return fmt.Sprintf("alipay:2021004123456789:20261003220014379710%06d", i) }
	pay := func(at time.Time) *OrderRun {
		return &OrderRun{TTL: 400 * 24 * time.Hour, Amount: "1288.00", Currency: "CNY", Settles: keying.SettlesPayment, At: at}
	}
	measure("alipay, paid", 200, func(i int) []string { return []string{trade(i) + ":paid"} },
		func(int, int) *OrderRun { return pay(day) })
	measure("alipay, paid and refunded", 200,
		func(i int) []string { return []string{trade(i) + ":paid", trade(i) + ":refund:2026100400001"} },
		func(_, ev int) *OrderRun {
			if ev == 0 {
				return pay(day)
			}
			return &OrderRun{TTL: 400 * 24 * time.Hour, Amount: "300.00", Currency: "CNY", Settles: keying.SettlesRefund, At: day.Add(24 * time.Hour)}
		})
	measure("stripe, a payment event", 300, func(i int) []string { return []string{fmt.Sprintf("stripe:evt_3Q%022d", i)} },
		func(i, _ int) *OrderRun {
			return &OrderRun{TTL: 30 * 24 * time.Hour, Amount: "12.00", Currency: "USD", Settles: keying.SettlesPayment, At: day,
				Refs: []string{fmt.Sprintf("ch_3Q%022d", i)}}
		})
}

func mustOrder(key string) string {
	o, _ := OrderOf(key)
	return o
}

// redisSlot is the Redis Cluster hash slot of key (CRC16 of its tag).
func redisSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}
