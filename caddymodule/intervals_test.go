package caddymodule

import (
	"sync"
	"testing"
	"time"
)

// The intervals of what runs beside the requests (the certificate expiry
// check, the retry scan, the Redis re-check) belong to their instance,
// built by the config Caddy loads with the production values. A test that
// needs them short sets them on its running instance and restarts its
// loop: nothing is changed for the rest of the process.

// rewatch restarts the watch of the running handler h with opts (its
// intervals: withExpiryCheckEvery, withRetryScanEvery).
func rewatch(t *testing.T, h *Handler, opts ...option) {
	t.Helper()
	h.run.mu.Lock()
	defer h.run.mu.Unlock()
	if !h.run.started.Load() || h.run.stopped {
		t.Fatal("rewatch: the handler is not running")
	}
	h.run.stopWatch()
	configure(h, opts...)
	h.startWatch()
}

// onlyHandler is the one idempotency handler of the running config.
func onlyHandler(t *testing.T) *Handler {
	t.Helper()
	hs := runningHandlers(t)
	if len(hs) != 1 {
		t.Fatalf("%d idempotency handlers running, want 1", len(hs))
	}
	return hs[0]
}

// recheckRedisEvery restarts the Redis watch of the running handlers'
// stores to check again every d.
func recheckRedisEvery(t *testing.T, d time.Duration) {
	t.Helper()
	seen := map[*redisWatch]bool{}
	for _, h := range runningHandlers(t) {
		ps, err := h.storeRef.Open()
		if err != nil {
			t.Fatal(err)
		}
		w, ok := ps.Client.(*redisWatch)
		if !ok || seen[w] {
			continue
		}
		seen[w] = true
		// Stopped and waited for, so the new loop is the only one to read
		// the watch; the store's Close stops the new one.
		w.stopOnce.Do(func() { close(w.stopped) })
		<-w.done
		w.recheck = d
		w.stopped, w.done, w.stopOnce = make(chan struct{}), make(chan struct{}), sync.Once{}
		go w.loop(d)
	}
	if len(seen) == 0 {
		t.Fatal("no Redis watch runs")
	}
}
