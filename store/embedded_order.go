package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idemgate/idemgate/keying"
)

// The embedded store's order state (see Order): bucket "orders", order →
// encodeOrderState, each order indexed in the expiry index like a record,
// under its own first byte so the sweeper tells the two apart.

// orderPrefix starts an order's name in the orders bucket and the expiry
// index; a record's starts with 'k' (bkey).
const orderPrefix = 'o'

// okey is order's name in bbolt.
func okey(order string) []byte {
	b := make([]byte, 1+len(order))
	b[0] = orderPrefix
	copy(b[1:], order)
	return b
}

// getOrder returns the live state of the order named k, or nil.
func getOrder(tx *bolt.Tx, k []byte, t time.Time) (*orderState, error) {
	v := tx.Bucket(bucketOrders).Get(k)
	if v == nil {
		return nil, nil
	}
	o, err := decodeOrderState(v)
	if err != nil {
		return nil, fmt.Errorf("%w: order %q", err, k[1:])
	}
	if !t.Before(o.keep) {
		return nil, nil
	}
	return o, nil
}

// ranEvent is the record a claim of key answers when key's event ran in
// its order, or nil.
func ranEvent(tx *bolt.Tx, key string, t time.Time) (*Record, error) {
	order, event := OrderOf(key)
	o, err := getOrder(tx, okey(order), t)
	if err != nil || o == nil {
		return nil, err
	}
	v, ok := o.events[event]
	if !ok {
		return nil, nil
	}
	ev, err := decodeOrderEvent(order, event, v)
	if err != nil {
		return nil, err
	}
	return fromOrder(key, ev), nil
}

// updateOrder applies fn to key's order and stores it (deleting it once it
// holds no event), moving its expiry index entry with it.
func updateOrder(tx *bolt.Tx, key string, t time.Time, fn func(o *orderState, event string)) error {
	order, event := OrderOf(key)
	k := okey(order)
	b, idx := tx.Bucket(bucketOrders), tx.Bucket(bucketExpiry)
	o, err := getOrder(tx, k, t)
	if err != nil {
		return err
	}
	if o == nil {
		o = &orderState{}
	} else if err := idx.Delete(ikey(o.keep, k)); err != nil {
		return err
	}
	fn(o, event)
	if len(o.events) == 0 {
		return b.Delete(k)
	}
	if err := b.Put(k, encodeOrderState(o)); err != nil {
		return err
	}
	return idx.Put(ikey(o.keep, k), nil)
}

// forgetEvent drops key's event from its order; had: it was there.
func forgetEvent(tx *bolt.Tx, key string, t time.Time) (had bool, err error) {
	err = updateOrder(tx, key, t, func(o *orderState, event string) {
		_, had = o.events[event]
		delete(o.events, event)
	})
	return had, err
}

// sweepOrder removes the order named k if it expired by t (its expiry
// index entry is already gone); one whose expiry moved is indexed again.
func sweepOrder(tx *bolt.Tx, k []byte, t time.Time) error {
	b := tx.Bucket(bucketOrders)
	v := b.Get(k)
	if v == nil {
		return nil
	}
	if o, err := decodeOrderState(v); err == nil && t.Before(o.keep) {
		return tx.Bucket(bucketExpiry).Put(ikey(o.keep, k), nil)
	}
	return b.Delete(k)
}

func (s *Embedded) Order(ctx context.Context, order string) (*Order, error) {
	var out *Order
	err := s.view(ctx, func(tx *bolt.Tx, t time.Time) error {
		o, err := getOrder(tx, okey(order), t)
		if err != nil {
			return err
		}
		if o == nil || len(o.events) == 0 {
			return ErrNotFound
		}
		out, err = o.view(order)
		return err
	})
	return out, err
}

// The embedded store's reconciliation indexes (see OrderIndex): bucket
// "order_days", 'd' + <scope> 0 <merchant> 0 <yyyymmdd> 0 <id> → the
// entry's keep (ms, big-endian), and bucket "order_refs", 'f' + <scope> 0
// <settles> 0 <ref> 0 <full key> → its keep; each entry is in the expiry
// index under its own name, whose first byte tells the sweeper what it is.
// A day's or a ref's entries are one range of keys; filing an entry again
// only moves its keep.

const (
	dayPrefix = 'd'
	refPrefix = 'f'
)

var (
	bucketOrderDays = []byte("order_days")
	bucketOrderRefs = []byte("order_refs")
)

// joinKey is prefix + parts joined by 0 bytes (a trailing 0 after the last
// when open, for a range of keys).
func joinKey(prefix byte, open bool, parts ...string) []byte {
	b := []byte{prefix}
	for i, p := range parts {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, p...)
	}
	if open {
		b = append(b, 0)
	}
	return b
}

