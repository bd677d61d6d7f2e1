package caddymodule

import (
	"testing"
	"time"
)

// TestStoreContextWithinSettlerTimeout: the deadline a completion gets
// from the default store_timeout ends within what the Settler takes as its
// own bound (its default OpTimeout, the same 2s), so a completion sets no
// second timer.
func TestStoreContextWithinSettlerTimeout(t *testing.T) {
	h := &Handler{}
	h.setDefaults()
	if time.Duration(h.StoreTimeout) != 2*time.Second {
		t.Fatalf("default store_timeout %v, the Settler's default OpTimeout is 2s: each completion would set its own timer", time.Duration(h.StoreTimeout))
	}
}
