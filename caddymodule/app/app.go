package app

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func init() {
	caddy.RegisterModule(new(App))
}

// App is the `idempotency` app: the state one config's idempotency
// handlers share with the operator surfaces. It owns the config's routes
// by scope, its running delivery engines and the stores its handlers use,
// and it starts its handlers when the config runs.
//
// Caddy provisions every module for `caddy validate` too, and a handler
// has no Start of its own: what touches the outside world (opening the
// store, the async delivery engine, the certificate watch) waits for this
// app's Start, which Caddy calls only for a config it runs. It needs no
// configuration: handlers load it through ctx.App, as Caddy's
// acme_server handler loads the pki app, and the admin API and the
// console reach it the same way, as admin.api.pki reaches the pki app.
//
// Each config has its own app. A reload provisions and starts the new
// config's app before the old config's is stopped and cleaned up, so an
// operator surface always reads the app of the config it belongs to,
// and two configs' routes and engines never mix.
type App struct {
	// members are the config's handlers, in provision order. Caddy
	// provisions a config's modules, then starts its apps, one after the
	// other in one goroutine: members needs no lock.
	members []Member

	mu sync.RWMutex
	// routes holds every registered route of a scope, oldest first: the
	// newest answers for the scope, and dropping one (a failed
	// provision) leaves the others.
	routes map[string][]*Route
	// engines maps a scope to its running engine; a later engine of the
	// scope replaces an earlier one.
	engines map[string]Engine
	// stores are the references the config's handlers hold.
	stores []*StoreRef

	counts *MinuteCounts
	// pooled: counts come from the process's pool (Provision) and go
	// back to it (Cleanup).
	pooled bool
	// clock tells failed from dead; nil is time.Now. Tests move it while
	// the handlers' retry scans read it, hence atomic.
	clock atomic.Pointer[func() time.Time]
}

// Member is a handler of the config, which the app starts.
type Member interface {
	// Start opens what the handler needs and starts what runs beside its
	// requests; an error fails the config.
	Start() error
}

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "idempotency",
		New: func() caddy.Module { return new(App) },
	}
}

// New returns an app of no config: the state of a handler provisioned
// with a context that has no config (a unit test), which nothing starts
// (such a handler starts on its first request).
func New() *App {
	return &App{counts: newMinuteCounts()}
}

// countsPool holds the console's per-minute counts. They are the
// process's own view of its requests, and a `caddy reload` must not wipe
// the chart: the new config's app takes a reference before the old one's
// is released, so the same counts carry across every reload.
var countsPool = caddy.NewUsagePool()

const countsKey = "counts"

// Provision takes the process's counts.
func (a *App) Provision(caddy.Context) error {
	v, _, err := countsPool.LoadOrNew(countsKey, func() (caddy.Destructor, error) {
		return newMinuteCounts(), nil
	})
	if err != nil {
		return err
	}
	a.counts, a.pooled = v.(*MinuteCounts), true
	return nil
}

// Start starts every handler of the config.
func (a *App) Start() error {
	for _, m := range a.members {
		if err := m.Start(); err != nil {
			return err
		}
	}
	return nil
}

// Stop does nothing: each handler's Cleanup stops what it started, once
// the config that replaces this one runs.
func (a *App) Stop() error { return nil }

// Cleanup releases the counts.
func (a *App) Cleanup() error {
	if !a.pooled {
		return nil
	}
	a.pooled = false
	_, err := countsPool.Delete(countsKey)
	return err
}

// Join makes m one of the handlers Start starts.
func (a *App) Join(m Member) { a.members = append(a.members, m) }

// Members are the handlers that joined so far, in provision order.
func (a *App) Members() []Member { return a.members }

// Counts is the console's count of decisions by outcome, minute by
// minute.
func (a *App) Counts() *MinuteCounts { return a.counts }

// Now is the clock that tells failed from dead.
func (a *App) Now() time.Time {
	if f := a.clock.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// SetClock makes now the app's clock (tests); restore puts time.Now
// back.
func (a *App) SetClock(now func() time.Time) (restore func()) {
	a.clock.Store(&now)
	return func() { a.clock.Store(nil) }
}

// Running returns the app of the config Caddy runs now, if it has one:
// for what outlives one config (the process's metrics) or must know what
// replaced it (an engine stopped by a reload).
func Running() (*App, bool) {
	v, err := caddy.ActiveContext().AppIfConfigured("idempotency")
	if err != nil {
		return nil, false
	}
	a, ok := v.(*App)
	return a, ok
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
