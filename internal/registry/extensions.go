package registry

import (
	"context"

	"github.com/idemgate/idemgate/cache"
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

// Interface guards
var (
	_ cache.Lister = (*Store)(nil)
)
