package reconcile

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/store"
)

// What a reconciliation is given besides the bill. The package knows no
// server: its caller (the admin API, the console) fills an Env from the
// running configuration.

// Store is what a reconciliation reads of a store: the order index, the
// records and their listing.
type Store interface {
	store.OrderIndex
	Lookup(ctx context.Context, key string) (*store.Record, error)
	List(ctx context.Context, q store.ListQuery) (store.ListPage, error)
}

// Route is a loaded route of the bill's scope, as a reconciliation sees
// it.
type Route struct {
	// Platform is the route's platform's name (platforms.Default when it
	// names none).
	Platform string
	// Merchants are its pinned merchants (Alipay app_id, WeChat Pay mchid).
	Merchants []string
	// Emit sends idempotency.reconcile as the route sends its events; nil
	// when it has no handler.
	Emit func(name string, data map[string]any)
}

// PendingStore keeps the pending-next-bill lists (see pending.go), one
// small blob a name. Load answers an error wrapping fs.ErrNotExist for a
// name never stored. Caddy's certmagic.Storage is one.
type PendingStore interface {
	Load(ctx context.Context, name string) ([]byte, error)
	Store(ctx context.Context, name string, value []byte) error
}

// Env is the store and the configuration a bill is reconciled against.
type Env struct {
	// StoreID names the store in the report and its errors.
	StoreID string
	Store   Store
	// Routes are the loaded routes of a scope, in the order they were
	// loaded; nil: none.
	Routes func(scope string) []Route
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// WindowOf is the retry window of a full key's scope (0: never dead);
	// nil: 0 for every key.
	WindowOf func(key string) time.Duration
	// StateOf names a record's state as every operator surface does (an
	// async key's queued, retrying or delivering); nil: the record's
	// state at Now by WindowOf.
	StateOf func(rec *store.Record) string
	// Pending keeps the pending lists across bills; nil: they are not
	// carried to the next bill's reconciliation.
	Pending PendingStore
	// Repair writes an answered record's business event back into its
	// order where the order lacks it (store.OrderRepairer, with what the
	// record's route's settle writes); nil: the look-up only reads.
	Repair func(ctx context.Context, rec *store.Record) (repaired bool)
}

func (e *Env) now() time.Time {
	if e.Now == nil {
		return time.Now()
	}
	return e.Now()
}

func (e *Env) windowOf(key string) time.Duration {
	if e.WindowOf == nil {
		return 0
	}
	return e.WindowOf(key)
}

func (e *Env) stateOf(rec *store.Record) string {
	if e.StateOf == nil {
		return string(rec.StateAt(e.now(), e.windowOf(rec.Key)))
	}
	return e.StateOf(rec)
}

func (e *Env) routes(scope string) []Route {
	if e.Routes == nil {
		return nil
	}
	return e.Routes(scope)
}
