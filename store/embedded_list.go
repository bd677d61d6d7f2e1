package store

import (
	"bytes"
	"context"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// List walks the list index of the state from the cursor, newest first;
// failed and dead listings also walk the in-flight index, where a claim
// whose lock ran out with a journal stays until it is written again
// (it reads as failed). It looks at no more than 4×Limit index entries.
func (s *Embedded) List(ctx context.Context, q ListQuery) (ListPage, error) {
	if err := q.normalize(); err != nil {
		return ListPage{}, err
	}
	after, err := decodeListCursor(q.Cursor)
	if err != nil {
		return ListPage{}, err
	}
	if p, ok := q.keyPrefix(); !ok {
		return ListPage{}, nil // Scope and Prefix exclude each other
	} else if p != "" {
		if page, ok, err := s.listPrefix(ctx, q, p, after); ok || err != nil {
			return page, err
		}
	}
	var page ListPage
	err = s.view(ctx, func(tx *bolt.Tx, t time.Time) error {
		buckets := [][]byte{ixBucket(q.State)}
		if q.State == StateFailed || q.State == StateDead {
			buckets = [][]byte{bucketIxFailed, bucketIxInFlight}
		}
		start := ixBolt(after.Changed, after.Key)
		var curs []*ixCursor
		for _, b := range buckets {
			c := &ixCursor{c: tx.Bucket(b).Cursor()}
			c.k, _ = c.c.Seek(start)
			if c.k != nil && q.Cursor != "" && bytes.Equal(c.k, start) {
				c.k, _ = c.c.Next()
			}
			curs = append(curs, c)
		}
		for budget := 4 * q.Limit; ; budget-- {
			var cur *ixCursor
			for _, c := range curs {
				if c.k != nil && (cur == nil || bytes.Compare(c.k, cur.k) < 0) {
					cur = c
				}
			}
			if cur == nil {
				return nil
			}
			pos, ok := parseIxBolt(cur.k)
			if len(page.Records) == q.Limit || budget == 0 || !ok || pos.Changed < q.Since.UnixMilli() {
				if ok && pos.Changed >= q.Since.UnixMilli() {
					page.Next = encodeListCursor(after)
				}
				return nil
			}
			after = pos
			cur.k, _ = cur.c.Next()
			if !q.keyMatches(pos.Key) {
				continue
			}
			e, err := get(tx, bkey(pos.Key), t)
			if err != nil {
				return err
			}
			if e != nil && e.Changed.UnixMilli() == pos.Changed && q.matches(&e.Record) {
				s.merge(e)
				page.Records = append(page.Records, e.listed())
			}
		}
	})
	if err != nil {
		return ListPage{}, err
	}
	return page, nil
}

// listPrefix lists the keys starting with p from the records themselves:
// bbolt keeps them in key order, so a Seek and a walk of what matches cost
// what the prefix finds, where the time index would be walked to its end
// for a prefix that matches little. Past listPrefixMax keys it gives up
// (ok false) and the caller walks the time index, where such a prefix's
// keys are dense enough. Each page reads the matching records again.
func (s *Embedded) listPrefix(ctx context.Context, q ListQuery, p string, after listPos) (page ListPage, ok bool, err error) {
	err = s.view(ctx, func(tx *bolt.Tx, t time.Time) error {
		start := bkey(p)
		c := tx.Bucket(bucketRecords).Cursor()
		var found []*entry
		n := 0
		for k, _ := c.Seek(start); k != nil && bytes.HasPrefix(k, start); k, _ = c.Next() {
			if n++; n > listPrefixMax {
				return nil
			}
			e, err := get(tx, k, t)
			if err != nil {
				return err
			}
			if e != nil && q.matches(&e.Record) && (q.Cursor == "" || listAfter(e.Changed, e.Key, after)) {
				found = append(found, e)
			}
		}
		ok = true
		slices.SortFunc(found, func(a, b *entry) int { return listOrder(&a.Record, &b.Record) })
		if len(found) > q.Limit {
			found = found[:q.Limit]
			l := found[len(found)-1]
			page.Next = encodeListCursor(listPos{Changed: l.Changed.UnixMilli(), Key: l.Key})
		}
		for _, e := range found {
			s.merge(e)
			page.Records = append(page.Records, e.listed())
		}
		return nil
	})
	return page, ok, err
}

// listPrefixMax: a prefix matching more keys is listed from the time index.
const listPrefixMax = 10000

type ixCursor struct {
	c *bolt.Cursor
	k []byte
}
