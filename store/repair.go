package store

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// Repair: an answered record whose order lacks its event. A settle that a
// store outage deferred stored, before the deferred settle wrote the
// order too (see Settler), the record alone: the key is answered, the
// backend ran it, but its order does not remember the event, nor do the
// day index, the ref index and search for the order's ttl. A reader that
// finds such a record (the order page, reconciliation's look-up, search)
// writes the event back from it with RepairOrderEvent, as the completion
// would have: it ran when the record was answered.

// OrderRepairer writes back an answered record's business event into its
// order; a feature of the memory, embedded and Redis stores apart from
// the claim contract, which callers check for with a type assertion.
type OrderRepairer interface {
	// RepairOrderEvent writes key's business event into its order as a
	// completion with Answer.Order r writes it (the event, the day and
	// ref indexes, the search references, the notification's included),
	// run when key's record was answered and kept r.TTL from then, if,
	// in the same store operation, key's record is answered (its own, not
	// FromOrder) and its order does not remember the event. An event the
	// order remembers is never overwritten, and a record purged, reopened
	// or expired is never repaired from. repaired: it wrote the event.
	RepairOrderEvent(ctx context.Context, key string, r *OrderRun) (repaired bool, err error)
}

// repairKeep is until when a repair of an event run at ran keeps what it
// writes: the order's ttl from then, and the record's own refs at least
// for its ttl (searchTTL).
func repairKeep(ran time.Time, r *OrderRun) time.Time { return ran.Add(r.TTL) }

func (s *Memory) RepairOrderEvent(ctx context.Context, key string, r *OrderRun) (bool, error) {
	if r == nil {
		return false, nil
	}
	t, err := s.enter(ctx)
	if err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	e := s.get(key, t)
	if e == nil || e.State != StateAnswered || !t.Before(repairKeep(e.Changed, r)) {
		return false, nil
	}
	order, event := OrderOf(key)
	o := s.orders[order]
	if o != nil && t.Before(o.keep) {
		if _, ok := o.events[event]; ok {
			return false, nil
		}
	} else {
		o = &orderState{}
		s.orders[order] = o
	}
	n, err := e.notification()
	if err != nil {
		return false, err
	}
	ran := e.Changed
	o.ran(event, ran, r)
	s.ix.file(key, ran, r)
	s.ix.search(key, laterOf(e.ExpiresAt, repairKeep(ran, r)), searchRefs(Journal{Notification: n}, r))
	return true, nil
}

func (s *Embedded) RepairOrderEvent(ctx context.Context, key string, r *OrderRun) (bool, error) {
	if r == nil {
		return false, nil
	}
	repaired := false
	err := s.update(ctx, func(tx *bolt.Tx, t time.Time) error {
		repaired = false // a retried transaction starts over
		e, err := get(tx, bkey(key), t)
		if err != nil {
			return err
		}
		if e == nil || e.State != StateAnswered || !t.Before(repairKeep(e.Changed, r)) {
			return nil
		}
		if had, err := ranEvent(tx, key, t); err != nil || had != nil {
			return err
		}
		ran := e.Changed
		if err := updateOrder(tx, key, t, func(o *orderState, event string) { o.ran(event, ran, r) }); err != nil {
			return err
		}
		if err := fileEvent(tx, key, ran, r); err != nil {
			return err
		}
		n, err := e.notification()
		if err != nil {
			return err
		}
		if err := fileSearch(tx, key, laterOf(e.ExpiresAt, repairKeep(ran, r)), searchRefs(Journal{Notification: n}, r)); err != nil {
			return err
		}
		repaired = true
		return nil
	})
	return repaired, err
}

//go:embed repair.lua
var repairLua string

// repairScript writes the event: refused at maxmemory (a repair can wait
// for a later read; the readers show the event meanwhile).
var repairScript = newWriteScript("", clockLua, recordLua, loadLua, repairLua)

// RepairOrderEvent reads key's record (Lookup), then writes the event in a
// script on the key's hash tag (the record's hash and its order's state
// share a slot, so it runs on Cluster), which checks the record is still
// that answer and the order lacks the event; then, once it wrote, the
// indexes and the search entries in one pipeline (readers check them
// against the order state, which is there first).
func (s *Redis) RepairOrderEvent(ctx context.Context, key string, r *OrderRun) (bool, error) {
	if r == nil {
		return false, nil
	}
	rec, err := s.Lookup(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case rec.State != StateAnswered || rec.FromOrder:
		return false, nil
	}
	ran := rec.Changed
	left := time.Until(repairKeep(ran, r))
	if left <= 0 {
		return false, nil
	}
	order, event := OrderOf(key)
	got, err := s.script(repairScript).Run(ctx, s.c, []string{s.hashKey(key), s.orderKey(order)},
		event, strconv.FormatInt(ran.UnixMilli(), 10), strconv.FormatInt(ms(left), 10), encodeOrderEvent(ran, r)).Int()
	if err != nil {
		return false, s.wrap("repair", err)
	}
	if got != 1 {
		return false, nil
	}
	oi := s.orderIndexOf(key, ran, r)
	sx := s.searchIxOf(key, searchRefs(Journal{Notification: rec.Notification}, r), time.Until(laterOf(rec.ExpiresAt, repairKeep(ran, r))))
	if oi == nil && sx == nil {
		return true, nil
	}
	if oi != nil {
		oi.ttl = left
	}
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if oi != nil {
			oi.write(ctx, p)
		}
		if sx != nil {
			sx.write(ctx, p)
		}
		return nil
	})
	if err != nil {
		// The event is in its order; only its index entries are missing.
		return true, s.wrap("repair index", err)
	}
	return true, nil
}

// notification is the entry's journaled notification, nil for none.
func (e *entry) notification() (*Notification, error) {
	if e.notif == nil {
		return nil, nil
	}
	return decodeNotification(e.notif)
}

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Interface guards
var (
	_ OrderRepairer = (*Memory)(nil)
	_ OrderRepairer = (*Embedded)(nil)
	_ OrderRepairer = (*Redis)(nil)
)
