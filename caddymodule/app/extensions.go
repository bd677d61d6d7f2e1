package app

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// The admin API and the console read a store's extensions through the
// store as handlers share it: each method here forwards to the store's
// own, or fails with store.ErrNoExtension naming what the store keeps not
// (every store of package store has them all; a test's wrapper may not).

// List forwards to the store's store.Lister.
func (p *Store) List(ctx context.Context, q store.ListQuery) (store.ListPage, error) {
	l, err := store.As[store.Lister](p.Store, "listings")
	if err != nil {
		return store.ListPage{}, err
	}
	return l.List(ctx, q)
}

// Reopen forwards to the store's store.Recovery.
func (p *Store) Reopen(ctx context.Context, key string, ttl time.Duration) error {
	rc, err := store.As[store.Recovery](p.Store, "recovery")
	if err != nil {
		return err
	}
	return rc.Reopen(ctx, key, ttl)
}

// Delete forwards to the store's store.Recovery.
func (p *Store) Delete(ctx context.Context, key string) error {
	rc, err := store.As[store.Recovery](p.Store, "recovery")
	if err != nil {
		return err
	}
	return rc.Delete(ctx, key)
}

// Order forwards to the store's store.OrderBook.
func (p *Store) Order(ctx context.Context, order string) (*store.Order, error) {
	ob, err := store.As[store.OrderBook](p.Store, "order state")
	if err != nil {
		return nil, err
	}
	return ob.Order(ctx, order)
}

// Orders forwards to the store's store.OrderIndex.
func (p *Store) Orders(ctx context.Context, names []string) ([]*store.Order, error) {
	ox, err := store.As[store.OrderIndex](p.Store, "order index")
	if err != nil {
		return nil, err
	}
	return ox.Orders(ctx, names)
}

// EventsByRef forwards to the store's store.OrderIndex.
func (p *Store) EventsByRef(ctx context.Context, scope string, settles keying.Settlement, refs []string) ([][]string, error) {
	ox, err := store.As[store.OrderIndex](p.Store, "order index")
	if err != nil {
		return nil, err
	}
	return ox.EventsByRef(ctx, scope, settles, refs)
}

// RanOn forwards to the store's store.OrderIndex.
func (p *Store) RanOn(ctx context.Context, q store.RanQuery) (store.RanPage, error) {
	ox, err := store.As[store.OrderIndex](p.Store, "order index")
	if err != nil {
		return store.RanPage{}, err
	}
	return ox.RanOn(ctx, q)
}

// KeysByRef forwards to the store's store.Searcher.
func (p *Store) KeysByRef(ctx context.Context, ref string) ([]string, error) {
	sr, err := store.As[store.Searcher](p.Store, "search index")
	if err != nil {
		return nil, err
	}
	return sr.KeysByRef(ctx, ref)
}

// Interface guards
var (
	_ store.Lister     = (*Store)(nil)
	_ store.Recovery   = (*Store)(nil)
	_ store.OrderBook  = (*Store)(nil)
	_ store.OrderIndex = (*Store)(nil)
	_ store.Searcher   = (*Store)(nil)
)
