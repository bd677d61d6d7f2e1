package delivery

import (
	"sync"
	"time"
)

// What this process's engine is doing with each key it holds, so the admin
// API can tell a queued notification waiting for its turn from one being
// sent now and one waiting to be retried. Only keys this instance took are
// known; on another instance's they read queued (or retrying, by their
// journal).

// maxKeyStates bounds the map: entries leave with their delivery, and a
// lease lost mid-way may leave one behind.
const maxKeyStates = 100_000

// KeyState is a queued key as its engine sees it.
type KeyState struct {
	// Delivering: an attempt is being sent to the backend now.
	Delivering bool
	// NextAttempt is when a failed delivery is tried again.
	NextAttempt time.Time
	Attempts    int
}

type keyStates struct {
	mu sync.Mutex
	m  map[string]KeyState
}

func (k *keyStates) set(key string, s KeyState) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil || len(k.m) >= maxKeyStates {
		k.m = map[string]KeyState{}
	}
	k.m[key] = s
}

func (k *keyStates) forget(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
}

func (e *Engine) delivering(key string, attempt int) {
	e.states.set(key, KeyState{Delivering: true, Attempts: attempt - 1})
}

func (e *Engine) retrying(key string, due time.Time, attempts int) {
	e.states.set(key, KeyState{NextAttempt: due, Attempts: attempts})
}

// KeyState is what this engine knows of key, if it holds it: being sent
// now, or waiting for its next attempt.
func (e *Engine) KeyState(key string) (KeyState, bool) {
	e.states.mu.Lock()
	defer e.states.mu.Unlock()
	s, ok := e.states.m[key]
	return s, ok
}
