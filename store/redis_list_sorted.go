package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// The list index's finished buckets, sorted (list.go has their format):
// the background sort that writes them (compactBuckets), and the reads of
// a listing that use them (readBuckets).

// A finished bucket (two widths old or more, which settles no longer
// write) is written again by the process whose settle moved past it, in
// the background: sorted by key (sortIxBucket), so a listing by a key
// prefix reads only what is near it (readBuckets), and in a string of its
// own length (APPEND grows a string to twice its length, Redis's greedy
// allocation: a finished bucket held up to twice its entries' bytes, 93
// bytes a 34-byte key's entry against 49 once written again). The sort
// is the gateway's work, not Redis's: a bucket is read, sorted and written
// back by sortedSwap only if its length is still what was read (an entry
// appended meanwhile: the bucket stays as it is, its entries listed all
// the same). A sorted bucket a late settle appended to is sorted again
// with its tail when a process moves past it again; of one already
// sorted without a tail, only the head is read (compactBucket).
var sortedSwap = redis.NewScript(`if redis.call('STRLEN', KEYS[1]) ~= tonumber(ARGV[1]) then
  return 0
end
local t = redis.call('PTTL', KEYS[1])
if t > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', t)
  return 1
end
return 0`)

// compactTimeout bounds the background sort of the buckets a settle moved
// past (a bucket of a fast fill may hold some hundred thousand entries).
const compactTimeout = 30 * time.Second

// compactBuckets sorts the buckets ks (compactBucket) in the background;
// Close stops it and waits for it a while (bgWait). Errors are ignored, as
// the index's: an unsorted bucket is read whole.
func (s *Redis) compactBuckets(ks []string) {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.closed.Load() {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(s.bgCtx, compactTimeout)
		defer cancel()
		for _, k := range ks {
			_ = s.compactBucket(ctx, k)
		}
	}()
}

// ixSortMax: a bucket larger than this (over a million entries, settled
// within one width) is not sorted, so the sort's memory stays bounded; it
// is read whole.
const ixSortMax = 64 << 20

// compactBucket writes bucket k again sorted, unless it is already: its
// length and head are read first (one round trip), so a bucket another
// gateway sorted, or one too large to sort, is not read whole.
func (s *Redis) compactBucket(ctx context.Context, k string) error {
	var size *redis.IntCmd
	var head *redis.StringCmd
	if _, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		size, head = p.StrLen(ctx, k), p.GetRange(ctx, k, 0, int64(ixSortedHead)-1)
		return nil
	}); err != nil {
		return err
	}
	n := size.Val()
	if end, _, sorted := sortedHead(head.Val()); n == 0 || n > s.sortMax || sorted && int64(end) == n {
		return nil
	}
	v, err := s.c.Get(ctx, k).Result()
	if err != nil {
		return err
	}
	sorted, ok := sortIxBucket(v)
	if !ok {
		return nil
	}
	return sortedSwap.Run(ctx, s.c, []string{k}, len(v), sorted).Err()
}

// bgWait bounds how long Close waits for background work (compactBuckets).
const bgWait = time.Second

// readBuckets reads buckets, one string of entries each: the whole
// bucket, or with a key prefix kp (not "") of a sorted one its entries
// near kp and its tail (ixFindRange): a pipeline of heads, then one of
// what they point to (the tails, and what a head could not tell).
func (s *Redis) readBuckets(ctx context.Context, buckets []string, kp string) ([]string, error) {
	vals := make([]string, len(buckets))
	if len(buckets) == 0 {
		return vals, nil
	}
	if kp == "" {
		return vals, s.getBuckets(ctx, vals, func(i int) (string, int64, int64) { return buckets[i], 0, -1 })
	}
	heads := make([]string, len(buckets))
	err := s.getBuckets(ctx, heads, func(i int) (string, int64, int64) { return buckets[i], 0, int64(ixFindHead) - 1 })
	if err != nil {
		return nil, err
	}
	// Of a sorted bucket: what its head points to, then its head again.
	// Should the bucket have been written again meanwhile (sorted with its
	// tail, or gone and begun anew), its head differs and the bucket is
	// read whole: what was read at the old offsets is not used.
	type read struct {
		i        int
		from, to int64 // to -1: to the end
		check    bool  // the head again
	}
	var more []read
	for i, h := range heads {
		from, to, end, ok := ixFindRange(h, kp)
		switch {
		case h == "":
		case !ok && len(h) < ixFindHead:
			vals[i] = h // the whole bucket
		case !ok:
			more = append(more, read{i: i, from: 0, to: -1})
		case len(h) < ixFindHead && end <= len(h): // the whole bucket
			vals[i] = h[from:to] + h[end:]
		default:
			if from < to {
				more = append(more, read{i: i, from: int64(from), to: int64(to - 1)})
			}
			more = append(more, read{i: i, from: int64(end), to: -1},
				read{i: i, from: 0, to: int64(ixSortedHead) - 1, check: true})
		}
	}
	got := make([]string, len(more))
	err = s.getBuckets(ctx, got, func(j int) (string, int64, int64) {
		return buckets[more[j].i], more[j].from, more[j].to
	})
	if err != nil {
		return nil, err
	}
	var again []int
	for j, r := range more {
		switch {
		case !r.check:
			vals[r.i] += got[j]
		case got[j] != heads[r.i][:ixSortedHead]:
			vals[r.i] = ""
			again = append(again, r.i)
		}
	}
	if len(again) == 0 {
		return vals, nil
	}
	whole := make([]string, len(again))
	err = s.getBuckets(ctx, whole, func(j int) (string, int64, int64) { return buckets[again[j]], 0, -1 })
	for j, i := range again {
		vals[i] = whole[j]
	}
	return vals, err
}

// getBuckets reads into out[i] the bytes from..to (to -1: to the end) of
// the bucket at(i) names, for each i of out, in one pipeline; a bucket
// that is gone reads "".
func (s *Redis) getBuckets(ctx context.Context, out []string, at func(i int) (key string, from, to int64)) error {
	cmds := make([]*redis.StringCmd, len(out))
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range out {
			k, from, to := at(i)
			if from == 0 && to == -1 {
				cmds[i] = p.Get(ctx, k)
			} else {
				cmds[i] = p.GetRange(ctx, k, from, to)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return nil
}
