package store

import (
	"bytes"
	"context"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The embedded store files search entries in bucket "order_refs" as its
// ref index (see fileEvent), under scope "" which no key's scope is:
// 'f' + "" 0 "search" 0 <ref> 0 <full key> → the entry's keep, so they
// are kept and swept as those are.
func searchPrefix(ref string) []byte { return joinKey(refPrefix, true, "", "search", ref) }

// fileSearch files key under refs until keep at least.
func fileSearch(tx *bolt.Tx, key string, keep time.Time, refs []string) error {
	for _, ref := range refs {
		if err := putKept(tx, bucketOrderRefs, append(searchPrefix(ref), key...), keep); err != nil {
			return err
		}
	}
	return nil
}

func (s *Embedded) KeysByRef(ctx context.Context, ref string) ([]string, error) {
	if ref == "" || bytes.IndexByte([]byte(ref), 0) >= 0 {
		return nil, nil // no reference is filed with a 0 byte (keying.SearchRefs)
	}
	var out []string
	prefix := searchPrefix(ref)
	err := s.view(ctx, func(tx *bolt.Tx, t time.Time) error {
		c := tx.Bucket(bucketOrderRefs).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(out) < MaxSearch; k, v = c.Next() {
			if keptLive(v, t) {
				out = append(out, string(k[len(prefix):]))
			}
		}
		return nil
	})
	return out, err
}

// ownedSearch is owned, then files a kept key under refs for ttl (see
// Searcher) in the same transaction.
func (s *Embedded) ownedSearch(ctx context.Context, key, token string, refs []string, ttl time.Duration,
	fn func(e *entry, t time.Time) *entry,
) error {
	return s.update(ctx, func(tx *bolt.Tx, t time.Time) error {
		e, err := get(tx, bkey(key), t)
		if err != nil {
			return err
		}
		if e == nil || !e.owns(token) {
			return ErrNotOwner
		}
		if e = fn(e, t); e == nil {
			delete(s.pend, key)
			return del(tx, bkey(key))
		}
		if err := put(tx, e); err != nil {
			return err
		}
		return fileSearch(tx, key, t.Add(ttl), refs)
	})
}

var _ Searcher = (*Embedded)(nil)
