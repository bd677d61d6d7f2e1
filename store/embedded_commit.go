package store

import (
	"context"
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The embedded store's group commit: writes that arrive while a
// transaction commits share the next one, and its fsync.

// op is one write waiting for the committer.
type op struct {
	fn   func(tx *bolt.Tx, t time.Time) error
	err  error
	done chan struct{}
}

// maxGroup bounds the writes committed together, so one transaction never
// holds the lock for long.
const maxGroup = 128

// update runs fn in a write transaction. Writes that arrive while another
// commits are committed together in the next transaction (group commit:
// one commit and one fsync for all of them), so concurrent requests are
// not each held up by the disk. fn changes the store only through tx and
// may run twice: a write that fails takes its group with it, and the
// others are then run alone. ErrNotOwner and ErrNotFound are answers, not
// failures: they fail no group.
func (s *Embedded) update(ctx context.Context, fn func(tx *bolt.Tx, t time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &op{fn: fn, done: make(chan struct{})}
	select {
	case s.ops <- o:
	case <-s.closed:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err() // not sent, so never run
	}
	<-o.done // once sent it runs: waiting for the outcome is not optional
	return o.err
}

// committer runs the writes sent to ops: the first one waiting, plus all
// that are waiting behind it, in one transaction.
func (s *Embedded) committer() {
	defer close(s.committed)
	group := make([]*op, 0, maxGroup)
	for {
		select {
		case <-s.closed:
			return
		case o := <-s.ops:
			group = append(group[:0], o)
		}
	gather:
		for len(group) < maxGroup {
			select {
			case o := <-s.ops:
				group = append(group, o)
			default:
				break gather
			}
		}
		s.commit(group)
		for _, o := range group {
			close(o.done)
		}
		clear(group)
	}
}

// commit runs group in one transaction, or each alone if that fails.
func (s *Embedded) commit(group []*op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits.Add(1)
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, o := range group {
			o.err = o.fn(tx, s.now())
			if o.err != nil && !errors.Is(o.err, ErrNotOwner) && !errors.Is(o.err, ErrNotFound) {
				return o.err
			}
		}
		return nil
	})
	switch {
	case err == nil:
	case len(group) == 1:
		group[0].err = mapBoltErr(err)
	default:
		for _, o := range group {
			o.err = mapBoltErr(s.db.Update(func(tx *bolt.Tx) error { return o.fn(tx, s.now()) }))
		}
	}
}
