package store

import (
	"context"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The embedded store's delivery queue: deliveries in their own buckets of
// the store's file, written with the store's group commit (so an Enqueue
// returns after the fsync it shares with concurrent writes) and loaded
// when the queue is first used.
var (
	bucketQueue       = []byte("queue")        // scope \x00 key → encodeDelivery
	bucketQueuePaused = []byte("queue_paused") // scope → "1"
)

// embeddedQueue opens the queue once per store.
type embeddedQueue struct {
	once sync.Once
	q    *localQueue
	err  error
}

// Queue returns the store's delivery queue. The first call loads the
// deliveries the file holds; a load that fails makes every call fail.
func (s *Embedded) Queue() Queue {
	s.queue.once.Do(func() {
		q := newLocalQueue(s.now, embeddedDisk{s})
		s.queue.err = s.db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket(bucketQueue); b != nil {
				err := b.ForEach(func(k, v []byte) error {
					scope, _, ok := splitQueueKey(k)
					if !ok {
						return errCorrupt
					}
					d, due, err := decodeDelivery(v)
					if err != nil {
						return err
					}
					q.load(scope, d, due)
					return nil
				})
				if err != nil {
					return err
				}
			}
			if b := tx.Bucket(bucketQueuePaused); b != nil {
				return b.ForEach(func(k, _ []byte) error {
					q.scope(string(k)).paused = true
					return nil
				})
			}
			return nil
		})
		s.queue.q = q
	})
	if s.queue.err != nil {
		return brokenQueue{s.queue.err}
	}
	return s.queue.q
}

func queueKey(scope, key string) []byte {
	b := make([]byte, 0, len(scope)+1+len(key))
	b = append(b, scope...)
	b = append(b, 0)
	return append(b, key...)
}

func splitQueueKey(k []byte) (scope, key string, ok bool) {
	for i, c := range k {
		if c == 0 {
			return string(k[:i]), string(k[i+1:]), true
		}
	}
	return "", "", false
}

type embeddedDisk struct{ s *Embedded }

func (e embeddedDisk) syncDelivery(ctx context.Context, scope, key string, state func() []byte) error {
	return e.s.update(ctx, func(tx *bolt.Tx, _ time.Time) error {
		// Read inside the transaction: writes are committed in the
		// order they run, so the last one holds the newest state.
		v := state()
		if v == nil {
			if b := tx.Bucket(bucketQueue); b != nil {
				return b.Delete(queueKey(scope, key))
			}
			return nil
		}
		b, err := tx.CreateBucketIfNotExists(bucketQueue)
		if err != nil {
			return err
		}
		return b.Put(queueKey(scope, key), v)
	})
}

func (e embeddedDisk) setPaused(ctx context.Context, scope string, paused bool) error {
	return e.s.update(ctx, func(tx *bolt.Tx, _ time.Time) error {
		b, err := tx.CreateBucketIfNotExists(bucketQueuePaused)
		if err != nil {
			return err
		}
		if paused {
			return b.Put([]byte(scope), []byte("1"))
		}
		return b.Delete([]byte(scope))
	})
}

// brokenQueue answers every call with the error that kept the queue from
// loading.
type brokenQueue struct{ err error }

func (b brokenQueue) Enqueue(context.Context, string, Delivery) error { return b.err }
func (b brokenQueue) Queued(context.Context, string, string) (bool, error) {
	return false, b.err
}
func (b brokenQueue) Take(context.Context, string, QueueLimits) (*Delivery, time.Duration, error) {
	return nil, 0, b.err
}
func (b brokenQueue) Start(context.Context, string, string, string) error { return b.err }
func (b brokenQueue) Extend(context.Context, string, string, string, time.Duration) error {
	return b.err
}
func (b brokenQueue) Retry(context.Context, string, string, string, time.Time, int) error {
	return b.err
}
func (b brokenQueue) Done(context.Context, string, string, string) error { return b.err }
func (b brokenQueue) Remove(context.Context, string, string) error       { return b.err }
func (b brokenQueue) Pause(context.Context, string) error                { return b.err }
func (b brokenQueue) Resume(context.Context, string) error               { return b.err }
func (b brokenQueue) Stats(context.Context, string) (QueueStats, error) {
	return QueueStats{}, b.err
}

var (
	_ Queuer = (*Embedded)(nil)
	_ Queuer = (*Memory)(nil)
)
