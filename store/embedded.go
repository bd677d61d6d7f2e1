package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Embedded is a Store on a bbolt file: records survive restarts, but only
// one process may open the file (bbolt locks it).
//
// Buckets: "records" (key → encoded entry), "orders" (see Order: order →
// its events that ran, swept through the same expiry index),
// "order_days" and "order_refs" (OrderIndex, embedded_order.go), and two
// indexes kept in the same
// transactions as the records: "in_flight" (key → empty), so InFlight never
// scans answers, and "expiry" (big-endian expiry ms + key → empty), so the
// sweeper pops exactly the expired records, oldest first, whatever the
// arrival rate. Expired records are ignored on read and removed by the
// sweeper; bbolt reuses the freed pages, so under a steady load the file
// stops growing. "meta" holds the progress of indexing a file written
// before the expiry index existed.
//
// Writes are group-committed: those that arrive while a transaction
// commits share the next one, and its fsync.
type Embedded struct {
	db   *bolt.DB
	now  func() time.Time
	n    *notifier
	opts EmbeddedOptions

	stop chan struct{}
	done chan struct{}
	once sync.Once

	// ops hands writes to the committer goroutine (unbuffered: a write
	// sent is a write the committer runs); closed stops it, committed
	// says it stopped.
	ops       chan *op
	closed    chan struct{}
	committed chan struct{}
	commits   atomic.Int64 // group transactions run, for tests

	// mu serialises the store's transactions with pend, the copies that
	// replays counted but did not write yet: a replay is a read
	// transaction, not an fsync, and the counts are written once per
	// FlushInterval. Copies on disk plus pend is the true count; pend only
	// ever holds answered keys.
	mu   sync.Mutex
	pend map[string]*pending
	// indexing: the expiry index of an older file is still being built
	// (meta's indexNext says where); Sweep finishes it first.
	indexing bool

	queue embeddedQueue
}

type pending struct {
	copies int64
	last   time.Time
}

// EmbeddedOptions tune the embedded store; the zero value is usable.
type EmbeddedOptions struct {
	// SweepInterval is how often expired records are removed. Default 1s.
	SweepInterval time.Duration
	// SweepBatch bounds the records removed per write transaction, so a
	// sweep never holds the write lock for long: claims wait behind it. A
	// sweep runs batches until one is not full. Default 1000.
	SweepBatch int
	// NoSync skips the fsync per commit: faster, but a power cut may lose
	// recent claims and answers (a crash of the process alone does not).
	NoSync bool
	// FlushInterval is how often the copies counted by replays are
	// written; a crash loses at most that much counting. Default 1s.
	FlushInterval time.Duration
	// OpenTimeout bounds the wait for another process's file lock. Default 1s.
	OpenTimeout time.Duration
	// Now is the store's clock, which expiry is judged by. Default
	// time.Now; tests set their own.
	Now func() time.Time
}

var (
	bucketRecords  = []byte("records")
	bucketInFlight = []byte("in_flight")
	bucketExpiry   = []byte("expiry")
	bucketMeta     = []byte("meta")
	bucketOrders   = []byte("orders")
	// indexNext, in meta, is the next record key to add to the expiry
	// index while a file from before the index is being indexed.
	indexNext = []byte("expiry_index_next")
	// The list indexes, one per stored state: ixBolt(Changed, key) → empty.
	bucketIxInFlight = []byte("ix_in_flight")
	bucketIxAnswered = []byte("ix_answered")
	bucketIxFailed   = []byte("ix_failed")
)

func ixBucket(st State) []byte {
	switch st {
	case StateAnswered:
		return bucketIxAnswered
	case StateFailed:
		return bucketIxFailed
	}
	return bucketIxInFlight
}

