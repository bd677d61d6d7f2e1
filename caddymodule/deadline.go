package caddymodule

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/gate"
)

// storeContext bounds one store call of the request path by
// store_timeout, as the gate bounds its claims and completions
// (gate.StoreContext: neither the request's values nor its cancellation).
func (h *Handler) storeContext() (context.Context, context.CancelFunc) {
	return gate.StoreContext(time.Duration(h.StoreTimeout))
}
