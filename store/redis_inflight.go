package store

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The in-flight index: won claims, newest first, in the list index shards
// of StateInFlight, so List pages through them as through answered and
// failed records (across every Cluster node, bounded work per page).
//
// A claim cannot write the index itself: the index shard lives in another
// slot than the key, and the claim is the hot path. So the store notes each
// claim it wins and writes the notes in one pipeline every
// inFlightFlushEvery; a claim settled before that is never written at all,
// which is most of them. Settling removes a written entry in the settle's
// own pipeline (no extra round trip); an entry left by a gateway that died
// reads as stale once its claim runs out, and List repairs it.
//
// So List of in-flight claims on Redis shows every claim of this process
// (List writes the notes first) and those of other instances older than
// inFlightFlushEvery.
const inFlightFlushEvery = 100 * time.Millisecond

// inFlightHorizon trims in-flight entries older than this: claims held
// longer (an async delivery's claim lives up to give_up) are written again
// by the process holding them (inFlightIx.refresh).
const inFlightHorizon = 7 * 24 * time.Hour

type inFlightIx struct {
	s *Redis

	mu       sync.Mutex
	held     map[string]*ifEntry // the claims this process holds
	removals []string            // keys whose entry was written after they settled
	flushMu  sync.Mutex          // one flush at a time

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type ifEntry struct {
	changed int64 // the claim's changed time (ms): its entry's member
	written bool
	gone    bool // settled while a flush was writing it
}

func newInFlightIx(s *Redis) *inFlightIx {
	x := &inFlightIx{s: s, held: make(map[string]*ifEntry), stop: make(chan struct{}), done: make(chan struct{})}
	go x.loop()
	return x
}

func (x *inFlightIx) loop() {
	defer close(x.done)
	t := time.NewTicker(inFlightFlushEvery)
	defer t.Stop()
	trimmed := time.Now()
	for {
		select {
		case <-x.stop:
			return
		case <-t.C:
		}
		trim := time.Since(trimmed) > time.Minute
		if trim {
			trimmed = time.Now()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		x.flush(ctx, trim)
		cancel()
	}
}

func (x *inFlightIx) close() {
	x.once.Do(func() {
		close(x.stop)
		<-x.done
	})
}

// won notes a claim won at changed.
func (x *inFlightIx) won(key string, changed int64) {
	x.mu.Lock()
	if e := x.held[key]; e != nil {
		e.gone = true // an older claim of the key, never settled here
		if e.written {
			x.removals = append(x.removals, ixMember(e.changed, key))
		}
	}
	x.held[key] = &ifEntry{changed: changed}
	x.mu.Unlock()
}

// settled forgets key's claim: it returns the entry to remove when one was
// written (the caller removes it in its own pipeline).
func (x *inFlightIx) settled(key string) (member string, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.held[key]
	if e == nil {
		return "", false
	}
	delete(x.held, key)
	e.gone = true
	if e.written {
		return ixMember(e.changed, key), true
	}
	return "", false
}

// left re-notes a claim that Leave journaled: its entry was written with
// the record's new changed time.
func (x *inFlightIx) left(key string, changed int64) {
	x.mu.Lock()
	x.held[key] = &ifEntry{changed: changed, written: true}
	x.mu.Unlock()
}

// flush writes the entries of claims held and not written yet, and those
// that must go. With trim it also cuts entries past the horizon from every
// shard and writes every held claim again, so a claim held longer than the
// horizon stays listed.
func (x *inFlightIx) flush(ctx context.Context, trim bool) {
	x.flushMu.Lock()
	defer x.flushMu.Unlock()
	type note struct {
		key string
		e   *ifEntry
	}
	x.mu.Lock()
	var batch []note
	for k, e := range x.held {
		if !e.written || trim {
			batch = append(batch, note{k, e})
		}
	}
	removals := x.removals
	x.removals = nil
	x.mu.Unlock()
	if len(batch) == 0 && len(removals) == 0 && !trim {
		return
	}
	s := x.s
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, n := range batch {
			p.ZAdd(ctx, s.ixKey(StateInFlight, "", n.key), redis.Z{Member: ixMember(n.e.changed, n.key)})
		}
		for _, m := range removals {
			p.ZRem(ctx, s.ixKey(StateInFlight, "", ixKeyOf(m)), m)
		}
		if trim {
			cut := "[" + ixMember(time.Now().Add(-inFlightHorizon).UnixMilli(), "")[:16]
			for i := range ixShards {
				p.ZRemRangeByLex(ctx, s.ixShardKey(StateInFlight, "", i), cut, "+")
			}
		}
		return nil
	})
	x.mu.Lock()
	defer x.mu.Unlock()
	if err != nil {
		x.removals = append(x.removals, removals...) // tried again next time
		return
	}
	for _, n := range batch {
		if n.e.gone {
			// Settled while this flush wrote it: remove it next time.
			x.removals = append(x.removals, ixMember(n.e.changed, n.key))
			continue
		}
		n.e.written = true
	}
}

// ixKeyOf is the key of an index member.
func ixKeyOf(member string) string {
	if len(member) > 17 {
		return member[17:]
	}
	return ""
}
