package caddymodule

import (
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/registry"
)

// What this process's engine is doing with each key it holds, so the admin
// API can tell a queued notification waiting for its turn from one being
// sent now and one waiting to be retried. Only keys this instance took are
// known; on another instance's they read queued (or retrying, by their
// journal).

// maxKeyStates bounds the map: entries leave with their delivery, and a
// lease lost mid-way may leave one behind.
const maxKeyStates = 100_000

type keyStates struct {
	mu sync.Mutex
	m  map[string]registry.KeyDelivery
}

func (k *keyStates) set(key string, s registry.KeyDelivery) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil || len(k.m) >= maxKeyStates {
		k.m = map[string]registry.KeyDelivery{}
	}
	k.m[key] = s
}

func (k *keyStates) forget(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
}

func (e *engine) delivering(key string, attempt int) {
	e.states.set(key, registry.KeyDelivery{Delivering: true, Attempts: attempt - 1})
}

func (e *engine) retrying(key string, due time.Time, attempts int) {
	e.states.set(key, registry.KeyDelivery{NextAttempt: due, Attempts: attempts})
}

// KeyState is what this engine knows of key (registry.Engine).
func (e *engine) KeyState(key string) (registry.KeyDelivery, bool) {
	e.states.mu.Lock()
	defer e.states.mu.Unlock()
	s, ok := e.states.m[key]
	return s, ok
}
