package cache

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestRedisMemoryPerOrder measures MEMORY USAGE of orders' state, the part
// of a payment Redis keeps for order_ttl (400 days) after its records
// expire: an Alipay order with its payment, and one with its payment and
// a partial refund (contract: ≤ 200 bytes an order). It also checks the
// order and its events share a hash slot.
func TestRedisMemoryPerOrder(t *testing.T) {
	rs := redistest.Start(t)
	c := rs.Client()
	s := NewRedis(c, RedisOptions{})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	const orders = 200
	run := &OrderRun{TTL: 400 * 24 * time.Hour, Amount: "1288.00", Currency: "CNY"}
	settle := func(key string) {
		won, err := s.Claim(ctx, key, "", time.Minute)
		if err != nil || won.Outcome != Won {
			t.Fatalf("claim %s: %+v %v", key, won, err)
		}
		if err := s.Complete(ctx, key, won.Token, Answer{Status: 200, Body: []byte("success"), BodyCached: true, Order: run}, time.Hour, Journal{}); err != nil {
			t.Fatal(err)
		}
	}
	measure := func(name string, events []string) {
		var total int64
		for i := range orders {
			order := fmt.Sprintf("alipay:2021004123456789:2026031422001437971%s%06d", name, i)
			for _, ev := range events {
				settle(order + ":" + ev)
			}
			m, err := c.MemoryUsage(ctx, s.orderKey(order)).Result()
			if err != nil {
				t.Fatalf("MEMORY USAGE %s: %v", s.orderKey(order), err)
			}
			total += m
			if got, want := redisSlot(s.orderKey(order)), redisSlot(s.hashKey(order+":"+events[0])); got != want {
				t.Fatalf("order state in slot %d, its event in %d", got, want)
			}
		}
		per := total / orders
		enc, _ := c.ObjectEncoding(ctx, s.orderKey(fmt.Sprintf("alipay:2021004123456789:2026031422001437971%s%06d", name, 0))).Result()
		t.Logf("Redis memory per order (%v): %d bytes [%s]", events, per, enc)
		if per > 200 {
			t.Errorf("an order with %v costs %d bytes in Redis, want ≤ 200", events, per)
		}
	}
	measure("p", []string{"paid"})
	measure("r", []string{"paid", "refund:2026031500001"})
}

// redisSlot is the Redis Cluster hash slot of key (CRC16 of its tag).
func redisSlot(key string) int {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// crc16 is CRC-16/XMODEM, Redis Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