// NewEmbedded opens (or creates) the bbolt file at path.
func NewEmbedded(path string, opts EmbeddedOptions) (*Embedded, error) {
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = time.Second
	}
	if opts.SweepBatch <= 0 {
		opts.SweepBatch = 1000
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = time.Second
	}
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// The freelist as etcd keeps it: a map, not written on every commit
	// but rebuilt from the pages when the file opens. Written, it cost each
	// commit a write proportional to the file's free pages: with 1M live
	// orders a refund took 3.2 ms and 487 KB of allocations, 1.7 ms with
	// 10k (BenchmarkScale); unwritten, 2.4 ms and 190 KB. Unwritten, an
	// open rebuilds it by walking every page of the file (bbolt checks
	// each page and the order of its keys), reading the whole file through
	// the memory map: BenchmarkEmbeddedOpen, docs/performance.md. So Close
	// writes it with the last commit, and only an open after a crash
	// walks the file, read ahead in order first (readAhead).
	readAhead(path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.OpenTimeout, NoSync: opts.NoSync,
		FreelistType: bolt.FreelistMapType, NoFreelistSync: true})
	if errors.Is(err, berrors.ErrTimeout) {
		// bbolt's bare "timeout" names nothing: say which file, why, and
		// what to do instead.
		if abs, aerr := filepath.Abs(path); aerr == nil {
			path = abs
		}
		return nil, fmt.Errorf("store: %s is held by another process (bbolt lock %w after %v); "+
			"only one process can use an embedded store — run several instances on \"store redis\"",
			path, err, opts.OpenTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("store: opening %s: %w", path, err)
	}
	indexing := false
	err = db.Update(func(tx *bolt.Tx) error {
		// A file with records but no expiry index was written before the
		// index existed: index it (in batches, from the sweeper), starting
		// at the first record key.
		legacy := tx.Bucket(bucketRecords) != nil && tx.Bucket(bucketExpiry) == nil
		for _, b := range [][]byte{bucketRecords, bucketInFlight, bucketExpiry, bucketMeta,
			bucketIxInFlight, bucketIxAnswered, bucketIxFailed, bucketOrders, bucketOrderDays, bucketOrderRefs} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if legacy {
			if err := meta.Put(indexNext, bkey("")); err != nil {
				return err
			}
		}
		indexing = meta.Get(indexNext) != nil
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: preparing %s: %w", path, err)
	}
	s := &Embedded{
		db: db, now: opts.Now, n: newNotifier(), opts: opts, pend: make(map[string]*pending),
		stop: make(chan struct{}), done: make(chan struct{}), indexing: indexing,
		ops: make(chan *op), closed: make(chan struct{}), committed: make(chan struct{}),
	}
	go s.committer()
	go s.sweeper()
	return s, nil
}

func (s *Embedded) view(ctx context.Context, fn func(tx *bolt.Tx, t time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return mapBoltErr(s.db.View(func(tx *bolt.Tx) error { return fn(tx, s.now()) }))
}

func mapBoltErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// bkey is key's name in bbolt: one byte in front, as bbolt refuses empty
// keys and the contract allows them.
func bkey(key string) []byte {
	b := make([]byte, 1+len(key))
	b[0] = 'k'
	copy(b[1:], key)
	return b
}

// get returns the live entry for key, or nil if absent or expired.
func get(tx *bolt.Tx, key []byte, t time.Time) (*entry, error) {
	v := tx.Bucket(bucketRecords).Get(key)
	if v == nil {
		return nil, nil
	}
	e, err := decodeEntry(v)
	if err != nil {
		return nil, fmt.Errorf("%w: key %q", err, key)
	}
	if e.expired(t) {
		return nil, nil
	}
	e.lapse(t)
	return e, nil
}

// put stores e and moves its expiry and list index entries from the
// stored record's (if any) to e's.
func put(tx *bolt.Tx, e *entry) error {
	k := bkey(e.Key)
	recs, idx := tx.Bucket(bucketRecords), tx.Bucket(bucketExpiry)
	if old := recs.Get(k); old != nil {
		if err := idx.Delete(ikey(storedExpiry(old), k)); err != nil {
			return err
		}
		if err := unindex(tx, k); err != nil {
			return err
		}
	}
	if err := recs.Put(k, encodeEntry(e)); err != nil {
		return err
	}
	if err := idx.Put(ikey(e.keep, k), nil); err != nil {
		return err
	}
	if err := tx.Bucket(ixBucket(e.State)).Put(ixBolt(e.Changed.UnixMilli(), e.Key), nil); err != nil {
		return err
	}
	if e.State == StateInFlight {
		return tx.Bucket(bucketInFlight).Put(k, nil)
	}
	return tx.Bucket(bucketInFlight).Delete(k)
}

// unindex removes the list index entry of key's stored record.
func unindex(tx *bolt.Tx, key []byte) error {
	v := tx.Bucket(bucketRecords).Get(key)
	if v == nil {
		return nil
	}
	old, err := decodeEntry(v)
	if err != nil {
		return nil // a corrupt record is overwritten or deleted anyway
	}
	return tx.Bucket(ixBucket(old.State)).Delete(ixBolt(old.Changed.UnixMilli(), old.Key))
}

// del removes key's record and its index entries.
func del(tx *bolt.Tx, key []byte) error {
	recs := tx.Bucket(bucketRecords)
	if old := recs.Get(key); old != nil {
		if err := tx.Bucket(bucketExpiry).Delete(ikey(storedExpiry(old), key)); err != nil {
			return err
		}
		if err := unindex(tx, key); err != nil {
			return err
		}
		if err := recs.Delete(key); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketInFlight).Delete(key)
}

// merge adds the copies pending for e's key. mu held.
func (s *Embedded) merge(e *entry) {
	if p := s.pend[e.Key]; p != nil {
		e.Copies += p.copies
		e.CopyOutcomes.Replayed += p.copies
		if p.last.After(e.LastSeen) {
			e.LastSeen = p.last
		}
	}
}

func (s *Embedded) Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (ClaimResult, error) {
	// The replay path: a read, the copy counted in pend.
	var res ClaimResult
	err := s.view(ctx, func(tx *bolt.Tx, t time.Time) error {
		e, err := get(tx, bkey(key), t)
		if err == nil && e == nil {
			// A late copy of an event that ran, its record gone: a read too.
			rec, err := ranEvent(tx, key, t)
			if rec != nil {
				res = ClaimResult{Outcome: Answered, Record: rec}
			}
			return err
		}
		if err != nil || e.State != StateAnswered ||
			(fingerprint != "" && e.Fingerprint != "" && fingerprint != e.Fingerprint) {
			return err
		}
		s.merge(e)
		res = e.claimOn(fingerprint, t, 0)
		p := s.pend[key]
		if p == nil {
			p = &pending{}
			s.pend[key] = p
		}
		p.copies++
		p.last = t
		return nil
	})
	if err != nil || res.Outcome != 0 {
		return res, err
	}
	err = s.update(ctx, func(tx *bolt.Tx, t time.Time) error {
		e, err := get(tx, bkey(key), t)
		if err != nil {
			return err
		}
		if e == nil {
			if rec, err := ranEvent(tx, key, t); err != nil || rec != nil {
				res = ClaimResult{Outcome: Answered, Record: rec}
				return err // the event ran: nothing is written
			}
			e = newEntry(key, fingerprint, t, lockTTL)
			res = ClaimResult{Outcome: Won, Token: e.token}
		} else {
			s.merge(e)
			res = e.claimOn(fingerprint, t, lockTTL)
		}
		delete(s.pend, key) // merged into e, or left over from an expired record
		return put(tx, e)
	})
	if err != nil {
		return ClaimResult{}, err
	}
	return res, nil
}

// owned runs fn on key's entry if token owns it, then stores the entry
// (or deletes it when fn returns nil).
func (s *Embedded) owned(ctx context.Context, key, token string, fn func(e *entry, t time.Time) *entry) error {
	return s.ownedSearch(ctx, key, token, nil, 0, fn)
}

func (s *Embedded) Complete(ctx context.Context, key, token string, a Answer, ttl time.Duration, j Journal) error {
	err := s.update(ctx, func(tx *bolt.Tx, t time.Time) error {
		e, err := get(tx, bkey(key), t)
		if err != nil {
			return err
		}
		if e == nil || !e.owns(token) {
			return ErrNotOwner
		}
		e.answer(a, t, ttl, j)
		if err := put(tx, e); err != nil {
			return err
		}
		if err := fileSearch(tx, key, t.Add(searchTTL(ttl, a.Order)), searchRefs(j, a.Order)); err != nil {
			return err
		}
		if a.Order == nil {
			return nil
		}
		if err := updateOrder(tx, key, t, func(o *orderState, event string) { o.ran(event, t, a.Order) }); err != nil {
			return err
		}
		return fileEvent(tx, key, t, a.Order)
	})
	if err == nil {
		s.n.wake(key)
	}
	return err
}

func (s *Embedded) Release(ctx context.Context, key, token string, ttl time.Duration, j Journal) error {
	err := s.ownedSearch(ctx, key, token, searchRefs(j), ttl, func(e *entry, t time.Time) *entry {
		if ttl <= 0 {
			return nil // nothing to keep: forget the key
		}
		e.fail(t, ttl, j)
		return e
	})
	if err == nil {
		s.n.wake(key)
	}
	return err
}

func (s *Embedded) Reopen(ctx context.Context, key string, ttl time.Duration) error {
	return s.update(ctx, func(tx *bolt.Tx, t time.Time) error {
		e, err := get(tx, bkey(key), t)
		if err != nil {
			return err
		}
		if e == nil || e.State != StateAnswered {
			return ErrNotFound
		}
		s.merge(e) // the copies replays counted and did not write yet
		delete(s.pend, key)
		e.reopen(t, ttl)
		if err := put(tx, e); err != nil {
			return err
		}
		_, err = forgetEvent(tx, key, t)
		return err
	})
}

func (s *Embedded) Leave(ctx context.Context, key, token string, ttl time.Duration, j Journal) error {
	return s.ownedSearch(ctx, key, token, searchRefs(j), ttl, func(e *entry, t time.Time) *entry {
		e.leave(t, ttl, j)
		return e
	})
}

func (s *Embedded) Renew(ctx context.Context, key, token string, lockTTL time.Duration) error {
	return s.owned(ctx, key, token, func(e *entry, t time.Time) *entry {
		e.renew(t, lockTTL)
		return e
	})
}

func (s *Embedded) Lookup(ctx context.Context, key string) (*Record, error) {
	var rec *Record
	err := s.view(ctx, func(tx *bolt.Tx, t time.Time) error {
		e, err := get(tx, bkey(key), t)
		if err != nil {
			return err
		}
		if e == nil {
			return ErrNotFound
		}
		s.merge(e)
		rec, err = e.journaled()
		return err
	})
	return rec, err
}

// Wait: see Store. An expired claim wakes nobody; waiters bound their wait.
func (s *Embedded) Wait(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	select {
	case <-s.stop:
		return nil, nil, ErrClosed
	default:
	}
	ch, stop := s.n.wait(key)
	return ch, stop, nil
}

func (s *Embedded) Delete(ctx context.Context, key string) error {
	err := s.update(ctx, func(tx *bolt.Tx, t time.Time) error {
		e, err := get(tx, bkey(key), t)
		if err != nil {
			return err
		}
		delete(s.pend, key)
		if err := del(tx, bkey(key)); err != nil {
			return err
		}
		had, err := forgetEvent(tx, key, t)
		if err != nil {
			return err
		}
		if e == nil && !had {
			return ErrNotFound
		}
		return nil
	})
	if err == nil {
		s.n.wake(key)
	}
	return err
}

// Close stops the sweeper, writes pending counts and the freelist, closes
// the file and wakes all waiters.
func (s *Embedded) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		close(s.closed)
		<-s.committed
		err = s.flush()
		// The last commit writes the freelist, so the next open reads it
		// rather than rebuilding it from every page of the file (see
		// NewEmbedded): that walk is what made a restart slow, seconds at
		// 1M keys once the file is out of the page cache. The first
		// commit after the open drops it again; only a process that did
		// not get here (killed, crashed) leaves the walk to the next one.
		s.mu.Lock()
		s.db.NoFreelistSync = false
		if uerr := s.db.Update(func(*bolt.Tx) error { return nil }); err == nil {
			err = mapBoltErr(uerr)
		}
		s.mu.Unlock()
		if cerr := s.db.Close(); err == nil {
			err = cerr
		}
		s.n.wakeAll()
	})
	return err
}

var _ Store = (*Embedded)(nil)
