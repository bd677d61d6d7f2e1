package caddymodule

import (
	"time"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/orders"
)

// Orders (package orders) attach to the route here, as the gate's
// Route.OrderRun (serve.go); the replay decision is orders.AcceptsAnswer
// (replay.go), and order_ttl's default and check are the handler's
// (handler.go).

// orderRun is what key's order remembers once it ran (orders.RunOf).
func (h *Handler) orderRun(key string, n *keying.Notification) *cache.OrderRun {
	return orders.RunOf(h.preset(), time.Duration(h.OrderTTL), key, n)
}
