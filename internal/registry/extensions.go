package registry

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/keying"
)

// The admin API and the console read a store's extensions through the
// store as handlers share it: each method here forwards to the store's
// own, or fails with cache.ErrNoExtension naming what the store keeps not
// (every store of package cache has them all; a test's wrapper may not).

// List forwards to the store's cache.Lister.
func (p *Store) List(ctx context.Context, q cache.ListQuery) (cache.ListPage, error) {
	l, err := cache.As[cache.Lister](p.Store, "listings")
	if err != nil {
		return cache.ListPage{}, err
	}
	return l.List(ctx, q)
}

// Reopen forwards to the store's cache.Recovery.
func (p *Store) Reopen(ctx context.Context, key string, ttl time.Duration) error {
	rc, err := cache.As[cache.Recovery](p.Store, "recovery")
	if err != nil {
		return err
	}
	return rc.Reopen(ctx, key, ttl)
}

// Delete forwards to the store's cache.Recovery.
func (p *Store) Delete(ctx context.Context, key string) error {
	rc, err := cache.As[cache.Recovery](p.Store, "recovery")
	if err != nil {
		return err
	}
	return rc.Delete(ctx, key)
}

// Order forwards to the store's cache.OrderBook.
func (p *Store) Order(ctx context.Context, order string) (*cache.Order, error) {
	ob, err := cache.As[cache.OrderBook](p.Store, "order state")
	if err != nil {
		return nil, err
	}
	return ob.Order(ctx, order)
}

// Orders forwards to the store's cache.OrderIndex.
func (p *Store) Orders(ctx context.Context, names []string) ([]*cache.Order, error) {
	ox, err := cache.As[cache.OrderIndex](p.Store, "order index")
	if err != nil {
		return nil, err
	}
	return ox.Orders(ctx, names)
}

// EventsByRef forwards to the store's cache.OrderIndex.
func (p *Store) EventsByRef(ctx context.Context, scope string, settles keying.Settlement, refs []string) ([][]string, error) {
	ox, err := cache.As[cache.OrderIndex](p.Store, "order index")
	if err != nil {
		return nil, err
	}
	return ox.EventsByRef(ctx, scope, settles, refs)
}

// RanOn forwards to the store's cache.OrderIndex.
func (p *Store) RanOn(ctx context.Context, q cache.RanQuery) (cache.RanPage, error) {
	ox, err := cache.As[cache.OrderIndex](p.Store, "order index")
	if err != nil {
		return cache.RanPage{}, err
	}
	return ox.RanOn(ctx, q)
}

// KeysByRef forwards to the store's cache.Searcher.
func (p *Store) KeysByRef(ctx context.Context, ref string) ([]string, error) {
	sr, err := cache.As[cache.Searcher](p.Store, "search index")
	if err != nil {
		return nil, err
	}
	return sr.KeysByRef(ctx, ref)
}

// Interface guards
var (
	_ cache.Lister     = (*Store)(nil)
	_ cache.Recovery   = (*Store)(nil)
	_ cache.OrderBook  = (*Store)(nil)
	_ cache.OrderIndex = (*Store)(nil)
	_ cache.Searcher   = (*Store)(nil)
)
