package caddymodule

import (
	"context"
	"time"
)

// storeContext bounds one store call of the request path (the claim, the
// completion) by store_timeout. It carries neither the request's values
// nor its cancellation: a store call that was sent learns its outcome
// even when the platform has hung up (the claim of a copy whose platform
// left is still the key's claim, and its backend answer is still
// remembered for the retry).
func (h *Handler) storeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(h.StoreTimeout))
}
