package app

import (
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Engine is a running `deliver async` engine of one scope, as the admin
// API and the console use it.
type Engine interface {
	// Scope is the scope whose queue the engine delivers.
	Scope() string
	// Platform names the route's platform.
	Platform() string
	// Target is the backend's URL, without credentials.
	Target() string
	// Queue is the store's delivery queue.
	Queue() store.Queue
	// Poke wakes a worker: deliveries may be due (after a resume).
	Poke()
	// KeyState is what this process's engine is doing with key, if it
	// holds it: being sent now, or waiting for its next attempt.
	KeyState(key string) (KeyDelivery, bool)
}

// KeyDelivery is a queued key as its engine sees it.
type KeyDelivery struct {
	// Delivering: an attempt is being sent to the backend now.
	Delivering bool
	// NextAttempt is when a failed delivery is tried again.
	NextAttempt time.Time
	Attempts    int
}

// AddEngine makes e the scope's running engine.
func (a *App) AddEngine(e Engine) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.engines == nil {
		a.engines = map[string]Engine{}
	}
	a.engines[e.Scope()] = e
}

// RemoveEngine removes e if it is still the scope's engine, and tells
// whether another engine of the config runs the scope.
func (a *App) RemoveEngine(e Engine) (others bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.engines[e.Scope()] == e {
		delete(a.engines, e.Scope())
	}
	_, others = a.engines[e.Scope()]
	return others
}

// EngineOf returns the running engine of scope.
func (a *App) EngineOf(scope string) (Engine, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	e, ok := a.engines[scope]
	return e, ok
}

// Engines returns the running engines, by scope.
func (a *App) Engines() []Engine {
	a.mu.RLock()
	out := make([]Engine, 0, len(a.engines))
	for _, e := range a.engines {
		out = append(out, e)
	}
	a.mu.RUnlock()
	slices.SortFunc(out, func(a, b Engine) int { return strings.Compare(a.Scope(), b.Scope()) })
	return out
}
