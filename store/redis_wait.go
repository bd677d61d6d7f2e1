package store

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Wait subscribes to key's channel on the store's shared pub/sub connection
// and returns once Redis has confirmed the subscription (a PING behind the
// SUBSCRIBE on the same connection has come back), so a Complete after Wait
// returns is never missed. The channel may also close spuriously, when the
// pub/sub connection was lost and messages may have been missed: callers
// re-check with Lookup or Claim anyway.
func (s *Redis) Wait(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if s.closed.Load() {
		return nil, nil, ErrClosed
	}
	ch := s.channel(key)
	w := &waiter{ch: make(chan struct{})}
	ping := newToken()
	pong := make(chan struct{})

	s.psMu.Lock()
	if s.closed.Load() {
		s.psMu.Unlock()
		return nil, nil, ErrClosed
	}
	s.startPubSub(ctx)
	sub := s.subs[ch]
	var err error
	if sub == nil {
		sub = &subscription{waiters: make(map[*waiter]struct{})}
		s.subs[ch] = sub
		err = s.ps.Subscribe(ctx, ch)
	}
	sub.refs++
	sub.waiters[w] = struct{}{}
	if err == nil {
		s.pongs[ping] = pong
		err = s.ps.Ping(ctx, ping)
	}
	s.psMu.Unlock()

	var once sync.Once
	stop := func() { once.Do(func() { s.unsubscribe(ch, w, ping) }) }
	if err != nil {
		stop()
		return nil, nil, s.wrap("subscribe", err)
	}
	select {
	case <-pong:
		return w.ch, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	}
}

// startPubSub starts the store's pub/sub connection, if not yet, under
// psMu. It lives as long as the store, not the first waiter's request.
func (s *Redis) startPubSub(ctx context.Context) {
	if s.ps != nil {
		return
	}
	s.ps = s.c.Subscribe(context.WithoutCancel(ctx))
	s.loopDone = make(chan struct{})
	go s.receive(s.ps, s.loopDone)
}

// unsubscribe drops one waiter; the last one out sends UNSUBSCRIBE. Both
// happen under psMu, so SUBSCRIBE and UNSUBSCRIBE go out in the order the
// reference counts changed.
func (s *Redis) unsubscribe(ch string, w *waiter, ping string) {
	s.psMu.Lock()
	defer s.psMu.Unlock()
	delete(s.pongs, ping)
	sub := s.subs[ch]
	if sub == nil {
		return
	}
	delete(sub.waiters, w)
	if sub.refs--; sub.refs > 0 {
		return
	}
	delete(s.subs, ch)
	if s.ps != nil && !s.closed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.ps.Unsubscribe(ctx, ch) // on failure the next reconnect drops it
		cancel()
	}
}

// receive dispatches the pub/sub connection's messages until Close.
func (s *Redis) receive(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), 30*time.Second)
		if s.closed.Load() {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Idle: a PING proves the connection is still alive; if
				// it is not, the next receive fails and reconnects.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = ps.Ping(ctx)
				cancel()
				continue
			}
			// Lost connection: go-redis reconnects and resubscribes on the
			// next receive, but messages may have been missed meanwhile.
			s.wakeAll()
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			s.psMu.Lock()
			var ws []*waiter
			if sub := s.subs[m.Channel]; sub != nil {
				for w := range sub.waiters {
					ws = append(ws, w)
				}
				clear(sub.waiters)
			}
			s.psMu.Unlock()
			for _, w := range ws {
				w.wake()
			}
		case *redis.Pong:
			s.psMu.Lock()
			if c, ok := s.pongs[m.Payload]; ok {
				close(c)
				delete(s.pongs, m.Payload)
			}
			s.psMu.Unlock()
		}
	}
}

// wakeAll wakes every waiter and every Wait blocked on its PING: something
// may have been missed, so all re-check.
func (s *Redis) wakeAll() {
	s.psMu.Lock()
	var ws []*waiter
	for _, sub := range s.subs {
		for w := range sub.waiters {
			ws = append(ws, w)
		}
		clear(sub.waiters)
	}
	for p, c := range s.pongs {
		close(c)
		delete(s.pongs, p)
	}
	s.psMu.Unlock()
	for _, w := range ws {
		w.wake()
	}
}

// Close stops the pub/sub connection and wakes all waiters. It does not
// close the client, which the caller owns.
func (s *Redis) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.ifx.close()
	s.psMu.Lock()
	ps, done := s.ps, s.loopDone
	s.psMu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
	s.wakeAll()
	s.bgMu.Lock() // no background work starts after this
	s.bgMu.Unlock()
	s.bgCancel()
	// A sort whose command waits on a server that stopped answering ends
	// at the client's time-out, not at the cancel: it is not waited for
	// longer than bgWait (it writes only by compare-and-set, and a client
	// closed meanwhile fails it).
	waited := make(chan struct{})
	go func() { s.bg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(bgWait):
	}
	return nil
}
