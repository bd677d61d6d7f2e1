package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/store"
)

// POST /idempotency/reconcile?platform=…[&scope=…] with the platform's
// bill as the body: the reconcile package does the work; this reads the
// request, fills its Env from the running config and writes the report.

// reconcile serves POST /idempotency/reconcile.
func (a *AdminAPI) reconcile(w http.ResponseWriter, r *http.Request) error {
	opts, err := reconcile.ParseQuery(r.URL.Query())
	if err != nil {
		return asAPIError(err)
	}
	ps, err := a.pickStore(r)
	if err != nil {
		return err
	}
	// Caddy's admin server reads a request for at most 10s; a bill is
	// read while it is reconciled.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(reconcile.Timeout))
	ctx, cancel := context.WithTimeout(r.Context(), reconcile.Timeout)
	defer cancel()
	rep, err := a.svc.Reconcile(ctx, ps, opts, http.MaxBytesReader(w, r.Body, reconcile.MaxBillSize), r.RemoteAddr)
	if err != nil {
		return asAPIError(err)
	}
	return writeJSON(w, http.StatusOK, rep)
}

// ReconcileEnv is what a reconciliation against ps reads of the running
// config: the routes of a scope (platform, pinned merchants, their event),
// the app's clock and retry windows, the state rule (StateOf), and
// Caddy's storage for the pending-next-bill lists.
func ReconcileEnv(a *app.App, ps *app.Store) reconcile.Env {
	env := reconcile.Env{StoreID: ps.ID, Store: ps, Now: a.Now, WindowOf: a.WindowOf,
		StateOf: func(rec *store.Record) string { return StateOf(a, rec).State },
		Repair:  func(ctx context.Context, rec *store.Record) bool { return RepairOrderEvent(ctx, a, ps, rec) },
		Routes: func(scope string) []reconcile.Route {
			var out []reconcile.Route
			for _, r := range a.RoutesOf(scope) {
				name := platforms.Default
				if r.Platform != nil {
					name = r.Platform.Name()
				}
				out = append(out, reconcile.Route{Platform: name, Merchants: r.Merchants, Emit: r.Emit})
			}
			return out
		}}
	if s := activeStorage(); s != nil {
		env.Pending = s
	}
	return env
}

// activeStorage is the running config's storage, nil when none runs.
func activeStorage() (s certmagic.Storage) {
	c := caddy.ActiveContext()
	if c.Context == nil {
		return nil
	}
	defer func() {
		if recover() != nil {
			s = nil // a context without a config
		}
	}()
	return c.Storage()
}

// asAPIError gives a reconcile.Error its status.
func asAPIError(err error) error {
	var re *reconcile.Error
	if errors.As(err, &re) {
		return apiError(re.Status, re.Err)
	}
	return apiError(http.StatusServiceUnavailable, err)
}
