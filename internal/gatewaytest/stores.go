package gatewaytest

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
)

// StoreLines returns the `store` line for each store a flow runs on: the
// memory store, an embedded file and a real redis-server started for t,
// with AOF as a gateway's Redis runs (an async route needs it).
func StoreLines(t *testing.T) map[string]string {
	t.Helper()
	rs := redistest.StartAOF(t)
	return map[string]string{
		"memory":   "store memory",
		"embedded": "store embedded " + filepath.Join(t.TempDir(), "keys.db"),
		"redis":    "store redis " + rs.Addr(),
	}
}

// EachStore runs f as a subtest per store of StoreLines.
func EachStore(t *testing.T, f func(t *testing.T, name, storeID string)) {
	t.Helper()
	for name, storeID := range StoreLines(t) {
		t.Run(name, func(t *testing.T) { f(t, name, storeID) })
	}
}

// App is the idempotency app of the config Caddy runs now.
func App(t testing.TB) *app.App {
	t.Helper()
	a, ok := app.Running()
	if !ok {
		t.Fatal("the running config has no idempotency app")
	}
	return a
}

// Record looks a key up in the only store of the running config; nil
// when it has no record.
func Record(t testing.TB, key string) *store.Record {
	t.Helper()
	ps, ids := App(t).FindStore("")
	if ps == nil {
		t.Fatalf("want one loaded store, have %v", ids)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := ps.Lookup(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("lookup %s: %v", key, err)
	}
	return rec
}

// WaitAnswered waits until key is answered in the only store of the
// running config.
func WaitAnswered(t testing.TB, within time.Duration, key string) *store.Record {
	t.Helper()
	var rec *store.Record
	Eventually(t, within, key+" to be answered", func() bool {
		rec = Record(t, key)
		return rec != nil && rec.State == store.StateAnswered
	})
	return rec
}
