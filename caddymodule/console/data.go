package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// consoleData is everything the console reads and does, behind one small
// interface: the pages never touch a store or the admin API directly, so a
// change in either is a change of this file alone.
type consoleData interface {
	// storeIDs are the loaded stores' ids, sorted.
	storeIDs() []string
	// list pages through one store's records in one state, newest first
	// (an async key in flight read whole when its state needs its
	// journal: admin.ListedRecord).
	list(ctx context.Context, storeID string, q store.ListQuery) ([]*store.Record, error)
	// lookup is one key's record with its journal.
	lookup(ctx context.Context, storeID, key string) (*store.Record, error)
	// order is one order's business events (admin.Service.Order).
	order(ctx context.Context, storeID, order string) (admin.OrderView, error)
	// stateOf is a record's state as operators see it (failed or dead;
	// an async key's queued, retrying or delivering).
	stateOf(rec *store.Record) admin.KeyState
	// purge forgets a key; an in-flight key only with force.
	purge(ctx context.Context, storeID, key string, force bool, logger *zap.Logger, remote string) error
	// search finds keys by a merchant's reference or key prefix (search.go).
	search(ctx context.Context, storeID, q string) (admin.SearchView, error)
	// redeliver sends the journaled notification through its route again
	// (an answered key only with force and again: see admin.Service.Redeliver).
	redeliver(ctx context.Context, storeID, key string, force, again bool, logger *zap.Logger, remote string) (admin.RedeliveryView, error)
}

// errConsoleStore: the store named is not loaded.
var errConsoleStore = errors.New("no such store is loaded")

// consoleError is an action refused with a status and a reason for the page.
type consoleError struct {
	status int
	msg    string
}

func (e *consoleError) Error() string { return e.msg }

// appData reads the stores of the config's idempotency handlers (its
// app) and acts through the admin operations (admin.Service), the ones
// the admin API's routes call.
type appData struct{ app *app.App }

// service is the admin operations on the app; logger takes the lines of
// the actions it runs.
func (d appData) service(logger *zap.Logger) *admin.Service { return admin.NewService(d.app, logger) }

// service is the admin operations, logging as the console.
func (c *Console) service() *admin.Service { return admin.NewService(c.app, c.logger) }

func (d appData) storeIDs() []string { return d.app.StoreIDs() }

func (d appData) store(id string) (*app.Store, error) {
	ps, _ := d.app.FindStore(id)
	if ps == nil {
		return nil, fmt.Errorf("%w: %q", errConsoleStore, id)
	}
	return ps, nil
}

func (d appData) list(ctx context.Context, storeID string, q store.ListQuery) ([]*store.Record, error) {
	ps, err := d.store(storeID)
	if err != nil {
		return nil, err
	}
	q.Window, q.Now = d.app.WindowOf, d.app.Now()
	page, err := ps.List(ctx, q)
	for i, rec := range page.Records {
		page.Records[i] = admin.ListedRecord(ctx, d.app, ps, rec)
	}
	return page.Records, err
}

func (d appData) lookup(ctx context.Context, storeID, key string) (*store.Record, error) {
	ps, err := d.store(storeID)
	if err != nil {
		return nil, err
	}
	return ps.Lookup(ctx, key)
}

func (d appData) order(ctx context.Context, storeID, order string) (admin.OrderView, error) {
	ps, err := d.store(storeID)
	if err != nil {
		return admin.OrderView{}, err
	}
	ov, err := d.service(nil).Order(ctx, ps, order)
	return ov, consoleErr(err)
}

func (d appData) stateOf(rec *store.Record) admin.KeyState { return admin.StateOf(d.app, rec) }

func (d appData) purge(ctx context.Context, storeID, key string, force bool, logger *zap.Logger, remote string) error {
	ps, err := d.store(storeID)
	if err != nil {
		return err
	}
	// The admin API's purge and its rule: an in-flight key is at the
	// backend now, and forgetting it lets the next copy run the backend a
	// second time.
	_, err = d.service(logger).Purge(ctx, ps, key, force, remote)
	return consoleErr(err)
}

// redeliver runs the admin API's redelivery (admin.Service.Redeliver),
// so its rules (no in-flight key, an answered key only with force and
// again, only whole notifications) stay in one place.
func (d appData) redeliver(ctx context.Context, storeID, key string, force, again bool, logger *zap.Logger, remote string) (admin.RedeliveryView, error) {
	ps, err := d.store(storeID)
	if err != nil {
		return admin.RedeliveryView{}, err
	}
	out, err := d.service(logger).Redeliver(ctx, ps, key, force, again, remote)
	return out, consoleErr(err)
}

// consoleErr turns an admin error into the console's, keeping its status.
func consoleErr(err error) error {
	var ae caddy.APIError
	if errors.As(err, &ae) && ae.Err != nil {
		return &consoleError{status: ae.HTTPStatus, msg: ae.Err.Error()}
	}
	return err
}

// pause is the console's pause/resume button (a POST that passed the
// console's cross-site checks).
func (c *Console) pause(ctx context.Context, w http.ResponseWriter, r *http.Request, v *consolePage) error {
	action := r.PostForm.Get("action")
	if action != "pause" && action != "resume" {
		return &consoleError{status: http.StatusBadRequest, msg: "action must be pause or resume"}
	}
	if _, err := c.service().SetPaused(ctx, r.PostForm.Get("scope"), action == "pause"); err != nil {
		return consoleErr(err)
	}
	http.Redirect(w, r, v.Base+"?"+url.Values{"note": {action + "d"}}.Encode(), http.StatusSeeOther)
	return nil
}

// decryptedResource returns the plaintext of a journaled encrypted
// notification, verified as its route verifies it (judged against its
// first receipt), or nil when there is none or it does not verify.
func decryptedResource(ctx context.Context, a *app.App, rec *store.Record) []byte {
	n := rec.Notification
	if n == nil || n.Truncated() {
		return nil
	}
	rt, ok := a.RouteOfKey(rec.Key)
	if !ok || rt.Platform == nil {
		return nil
	}
	u, err := url.ParseRequestURI(n.URI)
	if err != nil {
		return nil
	}
	got, err := rt.Platform.Verify(&keying.Request{Method: n.Method, URL: u, Header: n.Header.Clone(),
		Body: n.Body, Now: rec.FirstSeen, Context: ctx})
	if err != nil {
		return nil
	}
	return got.Decrypted
}
