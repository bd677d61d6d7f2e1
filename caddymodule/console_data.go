package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/cache"
)

// consoleData is everything the console reads and does, behind one small
// interface: the pages never touch a store or the admin API directly, so a
// change in either is a change of this file alone.
type consoleData interface {
	// storeIDs are the loaded stores' ids, sorted.
	storeIDs() []string
	// list pages through one store's records in one state, newest first.
	list(ctx context.Context, store string, q cache.ListQuery) ([]*cache.Record, error)
	// lookup is one key's record with its journal.
	lookup(ctx context.Context, store, key string) (*cache.Record, error)
	// stateOf is a record's state as operators see it (failed or dead).
	stateOf(rec *cache.Record) cache.State
	// purge forgets a key; an in-flight key only with force.
	purge(ctx context.Context, store, key string, force bool, logger *zap.Logger, remote string) error
	// redeliver sends the journaled notification through its route again.
	redeliver(ctx context.Context, store, key string, force bool, logger *zap.Logger, remote string) (redeliveryView, error)
}

// errConsoleStore: the store named is not loaded.
var errConsoleStore = errors.New("no such store is loaded")

// consoleError is an action refused with a status and a reason for the page.
type consoleError struct {
	status int
	msg    string
}

func (e *consoleError) Error() string { return e.msg }

// poolData reads the stores loaded by idempotency handlers in this process
// (the stores pool) and acts through the admin API's own code paths.
type poolData struct{}

func (poolData) storeIDs() []string {
	_, ids := findStore("")
	slices.Sort(ids)
	return slices.Compact(ids)
}

func (poolData) store(id string) (*pooledStore, error) {
	ps, _ := findStore(id)
	if ps == nil {
		return nil, fmt.Errorf("%w: %q", errConsoleStore, id)
	}
	return ps, nil
}

func (d poolData) list(ctx context.Context, store string, q cache.ListQuery) ([]*cache.Record, error) {
	ps, err := d.store(store)
	if err != nil {
		return nil, err
	}
	q.Window, q.Now = windowOf, journalNow()
	page, err := ps.List(ctx, q)
	return page.Records, err
}

func (d poolData) lookup(ctx context.Context, store, key string) (*cache.Record, error) {
	ps, err := d.store(store)
	if err != nil {
		return nil, err
	}
	return ps.Lookup(ctx, key)
}

func (poolData) stateOf(rec *cache.Record) cache.State {
	return rec.StateAt(journalNow(), windowOf(rec.Key))
}

func (d poolData) purge(ctx context.Context, store, key string, force bool, logger *zap.Logger, remote string) error {
	ps, err := d.store(store)
	if err != nil {
		return err
	}
	// The admin API's rule: an in-flight key is at the backend now, and
	// forgetting it lets the next copy run the backend a second time.
	rec, err := ps.Lookup(ctx, key)
	if err == nil && rec.State == cache.StateInFlight && !force {
		return &consoleError{http.StatusConflict, "this key is in flight: its first copy is at the backend now, and " +
			"forgetting it lets the next copy run the backend a second time; purge with force only if the gateway that holds it is gone"}
	}
	if _, err := ps.purge(ctx, key); err != nil {
		return err
	}
	if logger != nil {
		logger.Info("idempotency key purged through the console: its next copy will be forwarded",
			zap.String("store", ps.id), zap.String("key", hashKey(key)), zap.String("remote", remote))
	}
	return nil
}

// redeliver runs the admin API's redelivery (AdminAPI.redeliver) in
// process, so its rules (no in-flight key, an answered key only with
// force, only whole notifications) stay in one place.
func (d poolData) redeliver(ctx context.Context, store, key string, force bool, logger *zap.Logger, remote string) (redeliveryView, error) {
	var out redeliveryView
	q := url.Values{"store": {store}}
	if force {
		q.Set("force", "1")
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/idempotency/keys/"+url.PathEscape(key)+"/redeliver?"+q.Encode(), nil)
	if err != nil {
		return out, err
	}
	r.RemoteAddr = remote
	rec := &bufferWriter{header: http.Header{}}
	a := &AdminAPI{logger: logger}
	if err := a.redeliver(rec, r, key); err != nil {
		var apiErr caddy.APIError
		if errors.As(err, &apiErr) {
			return out, &consoleError{apiErr.HTTPStatus, apiErr.Err.Error()}
		}
		return out, err
	}
	if err := json.Unmarshal(rec.body.Bytes(), &out); err != nil {
		return out, fmt.Errorf("reading the redelivery's answer: %v", err)
	}
	return out, nil
}

// bufferWriter takes the admin API's JSON answer in process.
type bufferWriter struct {
	header http.Header
	body   bytes.Buffer
	status int
}

func (b *bufferWriter) Header() http.Header         { return b.header }
func (b *bufferWriter) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferWriter) WriteHeader(status int)      { b.status = status }
