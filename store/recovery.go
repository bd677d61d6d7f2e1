package store

import (
	"context"
	"time"
)

// Recovery is what an operator does to a key the platform will not make
// right by itself: force its redelivery (Reopen) or purge it (Delete). It
// is apart from Store because the request path never overrules a claim:
// these act whatever the key's owner token, and only the admin API, the
// console and the CLI call them.
type Recovery interface {
	// Reopen turns an answered key failed (an operator's forced
	// redelivery): its answer is dropped, its event forgotten in its order,
	// the key is free — the next Claim wins — and its history (copies,
	// notification, attempts) stays, for at least ttl. ErrNotFound if key
	// has no answered record.
	Reopen(ctx context.Context, key string, ttl time.Duration) error

	// Delete forgets key whatever its state (the admin purge), and its
	// event in its order, and wakes its waiters. ErrNotFound if there was
	// neither.
	Delete(ctx context.Context, key string) error
}

// Interface guards
var (
	_ Recovery = (*Memory)(nil)
	_ Recovery = (*Embedded)(nil)
	_ Recovery = (*Redis)(nil)
)
