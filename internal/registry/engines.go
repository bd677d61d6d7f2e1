package registry

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/cache"
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
	Queue() cache.Queue
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

// engines maps a scope to its running engine. On a reload the newer
// engine replaces the older one.
var engines sync.Map // scope → Engine

// RegisterEngine makes e the scope's running engine.
func RegisterEngine(e Engine) { engines.Store(e.Scope(), e) }

// UnregisterEngine removes e if it is still the scope's engine, and tells
// whether another engine runs the scope (a reload's newer one).
func UnregisterEngine(e Engine) (replaced bool) {
	engines.CompareAndDelete(e.Scope(), e)
	_, replaced = engines.Load(e.Scope())
	return replaced
}

// EngineOf returns the running engine of scope.
func EngineOf(scope string) (Engine, bool) {
	v, ok := engines.Load(scope)
	if !ok {
		return nil, false
	}
	return v.(Engine), true
}

// Engines returns the running engines, by scope.
func Engines() []Engine {
	var out []Engine
	engines.Range(func(_, v any) bool {
		out = append(out, v.(Engine))
		return true
	})
	slices.SortFunc(out, func(a, b Engine) int { return strings.Compare(a.Scope(), b.Scope()) })
	return out
}