// fileEvent files key's event, run at t, in the indexes.
func fileEvent(tx *bolt.Tx, key string, t time.Time, r *OrderRun) error {
	scope, merchant, id, ok := filedAs(key, r)
	if !ok {
		return nil
	}
	keep := t.Add(r.TTL)
	if err := putKept(tx, bucketOrderDays, joinKey(dayPrefix, false, scope, merchant, filedDay(t, r), id), keep); err != nil {
		return err
	}
	for _, ref := range r.Refs {
		if err := putKept(tx, bucketOrderRefs, joinKey(refPrefix, false, scope, string(r.Settles), ref, key), keep); err != nil {
			return err
		}
	}
	return nil
}

// putKept stores an index entry k kept until keep, or later if it already
// was, with its expiry index entry.
func putKept(tx *bolt.Tx, bucket, k []byte, keep time.Time) error {
	b, idx := tx.Bucket(bucket), tx.Bucket(bucketExpiry)
	if old := b.Get(k); len(old) == 8 {
		was := time.UnixMilli(int64(binary.BigEndian.Uint64(old)))
		if !keep.After(was) {
			return nil
		}
		if err := idx.Delete(ikey(was, k)); err != nil {
			return err
		}
	}
	v := binary.BigEndian.AppendUint64(nil, uint64(max(keep.UnixMilli(), 0)))
	if err := b.Put(k, v); err != nil {
		return err
	}
	return idx.Put(ikey(keep, k), nil)
}

// keptLive reports whether an index entry's value keeps it past t.
func keptLive(v []byte, t time.Time) bool {
	return len(v) == 8 && t.Before(time.UnixMilli(int64(binary.BigEndian.Uint64(v))))
}

// sweepKept removes index entry k if it expired by t (its expiry index
// entry is already gone); one whose keep moved is indexed again.
func sweepKept(tx *bolt.Tx, k []byte, t time.Time) error {
	bucket := bucketOrderDays
	if k[0] == refPrefix {
		bucket = bucketOrderRefs
	}
	b := tx.Bucket(bucket)
	v := b.Get(k)
	if v == nil {
		return nil
	}
	if keptLive(v, t) {
		return tx.Bucket(bucketExpiry).Put(ikey(time.UnixMilli(int64(binary.BigEndian.Uint64(v))), k), nil)
	}
	return b.Delete(k)
}

func (s *Embedded) Orders(ctx context.Context, names []string) ([]*Order, error) {
	out := make([]*Order, len(names))
	err := s.view(ctx, func(tx *bolt.Tx, t time.Time) error {
		for i, n := range names {
			o, err := getOrder(tx, okey(n), t)
			if err != nil {
				return err
			}
			if o == nil || len(o.events) == 0 {
				continue
			}
			if out[i], err = o.view(n); err != nil {
				return err
			}
			out[i].ExpiresAt = time.Time{}
		}
		return nil
	})
	return out, err
}

func (s *Embedded) EventsByRef(ctx context.Context, scope string, settles keying.Settlement, refs []string) ([][]string, error) {
	out := make([][]string, len(refs))
	err := s.view(ctx, func(tx *bolt.Tx, t time.Time) error {
		c := tx.Bucket(bucketOrderRefs).Cursor()
		for i, ref := range refs {
			prefix := joinKey(refPrefix, true, scope, string(settles), ref)
			for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				if keptLive(v, t) {
					out[i] = append(out[i], string(k[len(prefix):]))
				}
			}
		}
		return nil
	})
	return out, err
}

func (s *Embedded) RanOn(ctx context.Context, q RanQuery) (RanPage, error) {
	page := RanPage{Orders: []string{}}
	prefix := joinKey(dayPrefix, true, q.Scope, q.Merchant, dayName(q.Day))
	err := s.view(ctx, func(tx *bolt.Tx, t time.Time) error {
		c := tx.Bucket(bucketOrderDays).Cursor()
		k, v := c.Seek(append(bytes.Clone(prefix), q.Cursor...))
		if q.Cursor != "" && k != nil && string(k[len(prefix):]) == q.Cursor {
			k, v = c.Next() // the cursor is the last id of the page before
		}
		last := ""
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(page.Orders) == q.limit() {
				page.Next = last
				return nil
			}
			if keptLive(v, t) {
				last = string(k[len(prefix):])
				page.Orders = append(page.Orders, OrderName(q.Scope, q.Merchant, last))
			}
		}
		return nil
	})
	return page, err
}
