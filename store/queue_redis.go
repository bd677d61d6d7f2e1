package store

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis store's delivery queue: per scope, sorted sets and hashes under
// one hash tag (one slot, so one script sees them all on a Cluster too),
// changed only by queue.lua. A sorted set of due times rather than a
// Stream with a consumer group: deliveries are retried with back-off at a
// time of their own, leases are renewed while a slow backend works, and
// the limits (leases at once, starts per window) are counted where the
// deliveries are handed out — a consumer group has none of these, and
// would need its pending list re-read and re-queued to get them.

//go:embed queue.lua
var queueLua string

var queueScript = redis.NewScript(clockLua + queueLua)

type redisQueue struct{ s *Redis }

// Queue returns the store's delivery queue.
func (s *Redis) Queue() Queue { return redisQueue{s} }

// qkeys are scope's queue keys in queue.lua's order.
func (q redisQueue) qkeys(scope string) []string {
	b := q.s.prefix + ":q:{" + scope + "}:"
	return []string{b + "due", b + "items", b + "meta", b + "leases", b + "owners", b + "starts", b + "paused", b + "enq", b + "next"}
}

func (q redisQueue) call(ctx context.Context, scope string, args ...any) *redis.Cmd {
	if q.s.closed.Load() {
		c := redis.NewCmd(ctx)
		c.SetErr(ErrClosed)
		return c
	}
	if scope == "" {
		c := redis.NewCmd(ctx)
		c.SetErr(errBadScope)
		return c
	}
	return q.s.run(ctx, queueScript, q.qkeys(scope), args...)
}

func (q redisQueue) Enqueue(ctx context.Context, scope string, d Delivery) error {
	blob := encodeDelivery(&d, time.Time{})
	err := q.call(ctx, scope, "enqueue", d.Key, blob, d.Token, d.Enqueued.UnixMilli()).Err()
	return q.s.wrap("enqueue", err)
}

func (q redisQueue) Queued(ctx context.Context, scope, key string) (bool, error) {
	if q.s.closed.Load() {
		return false, ErrClosed
	}
	ok, err := q.s.c.HExists(ctx, q.qkeys(scope)[1], key).Result()
	return ok, q.s.wrap("queued", err)
}

func (q redisQueue) Take(ctx context.Context, scope string, lim QueueLimits) (*Delivery, time.Duration, error) {
	lease := newToken()
	v, err := q.call(ctx, scope, "take", ms(lim.Lease), lim.Concurrency, lim.Rate, ms(RateWindow), lease, ms(idleWait)).Slice()
	if err != nil {
		return nil, 0, q.s.wrap("take", err)
	}
	if len(v) == 1 {
		return nil, time.Duration(num(v[0])) * time.Millisecond, nil
	}
	if len(v) != 4 {
		return nil, 0, fmt.Errorf("store: redis take: %d values", len(v))
	}
	d, _, err := decodeDelivery([]byte(str(v[2])))
	if err != nil {
		return nil, 0, q.s.wrap("take", err)
	}
	meta := strings.Fields(str(v[3])) // token, attempts, started
	if len(meta) < 2 {
		return nil, 0, q.s.wrap("take", errCorrupt)
	}
	d.Token = meta[0]
	d.Attempts, _ = strconv.Atoi(meta[1])
	d.Started = len(meta) > 2 && meta[2] == "1"
	d.Lease = lease
	return d, 0, nil
}

func (q redisQueue) Start(ctx context.Context, scope, key, lease string) error {
	return q.s.casErr("start", q.call(ctx, scope, "start", key, lease).Err())
}

func (q redisQueue) Extend(ctx context.Context, scope, key, lease string, d time.Duration) error {
	return q.s.casErr("extend", q.call(ctx, scope, "extend", key, lease, ms(d)).Err())
}

func (q redisQueue) Retry(ctx context.Context, scope, key, lease string, due time.Time, attempts int) error {
	return q.s.casErr("retry", q.call(ctx, scope, "retry", key, lease, due.UnixMilli(), attempts).Err())
}

func (q redisQueue) Done(ctx context.Context, scope, key, lease string) error {
	return q.s.casErr("done", q.call(ctx, scope, "done", key, lease).Err())
}

func (q redisQueue) Remove(ctx context.Context, scope, key string) error {
	n, err := q.call(ctx, scope, "remove", key).Int64()
	switch {
	case err != nil:
		return q.s.wrap("remove", err)
	case n == 0:
		return ErrNotFound
	case n < 0:
		return ErrNotOwner
	}
	return nil
}

func (q redisQueue) Pause(ctx context.Context, scope string) error {
	return q.s.wrap("pause", q.call(ctx, scope, "pause").Err())
}

func (q redisQueue) Resume(ctx context.Context, scope string) error {
	return q.s.wrap("resume", q.call(ctx, scope, "resume").Err())
}

func (q redisQueue) Stats(ctx context.Context, scope string) (QueueStats, error) {
	if q.s.closed.Load() {
		return QueueStats{}, ErrClosed
	}
	k := q.qkeys(scope)
	// One node holds them all (one hash tag): one pipeline, one round trip.
	pipe := q.s.c.Pipeline()
	depth := pipe.ZCard(ctx, k[7])
	leased := pipe.ZCard(ctx, k[3])
	paused := pipe.Exists(ctx, k[6])
	oldest := pipe.ZRangeWithScores(ctx, k[7], 0, 0)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return QueueStats{}, q.s.wrap("stats", err)
	}
	st := QueueStats{Depth: depth.Val(), Leased: leased.Val(), Paused: paused.Val() == 1}
	if o := oldest.Val(); len(o) == 1 {
		st.Oldest = time.UnixMilli(int64(o[0].Score))
	}
	return st, nil
}

var (
	_ Queue  = redisQueue{}
	_ Queuer = (*Redis)(nil)
)
