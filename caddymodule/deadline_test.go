package caddymodule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// TestStoreContextWithinSettlerTimeout: the deadline a completion gets
// from the default store_timeout ends within what the Settler takes as its
// own bound (its default OpTimeout, the same 2s), so a completion sets no
// second timer.
func TestStoreContextWithinSettlerTimeout(t *testing.T) {
	h := &Handler{}
	h.setDefaults()
	if time.Duration(h.StoreTimeout) != 2*time.Second {
		t.Fatalf("default store_timeout %v, this test assumes the Settler's default OpTimeout, 2s", time.Duration(h.StoreTimeout))
	}
	for range 200 {
		ctx, cancel := h.storeContext()
		dl, _ := ctx.Deadline()
		cancel()
		if left := time.Until(dl); left > 2*time.Second {
			t.Fatalf("a store call's deadline is %v away, past the Settler's 2s: each completion would set its own timer", left)
		}
	}
}

// TestStoreContext: every context ends no sooner than the time-out after
// its call started and no later than the time-out after it returned; it
// is done at its deadline, and not before.
func TestStoreContext(t *testing.T) {
	const timeout = 40 * time.Millisecond
	h := &Handler{StoreTimeout: caddy.Duration(timeout)}
	for range 2000 {
		start := time.Now()
		ctx, cancel := h.storeContext()
		end := time.Now()
		dl, ok := ctx.Deadline()
		cancel()
		if !ok {
			t.Fatal("no deadline")
		}
		if dl.Before(start.Add(timeout)) {
			t.Fatalf("deadline %v after the call's start, want at least %v", dl.Sub(start), timeout)
		}
		if dl.After(end.Add(timeout)) {
			t.Fatalf("deadline %v after the call, want at most %v", dl.Sub(end), timeout)
		}
	}
	ctx, cancel := h.storeContext()
	defer cancel()
	select {
	case <-ctx.Done():
		t.Fatal("done before its deadline")
	default:
	}
	select {
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("ended by %v, want the deadline", ctx.Err())
		}
	case <-time.After(timeout + time.Second):
		t.Fatal("never done")
	}
}
