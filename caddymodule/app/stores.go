package app

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

// stores shares one store per configuration across handlers and config
// reloads, keyed by the configuration: a reload loads the new config
// (taking a reference) before the old one is cleaned up, so a Redis
// client or bbolt file is never reopened. Each config's app lists the
// references its handlers hold (App.UseStore).
var stores = caddy.NewUsagePool()

// Store is a loaded store as handlers share it. Its Settler keeps answers
// the store could not take yet; it lives as long as the store, across
// config reloads.
type Store struct {
	// ID names the store configuration for the admin API, the console and
	// logs; it holds no secret.
	ID string
	store.Store
	Settler *store.Settler
	// Client is what must be closed besides the store (the Redis client,
	// which the store does not own), or nil.
	Client io.Closer
}

// Destruct closes the store.
func (p *Store) Destruct() error {
	if n := p.Settler.Pending(); n > 0 {
		caddy.Log().Error("closing the idempotency store with answers it never took: their keys expire after lock_ttl",
			zap.String("store", p.ID), zap.Int("answers", n))
	}
	p.Settler.Close()
	err := p.Store.Close()
	if p.Client != nil {
		err = errors.Join(err, p.Client.Close())
	}
	return err
}

// Purge forgets key and drops its queued async delivery, if any, first
// (so no delivery engine takes it after the record is gone). It returns
// what became of that delivery: "removed", "being delivered" (it may still
// reach the backend), or "" when there was none.
func (p *Store) Purge(ctx context.Context, key string) (delivery string, err error) {
	if q, ok := p.Store.(store.Queuer); ok {
		scope, _, _ := strings.Cut(key, ":")
		switch err := q.Queue().Remove(ctx, scope, key); {
		case err == nil:
			delivery = "removed"
		case errors.Is(err, store.ErrNotOwner):
			delivery = "being delivered"
		case !errors.Is(err, store.ErrNotFound):
			return "", err
		}
	}
	return delivery, p.Delete(ctx, key)
}

// StoreRef is a handler's reference to a pooled store configuration. The
// store itself is opened by the first Open, when the config runs: a config
// that is only validated (`caddy validate` provisions every module) never
// takes the embedded file's lock nor dials Redis.
type StoreRef struct{ slot *storeSlot }

// storeSlot is a stores entry: one configuration, opened at most once.
type storeSlot struct {
	open   func() (*Store, error)
	mu     sync.Mutex
	store  atomic.Pointer[Store]
	closed bool
}

// Destruct closes the store, if it was opened, once its last handler is
// gone.
func (sl *storeSlot) Destruct() error {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.closed = true
	// Swapped out, so an app that still lists the slot finds it closed.
	if s := sl.store.Swap(nil); s != nil {
		return s.Destruct()
	}
	return nil
}

// LoadStore takes a reference to the store configuration pooled under
// poolKey (the whole resolved configuration, secrets included, so two
// configurations that differ only by a password do not share); open
// opens it, on the first Open of any reference. UnloadStore drops the
// reference.
func LoadStore(poolKey string, open func() (*Store, error)) (*StoreRef, error) {
	val, _, err := stores.LoadOrNew(poolKey, func() (caddy.Destructor, error) {
		return &storeSlot{open: open}, nil
	})
	if err != nil {
		return nil, err
	}
	return &StoreRef{slot: val.(*storeSlot)}, nil
}

// Open returns the store, opening it if no reference has yet. A failed
// open is tried again by the next Open.
func (r *StoreRef) Open() (*Store, error) {
	if s := r.slot.store.Load(); s != nil {
		return s, nil
	}
	r.slot.mu.Lock()
	defer r.slot.mu.Unlock()
	if s := r.slot.store.Load(); s != nil {
		return s, nil
	}
	if r.slot.closed {
		return nil, errors.New("store already closed")
	}
	s, err := r.slot.open()
	if err != nil {
		return nil, err
	}
	r.slot.store.Store(s)
	return s, nil
}

// UnloadStore drops one reference to the store pooled under poolKey; the
// last one closes it.
func UnloadStore(poolKey string) error {
	_, err := stores.Delete(poolKey)
	return err
}

// UseStore lists ref among the stores of the config: the admin API and
// the console find a store through the app of their config.
func (a *App) UseStore(ref *StoreRef) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stores = append(a.stores, ref)
}

// DropStore removes ref from the config's stores; its handler calls it
// when it is cleaned up.
func (a *App) DropStore(ref *StoreRef) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stores = slices.DeleteFunc(a.stores, func(r *StoreRef) bool { return r == ref })
}

// opened calls f for every store of the config that is open.
func (a *App) opened(f func(*Store) bool) {
	a.mu.RLock()
	refs := slices.Clone(a.stores)
	a.mu.RUnlock()
	for _, r := range refs {
		if s := r.slot.store.Load(); s != nil && !f(s) {
			return
		}
	}
}

// FindStore returns an open store by its id, or the only open store
// when id is "" and exactly one is open; ids lists every open store's
// id (sorted, once each). Two configurations that differ only by a secret
// share an id: either serves.
func (a *App) FindStore(id string) (found *Store, ids []string) {
	a.opened(func(ps *Store) bool {
		ids = append(ids, ps.ID)
		if found == nil && (ps.ID == id || id == "") {
			found = ps
		}
		return true
	})
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if id == "" && len(ids) != 1 {
		found = nil
	}
	return found, ids
}

// StoreIDs lists the open stores' ids, sorted, once each.
func (a *App) StoreIDs() []string {
	var ids []string
	a.opened(func(ps *Store) bool {
		ids = append(ids, ps.ID)
		return true
	})
	slices.Sort(ids)
	return slices.Compact(ids)
}
