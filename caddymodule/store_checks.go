package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	async "github.com/idemgate/idemgate/delivery"
	"github.com/idemgate/idemgate/store"
)

// The start-up checks of a Redis store (store.CheckRedis): a Redis that
// may evict the gateway's records, or that refuses it a command, key or
// channel, stops the start with an error that says why and how to fix it;
// one without persistence is warned about. A Redis that does not answer
// within store_timeout does not hold the start: the gateway warns, starts,
// and checks again in the background until it can, then every minute,
// logging at error what changed. The store keeps the last complete report
// (store.Redis.SetChecked): an async route reads there whether its acks
// are durable (delivery.Durability).

// defaultRecheckEvery is how often a running store's Redis is checked
// again; defaultRetryEvery, how soon again after a check that could not
// reach it (redisWatch's recheck and retry).
const (
	defaultRecheckEvery = time.Minute
	defaultRetryEvery   = 10 * time.Second
)

// redisWatch re-checks one store's Redis in the background.
type redisWatch struct {
	c       redis.UniversalClient
	store   store.Store
	id      string
	opts    store.RedisCheckOptions
	timeout time.Duration
	logger  *zap.Logger
	// recheck and retry are the intervals of the loop: checkRedis sets
	// the production ones; only the loop reads them.
	recheck, retry time.Duration

	stopOnce sync.Once
	stopped  chan struct{}
	done     chan struct{}
	last     *store.RedisReport // the last report that reached every master
	unfit    bool               // the store's claims are refused (setUnfit)
}

// checkRedis runs the start-up checks of store s on client c, bounded by
// timeout. It returns an error that must stop the start, or a watch that
// goes on checking (its close stops it, then closes c).
func checkRedis(c redis.UniversalClient, s store.Store, sc StoreConfig, timeout time.Duration, logger *zap.Logger) (io.Closer, error) {
	w := &redisWatch{c: c, store: s, id: sc.id(), timeout: timeout, logger: logger,
		recheck: defaultRecheckEvery, retry: defaultRetryEvery,
		opts:    store.RedisCheckOptions{Prefix: sc.prefix(), AllowEviction: sc.AllowEviction},
		stopped: make(chan struct{}), done: make(chan struct{})}
	rep, err := w.check()
	var ev *store.EvictionError
	var pe *store.PermissionError
	if errors.As(err, &ev) || errors.As(err, &pe) {
		return nil, fmt.Errorf("store %s: %w", w.id, err)
	}
	next := w.recheck
	if err != nil {
		logger.Warn("could not check Redis at start within store_timeout: starting anyway, checking again in the background "+
			"(maxmemory-policy, persistence, ACL rights)", zap.String("store", w.id), zap.Duration("store_timeout", timeout), zap.Error(err))
		next = w.retry
	} else {
		w.started(rep)
	}
	go w.loop(next)
	return w, nil
}

// check runs store.CheckRedis once, bounded by the store timeout, and
// tells the store its server's version and, when the check reached every
// master, the report.
func (w *redisWatch) check() (store.RedisReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	rep, err := store.CheckRedis(ctx, w.c, w.opts)
	r, ok := w.store.(*store.Redis)
	if ok && rep.Major > 0 && len(rep.Masters) > 0 {
		r.UseServerVersion(rep.Major)
	}
	if ok && reachedAll(err) {
		r.SetChecked(rep)
	}
	return rep, err
}

// reachedAll tells whether a check that returned err read every master: it
// succeeded, or it found what it refuses (eviction, a missing right).
func reachedAll(err error) bool {
	var ev *store.EvictionError
	var pe *store.PermissionError
	return err == nil || errors.As(err, &ev) || errors.As(err, &pe)
}

// started logs what a first complete check found that is worth a word.
func (w *redisWatch) started(rep store.RedisReport) {
	w.last = &rep
	logPersistence(rep, w.id, w.logger)
	if ev := rep.Evicting(); len(ev) > 0 {
		w.logger.Warn("Redis may evict the gateway's records (allow_eviction): an evicted answer lets the platform's retry run the backend again",
			zap.String("store", w.id), zap.String("maxmemory_policy", ev[0].Policy), zap.Int64("maxmemory", ev[0].MaxMemory))
	}
}

