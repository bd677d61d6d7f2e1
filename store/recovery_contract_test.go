package store

import (
	"errors"
	"testing"
	"time"
)

// recoveryStore is what the recovery suite checks: the claim contract,
// which makes the keys, and Recovery, which overrules it.
type recoveryStore interface {
	Store
	Recovery
}

func init() { suites = append(suites, newSuite("recovery", "recovery", recoveryCases)) }

var recoveryCases = []storeCase[recoveryStore]{
	{"delete_wakes", func(t *testing.T, s recoveryStore) {
		ctx := ctxT(t)
		waitWakes(t, s, "delete", func(k, _ string) error { return s.Delete(ctx, k) })
	}},
	{"delete", func(t *testing.T, s recoveryStore) {
		ctx := ctxT(t)
		won := claim(t, s, "k", "", longTTL, Won)
		if err := s.Complete(ctx, "k", won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "k"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := s.Lookup(ctx, "k"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Lookup after Delete: %v", err)
		}
		if err := s.Delete(ctx, "k"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second Delete: %v", err)
		}
		won = claim(t, s, "k", "", longTTL, Won)   // forwarded again
		if err := s.Delete(ctx, "k"); err != nil { // in flight: purged too
			t.Fatal(err)
		}
		if err := s.Complete(ctx, "k", won.Token, answer, longTTL, Journal{}); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Complete after purge: %v", err)
		}
	}},
	{"delete_after_renewed_claim_ran_out", func(t *testing.T, s recoveryStore) {
		// Found by the linearizability check: a renewal with a shorter lock
		// TTL leaves the Redis hash alive past the claim's end. Once the
		// claim ran out, Delete finds nothing, as Lookup and Claim see it.
		ctx := ctxT(t)
		won := claim(t, s, "k", "", longTTL, Won)
		if err := s.Renew(ctx, "k", won.Token, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		if _, err := s.Lookup(ctx, "k"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Lookup after the claim ran out: %v", err)
		}
		if err := s.Delete(ctx, "k"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Delete after the claim ran out: %v, want ErrNotFound", err)
		}
		claim(t, s, "k", "", longTTL, Won)
	}},
}
