package store

import "sync"

// notifier is the in-process wake-up board shared by the memory and embedded
// stores: both live in one process, so a completion can close the waiters'
// channels directly instead of going through the storage.
type notifier struct {
	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{}
}

type waiter struct {
	ch   chan struct{}
	once sync.Once
}

func (w *waiter) wake() { w.once.Do(func() { close(w.ch) }) }

func newNotifier() *notifier {
	return &notifier{waiters: make(map[string]map[*waiter]struct{})}
}

// wait registers a waiter for key. stop unregisters it; it is idempotent.
func (n *notifier) wait(key string) (<-chan struct{}, func()) {
	w := &waiter{ch: make(chan struct{})}
	n.mu.Lock()
	set := n.waiters[key]
	if set == nil {
		set = make(map[*waiter]struct{})
		n.waiters[key] = set
	}
	set[w] = struct{}{}
	n.mu.Unlock()
	stop := func() {
		n.mu.Lock()
		if set, ok := n.waiters[key]; ok {
			delete(set, w)
			if len(set) == 0 {
				delete(n.waiters, key)
			}
		}
		n.mu.Unlock()
	}
	return w.ch, stop
}

// wake closes every channel waiting on key.
func (n *notifier) wake(key string) {
	n.mu.Lock()
	set := n.waiters[key]
	delete(n.waiters, key)
	n.mu.Unlock()
	for w := range set {
		w.wake()
	}
}

// wakeAll closes every channel: on Close, so waiters re-check and see
// ErrClosed instead of hanging.
func (n *notifier) wakeAll() {
	n.mu.Lock()
	all := n.waiters
	n.waiters = make(map[string]map[*waiter]struct{})
	n.mu.Unlock()
	for _, set := range all {
		for w := range set {
			w.wake()
		}
	}
}
