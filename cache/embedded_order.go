package cache

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
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