// loop checks again after next, then every recheck, until close.
func (w *redisWatch) loop(next time.Duration) {
	defer close(w.done)
	t := time.NewTimer(next)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-w.stopped:
			return
		case <-t.C:
		}
		rep, err := w.check()
		var ev *store.EvictionError
		var pe *store.PermissionError
		if w.last != nil && reachedAll(err) {
			w.persistenceChanged(rep)
		}
		switch {
		case errors.As(err, &ev):
			// Found after the start (Redis unreachable then, or changed
			// since): as at start, the gateway does not claim on a Redis
			// that may evict its answers; claims fail closed until fixed.
			if w.last == nil || w.changed(rep) || !w.unfit {
				w.logger.Error("Redis no longer fits the gateway: claims are refused (503) until it is fixed: "+err.Error(),
					zap.String("store", w.id), zap.String("maxmemory_policy", ev.Masters[0].Policy))
			}
			w.setUnfit(err)
		case errors.As(err, &pe):
			if w.last == nil || w.changed(rep) {
				w.logger.Error("Redis no longer fits the gateway: "+err.Error(), zap.String("store", w.id))
			}
		case err != nil:
			if !failing {
				w.logger.Warn("could not check Redis; trying again", zap.String("store", w.id), zap.Error(err))
			}
			failing = true
			t.Reset(w.retry)
			continue
		case w.last == nil:
			w.logger.Info("Redis checked", zap.String("store", w.id))
			w.started(rep)
		case w.changed(rep):
			w.logger.Error("Redis settings changed under the gateway", zap.String("store", w.id),
				zap.Any("was", w.last.Masters), zap.Any("now", rep.Masters))
		}
		if err == nil && w.unfit {
			w.logger.Warn("Redis fits the gateway again: claims resume", zap.String("store", w.id))
			w.setUnfit(nil)
		}
		w.last = &rep
		failing = false
		t.Reset(w.recheck)
	}
}

// persistenceChanged logs what changed in rep's persistence since the
// last report: appendonly turned off is an error (an async route's acks
// then fail closed, delivery.Durability), on again a warning, another appendfsync
// a warning.
func (w *redisWatch) persistenceChanged(rep store.RedisReport) {
	was, now := addrSet(w.last.WithoutAOF()), addrSet(rep.WithoutAOF())
	var off, on []string
	for a := range now {
		if !was[a] {
			off = append(off, a)
		}
	}
	for a := range was {
		if !now[a] {
			on = append(on, a)
		}
	}
	slices.Sort(off)
	slices.Sort(on)
	if len(off) > 0 {
		w.logger.Error("Redis turned appendonly off: a Redis restart now loses what was written since its last snapshot; "+
			"async routes refuse their acks (503, the platform retries) until appendonly is yes again, "+
			"unless they accept losing acked notifications with durability volatile",
			zap.String("store", w.id), zap.Strings("masters", off), zap.String("appendonly", "no"))
	}
	if len(on) > 0 {
		w.logger.Warn("Redis has appendonly yes again: async routes' acks resume",
			zap.String("store", w.id), zap.Strings("masters", on))
	}
	_, wasF := w.last.SyncingLeast()
	if ms, f := rep.SyncingLeast(); f != wasF && f != "" && wasF != "" {
		w.logger.Warn("Redis appendfsync changed: "+async.FsyncMeaning(f), zap.String("store", w.id),
			zap.String("masters", store.Addrs(ms)), zap.String("was", wasF), zap.String("appendfsync", f))
	}
}

func addrSet(ms []store.RedisMaster) map[string]bool {
	s := make(map[string]bool, len(ms))
	for _, m := range ms {
		s[m.Addr] = true
	}
	return s
}

// setUnfit refuses (why != nil) or resumes the store's claims.
func (w *redisWatch) setUnfit(why error) {
	w.unfit = why != nil
	if r, ok := w.store.(*store.Redis); ok {
		r.SetUnfit(why)
	}
}

// changed: do rep's masters differ from the last report's in a way that
// matters (policy, memory limit, user, masters themselves)?
func (w *redisWatch) changed(rep store.RedisReport) bool {
	return !slices.EqualFunc(w.last.Masters, rep.Masters, func(a, b store.RedisMaster) bool {
		return a.Addr == b.Addr && a.Policy == b.Policy && a.MaxMemory == b.MaxMemory && a.User == b.User
	})
}

// Close stops the checks, then closes the client.
func (w *redisWatch) Close() error {
	w.stopOnce.Do(func() { close(w.stopped) })
	<-w.done
	return w.c.Close()
}

// logPersistence warns when the Redis server keeps nothing across its own
// restart: every claim and answer would then be lost with it. On a sync
// route a platform's retry after the restart runs the backend again; an
// async route's acked notifications would be lost outright, which is why
// such a route needs AOF (delivery.Durability) and says so itself.
func logPersistence(rep store.RedisReport, id string, logger *zap.Logger) {
	if rep.PersistenceErr != nil {
		logger.Warn("could not check Redis persistence", zap.String("store", id), zap.Error(rep.PersistenceErr))
		return
	}
	if !rep.Persistence.AOF && !rep.Persistence.RDB {
		logger.Warn("Redis has neither AOF nor RDB saving: a Redis restart forgets every claim and answer. "+
			"On a sync route the platforms' retries then reach the backend again, running what had already run; "+
			"an async route would lose its acked notifications outright (the platform never sends them again), "+
			"so it refuses this Redis unless it writes durability volatile. Turn on appendonly",
			zap.String("store", id))
	}
}
