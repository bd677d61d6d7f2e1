package caddymodule

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/cache"
)

// TestDeadlinesWithinSettlerSlack: the deadline a completion gets from the
// default store_timeout ends within what the Settler takes as its own
// bound (cache.DeadlineSlack past its default OpTimeout, the same 2s),
// so a completion sets no second timer.
func TestDeadlinesWithinSettlerSlack(t *testing.T) {
	h := &Handler{}
	h.setDefaults()
	if time.Duration(h.StoreTimeout) != 2*time.Second {
		t.Fatalf("default store_timeout %v, this test assumes the Settler's default OpTimeout, 2s", time.Duration(h.StoreTimeout))
	}
	for range 200 {
		dl, _ := h.storeDeadlines.context().Deadline()
		if left := time.Until(dl); left > 2*time.Second+cache.DeadlineSlack {
			t.Fatalf("a store call's deadline is %v away, past the Settler's 2s + %v: each completion would set its own timer",
				left, cache.DeadlineSlack)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDeadlines: every context ends no sooner than the time-out after its
// call started and less than a grain after that; calls within a grain
// share one; a context past its deadline is done.
func TestDeadlines(t *testing.T) {
	const timeout = 40 * time.Millisecond
	d := newDeadlines(timeout)
	var mu sync.Mutex
	seen := map[context.Context]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				start := time.Now()
				ctx := d.context()
				end := time.Now()
				dl, ok := ctx.Deadline()
				if !ok {
					t.Error("no deadline")
					return
				}
				if dl.Before(start.Add(timeout)) {
					t.Errorf("deadline %v after the call's start, want at least %v", dl.Sub(start), timeout)
					return
				}
				if dl.After(end.Add(timeout + deadlineGrain)) {
					t.Errorf("deadline %v after the call, want at most %v", dl.Sub(end), timeout+deadlineGrain)
					return
				}
				mu.Lock()
				seen[ctx] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) >= 16000 {
		t.Errorf("%d contexts for 16000 calls: none shared", len(seen))
	}
	ctx := d.context()
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
	case <-time.After(timeout + deadlineGrain + time.Second):
		t.Fatal("never done")
	}
	if d.context() == ctx {
		t.Error("a call after the deadline got the ended context")
	}
}
