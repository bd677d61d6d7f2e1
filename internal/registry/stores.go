package registry

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/cache"
)

// stores shares one store per configuration across handlers and config
// reloads: a reload loads the new config (taking a reference) before the
// old one is cleaned up, so a Redis client or bbolt file is never reopened.
var stores = caddy.NewUsagePool()

// Store is a loaded store as handlers share it. Its Settler keeps answers
// the store could not take yet; it lives as long as the store, across
// config reloads.
type Store struct {
	// ID names the store configuration for the admin API, the console and
	// logs; it holds no secret.
	ID string
	cache.Store
	Settler *cache.Settler
	// Client is what must be closed besides the store (the Redis client,
	// which the store does not own), or nil.
	Client io.Closer
}

// Destruct closes the store once its last handler is gone.
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
	if q, ok := p.Store.(cache.Queuer); ok {
		scope, _, _ := strings.Cut(key, ":")
		switch err := q.Queue().Remove(ctx, scope, key); {
		case err == nil:
			delivery = "removed"
		case errors.Is(err, cache.ErrNotOwner):
			delivery = "being delivered"
		case !errors.Is(err, cache.ErrNotFound):
			return "", err
		}
	}
	return delivery, p.Delete(ctx, key)
}

// LoadStore returns the store pooled under poolKey (the whole resolved
// configuration, secrets included, so two configurations that differ only
// by a password do not share), opening it with open on first use. Each
// call takes a reference that UnloadStore drops.
func LoadStore(poolKey string, open func() (*Store, error)) (*Store, error) {
	val, _, err := stores.LoadOrNew(poolKey, func() (caddy.Destructor, error) { return open() })
	if err != nil {
		return nil, err
	}
	return val.(*Store), nil
}

// UnloadStore drops one reference to the store pooled under poolKey; the
// last one closes it.
func UnloadStore(poolKey string) error {
	_, err := stores.Delete(poolKey)
	return err
}

// FindStore returns a loaded store by its id, or the only loaded store
// when id is "" and exactly one is loaded; ids lists every loaded store's
// id (sorted, once each). Two configurations that differ only by a secret
// share an id: either serves.
func FindStore(id string) (found *Store, ids []string) {
	stores.Range(func(_, v any) bool {
		ps := v.(*Store)
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

// StoreIDs lists the loaded stores' ids, sorted, once each.
func StoreIDs() []string {
	var ids []string
	stores.Range(func(_, v any) bool {
		ids = append(ids, v.(*Store).ID)
		return true
	})
	slices.Sort(ids)
	return slices.Compact(ids)
}
