package store

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// The scale curve: claim+complete and replay with 10k, 100k and 1M live
// answered keys and as many live orders (each with its paid event), on
// Redis and the embedded store. An order's refund (claim+complete of a new
// event of a live order) and an order's duplicate (a paid event whose key
// has gone but whose order remembers it) read and write that state. The
// cost per operation should stay flat as the keys and orders grow:
//
//	go test ./store -run '^$' -bench BenchmarkScale -benchtime 20000x
//
// -scale sets the levels. Keys are filled directly (a server-side script on
// Redis, batched transactions on bbolt) in the layout the stores write, so
// the fill takes seconds rather than a million round trips. The embedded
// store's file is read through once after each fill (see there).
var scaleSeq atomic.Int64 // fresh keys across runs (-count)

var scaleLevels = flag.String("scale", "10000,100000,1000000", "live key counts for BenchmarkScale")

func BenchmarkScale(b *testing.B) {
	var levels []int
	for _, f := range strings.Split(*scaleLevels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			b.Fatalf("-scale: %v", err)
		}
		levels = append(levels, n)
	}
	a := Answer{Status: 200, Header: answer.Header, Body: []byte("success"), BodyCached: true}
	ctx := context.Background()

	orderRun := &OrderRun{TTL: time.Hour, Amount: "49.90", Currency: "CNY", Settles: keying.SettlesPayment}
	orderOf := func(i int) string { return "alipay:2088101:" + strconv.Itoa(2026120100000000+i) }
	redisPid := 0 // the Redis benchmark's server, whose CPU claim_complete reports
	var scaleRedis *redis.Client
	run := func(b *testing.B, s Store, fill, fillOrders func(from, to int)) {
		filled := 0
		for _, n := range levels {
			fill(filled, n)
			fillOrders(filled, n)
			filled = n
			b.Run(fmt.Sprintf("keys=%d/claim_complete", n), func(b *testing.B) {
				b.ReportAllocs()
				var r0 time.Duration
				if redisPid != 0 {
					r0 = procCPU(redisPid)
					scaleRedis.ConfigResetStat(ctx)
				}
				for b.Loop() {
					key := "new:" + strconv.FormatInt(scaleSeq.Add(1), 10)
					r, err := s.Claim(ctx, key, "fp", 30*time.Second)
					if err != nil || r.Outcome != Won {
						b.Fatalf("%+v %v", r, err)
					}
					if err := s.Complete(ctx, key, r.Token, a, time.Hour, Journal{}); err != nil {
						b.Fatal(err)
					}
				}
				if redisPid != 0 {
					b.ReportMetric(float64(procCPU(redisPid)-r0)/float64(time.Microsecond)/float64(b.N), "redis-cpu-µs/op")
					b.ReportMetric(float64(commandsUsec(ctx, scaleRedis, "eval"))/float64(b.N), "redis-cmd-µs/op")
					// The list index's write, as the settle script runs it.
					b.ReportMetric(float64(commandsUsec(ctx, scaleRedis, "zadd", "zremrangebylex", "append"))/float64(b.N), "index-µs/op")
				}
			})
			b.Run(fmt.Sprintf("keys=%d/list_prefix", n), func(b *testing.B) {
				// A prefix that matches a few keys (11 at 1M), listed to the
				// end as the CLI's --all does: the work should follow what
				// it finds, not what the store holds.
				ls, ok := s.(Lister)
				if !ok {
					b.Skip("no listing")
				}
				pages := 0
				for b.Loop() {
					q := ListQuery{State: StateAnswered, Prefix: "fill:99999", Limit: 100}
					for {
						p, err := ls.List(ctx, q)
						if err != nil {
							b.Fatal(err)
						}
						pages++
						if q.Cursor = p.Next; q.Cursor == "" {
							break
						}
					}
				}
				b.ReportMetric(float64(pages)/float64(b.N), "pages/op")
			})
			b.Run(fmt.Sprintf("keys=%d/replay", n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					// A random live key: the lookups a store serves miss its
					// caches as often as real traffic would.
					key := "fill:" + strconv.Itoa(rand.IntN(n))
					r, err := s.Claim(ctx, key, "fp", 30*time.Second)
					if err != nil || r.Outcome != Answered {
						b.Fatalf("%s: %+v %v", key, r, err)
					}
				}
			})
			b.Run(fmt.Sprintf("orders=%d/refund", n), func(b *testing.B) {
				b.ReportAllocs()
				refund := &OrderRun{TTL: time.Hour, Amount: "10.00", Currency: "CNY", Settles: keying.SettlesRefund}
				for b.Loop() {
					key := orderOf(rand.IntN(n)) + ":refund:r" + strconv.FormatInt(scaleSeq.Add(1), 10)
					r, err := s.Claim(ctx, key, "fp", 30*time.Second)
					if err != nil || r.Outcome != Won {
						b.Fatalf("%s: %+v %v", key, r, err)
					}
					if err := s.Complete(ctx, key, r.Token, Answer{Status: 200, Header: a.Header, Body: a.Body, BodyCached: true, Order: refund},
						time.Hour, Journal{}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("orders=%d/order_duplicate", n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					key := orderOf(rand.IntN(n)) + ":paid"
					r, err := s.Claim(ctx, key, "fp", 30*time.Second)
					if err != nil || r.Outcome != Answered || !r.Record.FromOrder {
						b.Fatalf("%s: %+v %v", key, r, err)
					}
				}
			})
		}
	}

	b.Run("redis", func(b *testing.B) {
		c := redis.NewClient(&redis.Options{Addr: redistest.Start(b).Addr()})
		defer c.Close()
		s := NewRedis(c, RedisOptions{Prefix: "scale"})
		defer s.Close()
		pid, err := redisPID(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		redisPid, scaleRedis = pid, c
		// The list index as settles write it (redis_list.go): key i
		// settled i ms before the fill (1M keys over 17 minutes), its
		// entry appended to its class's time bucket.
		cl, _ := s.ixClassOf(StateAnswered, time.Hour)
		fill := redis.NewScript(`
local now = redis.call('TIME')
local t0 = now[1] * 1000 + math.floor(now[2] / 1000)
local function be(v, n)
  local b = {}
  for j = n, 1, -1 do
    b[j] = string.char(v % 256)
    v = math.floor(v / 256)
  end
  return table.concat(b)
end
redis.call('SADD', ARGV[1] .. ':ix:classes', 'answered/3600000')
for i = tonumber(ARGV[2]), tonumber(ARGV[3]) - 1 do
  local ms = t0 - i
  local k = 'fill:' .. i
  local h = ARGV[1] .. ':{' .. k .. '}'
  local ix = ARGV[4] .. math.floor(ms / tonumber(ARGV[5])) .. '}'
  local e = be(8 + #k, 2) .. be(ms, 8) .. k
  if redis.call('APPEND', ix, e) == #e then
    redis.call('PEXPIRE', ix, ARGV[6])
  end
  local t = string.format('%d', ms)
  -- The record's value (record.lua): recordFields, token, notification, attempts.
  redis.call('SET', h, cmsgpack.pack(k, 'answered', '200', false, 'success', '1', 'fp', '1', false,
    t, t, string.format('%d', ms + 3600000), t, '1', false, false, false, false, false,
    false, false, false), 'PX', 3600000)
end
return 1`)
		run(b, s, func(from, to int) {
			for i := from; i < to; i += 10000 {
				if err := fill.Run(ctx, c, []string{}, "scale", i, min(i+10000, to), cl.bucket, cl.width, cl.bttl).Err(); err != nil {
					b.Fatal(err)
				}
			}
			// The finished buckets sorted, as the gateways whose settles
			// moved past them do (compactBuckets).
			now := time.Now().UnixMilli()
			for n := cl.bucketOf(now - int64(to) - 1000); n <= cl.bucketOf(now)-2; n++ {
				if err := s.compactBucket(ctx, cl.bucketKey(n)); err != nil && !errors.Is(err, redis.Nil) {
					b.Fatal(err)
				}
			}
		}, func(from, to int) {
			// Order states in the store's layout, as completions write
			// them (the order key is a digest: computed here).
			v := encodeOrderEvent(time.Now(), orderRun)
			for i := from; i < to; i += 10000 {
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					for j := i; j < min(i+10000, to); j++ {
						k := s.orderKey(orderOf(j))
						p.HSet(ctx, k, keying.EventPaid, v)
						p.PExpire(ctx, k, time.Hour)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	})

	b.Run("embedded", func(b *testing.B) {
		s, err := NewEmbedded(filepath.Join(b.TempDir(), "scale.db"), EmbeddedOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s, func(from, to int) {
			t := time.Now()
			for i := from; i < to; i += 10000 {
				err := s.db.Update(func(tx *bolt.Tx) error {
					for j := i; j < min(i+10000, to); j++ {
						k := "fill:" + strconv.Itoa(j)
						e := &entry{Record: Record{Key: k, State: StateAnswered, Status: 200, Body: []byte("success"),
							BodyCached: true, Fingerprint: "fp", Copies: 1, FirstSeen: t, LastSeen: t,
							ExpiresAt: t.Add(time.Hour), Changed: t}, keep: t.Add(time.Hour)}
						if err := put(tx, e); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		}, func(from, to int) {
			t := time.Now()
			for i := from; i < to; i += 10000 {
				err := s.db.Update(func(tx *bolt.Tx) error {
					for j := i; j < min(i+10000, to); j++ {
						err := updateOrder(tx, orderOf(j)+":paid", t, func(o *orderState, event string) { o.ran(event, t, orderRun) })
						if err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			// Read every record and order once, as a gateway that has served for a
			// while has: the first touch of each page of bbolt's memory map
			// is a page fault, and 20,000 random replays over a fresh 1M-key
			// file would mostly measure those (13 µs a replay, against 4 µs
			// once mapped).
			err := s.db.View(func(tx *bolt.Tx) error {
				if err := tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error { return nil }); err != nil {
					return err
				}
				return tx.Bucket(bucketOrders).ForEach(func(k, v []byte) error { return nil })
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	})
}

// commandsUsec is the time Redis spent in the commands named (by prefix:
// "eval" for the scripts with the commands they ran; INFO commandstats
// counts a script's commands under their own names too) since the last
// CONFIG RESETSTAT, in µs: finer than the CPU ticks of /proc, and without
// the network's work.
func commandsUsec(ctx context.Context, c *redis.Client, names ...string) int64 {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0
	}
	var total int64
	for _, l := range strings.Split(info, "\n") {
		name, _, _ := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
		if !strings.HasPrefix(l, "cmdstat_") || !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(name, n) }) {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(l[strings.IndexByte(l, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}
