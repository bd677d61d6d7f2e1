package store

import (
	"bytes"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The embedded store's housekeeping: the sweeper that pops expired records
// off the expiry index, builds the index of an older file, and writes the
// copies that replays counted.

// sweeper removes expired records every SweepInterval, so the file does
// not grow with keys nobody asks for again, and writes replay counts every
// FlushInterval.
func (s *Embedded) sweeper() {
	defer close(s.done)
	sweep := time.NewTicker(s.opts.SweepInterval)
	defer sweep.Stop()
	flush := time.NewTicker(s.opts.FlushInterval)
	defer flush.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-flush.C:
			_ = s.flush()
		case <-sweep.C:
			_, _ = s.Sweep()
		}
	}
}

// Sweep removes every record expired by now, oldest first, in write
// transactions of at most SweepBatch records each (the lock is released
// between them, so claims are not held up), and returns how many it
// removed. On a file from before the expiry index it first finishes
// building the index, in batches too. The sweeper goroutine calls it; it
// is exported for tests and tooling.
func (s *Embedded) Sweep() (int, error) {
	for {
		done, err := s.indexBatch()
		if err != nil {
			return 0, err
		}
		if done {
			break
		}
		if s.stopping() {
			return 0, nil
		}
	}
	removed := 0
	for {
		n, full, err := s.sweepBatch()
		removed += n
		if err != nil || !full || s.stopping() {
			return removed, err
		}
	}
}

// stopping reports whether Close was called: a long sweep stops early so
// Close does not wait for it.
func (s *Embedded) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// sweepBatch pops up to SweepBatch expired entries off the front of the
// expiry index and removes their records; full reports whether it found as
// many as it could take (so more may be waiting).
func (s *Embedded) sweepBatch() (removed int, full bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	err = s.db.Update(func(tx *bolt.Tx) error {
		t := s.now()
		limit := uint64(max(t.UnixMilli(), 0))
		recs, idx, inFlight := tx.Bucket(bucketRecords), tx.Bucket(bucketExpiry), tx.Bucket(bucketInFlight)
		var due [][]byte
		c := idx.Cursor()
		for k, _ := c.First(); k != nil && len(due) < s.opts.SweepBatch; k, _ = c.Next() {
			if len(k) < 8 || binary.BigEndian.Uint64(k) > limit {
				break
			}
			due = append(due, bytes.Clone(k))
		}
		full = len(due) == s.opts.SweepBatch
		for _, ik := range due {
			if err := idx.Delete(ik); err != nil {
				return err
			}
			k := ik[8:]
			if len(k) > 0 && k[0] == orderPrefix {
				if err := sweepOrder(tx, k, t); err != nil {
					return err
				}
				removed++
				continue
			}
			if len(k) > 0 && (k[0] == dayPrefix || k[0] == refPrefix) {
				if err := sweepKept(tx, k, t); err != nil {
					return err
				}
				removed++
				continue
			}
			v := recs.Get(k)
			if v == nil {
				continue // the record went without its entry: nothing to do
			}
			if e, err := decodeEntry(v); err == nil && !e.expired(t) {
				// A stale entry (the record's expiry moved without it):
				// keep the record, indexed at its true expiry.
				if err := idx.Put(ikey(e.keep, k), nil); err != nil {
					return err
				}
				continue
			}
			delete(s.pend, string(k[1:]))
			if err := unindex(tx, k); err != nil {
				return err
			}
			if err := recs.Delete(k); err != nil {
				return err
			}
			if err := inFlight.Delete(k); err != nil {
				return err
			}
			removed++
		}
		return nil
	})
	if err != nil {
		return 0, false, mapBoltErr(err)
	}
	return removed, full, nil
}

// indexBatch adds up to SweepBatch records of a file from before the expiry
// index to the index, resuming where the last batch (or the last process)
// stopped; done reports that the index is complete. Records written since
// the file was opened are indexed by put already; indexing one twice
// writes the same entry.
func (s *Embedded) indexBatch() (done bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.indexing {
		return true, nil
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		meta, idx := tx.Bucket(bucketMeta), tx.Bucket(bucketExpiry)
		next := meta.Get(indexNext)
		if next == nil {
			done = true
			return nil
		}
		c := tx.Bucket(bucketRecords).Cursor()
		k, v := c.Seek(bytes.Clone(next))
		for n := 0; k != nil && n < s.opts.SweepBatch; k, v = c.Next() {
			if err := idx.Put(ikey(storedExpiry(v), bytes.Clone(k)), nil); err != nil {
				return err
			}
			n++
		}
		if k == nil {
			done = true
			return meta.Delete(indexNext)
		}
		return meta.Put(indexNext, bytes.Clone(k))
	})
	if err != nil {
		return false, mapBoltErr(err)
	}
	s.indexing = !done
	return done, nil
}

// flush writes the copies counted by replays.
func (s *Embedded) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pend) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		t := s.now()
		for key := range s.pend {
			e, err := get(tx, bkey(key), t)
			if err != nil {
				return err
			}
			if e != nil && e.State == StateAnswered {
				s.merge(e)
				if err := put(tx, e); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil {
		clear(s.pend)
	}
	return mapBoltErr(err)
}

// ikey is key's entry in the expiry index: expiry in Unix ms, big-endian so
// bbolt's byte order is time order, then the record key.
func ikey(expiresAt time.Time, key []byte) []byte {
	b := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(b, uint64(max(expiresAt.UnixMilli(), 0)))
	return append(b, key...)
}

// storedExpiry is when an encoded record may be forgotten (its retention:
// a failed or left claim's journal outlives its lock); a corrupt one counts
// as long expired (the Unix epoch), so the sweeper removes it.
func storedExpiry(v []byte) time.Time {
	e, err := decodeEntry(v)
	if err != nil {
		return time.UnixMilli(0)
	}
	return e.keep
}
