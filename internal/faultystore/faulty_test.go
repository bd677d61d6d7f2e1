package faultystore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

var answer = store.Answer{Status: 200, Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte("success"), BodyCached: true}

func TestFaulty(t *testing.T) {
	ctx := context.Background()
	f := NewFaulty(store.NewMemory())
	defer f.Close()
	boom := errors.New("boom")

	won, err := f.Claim(ctx, "k", "", time.Minute)
	if err != nil || won.Outcome != store.Won {
		t.Fatalf("no rules: %+v %v", won, err)
	}

	f.SetFail(boom)
	if _, err := f.Claim(ctx, "k", "", time.Minute); !errors.Is(err, boom) {
		t.Fatalf("SetFail: %v", err)
	}
	if _, err := f.Lookup(ctx, "k"); !errors.Is(err, boom) {
		t.Fatalf("SetFail: %v", err)
	}
	f.SetFail(nil)
	if rec, err := f.Lookup(ctx, "k"); err != nil || rec.Copies != 1 {
		t.Fatalf("failed calls reached the store: %+v %v", rec, err)
	}

	f.SetFail(boom, OpComplete)
	if err := f.Complete(ctx, "k", won.Token, answer, time.Minute, store.Journal{}); !errors.Is(err, boom) {
		t.Fatalf("SetFail(complete): %v", err)
	}
	if _, err := f.Claim(ctx, "k", "", time.Minute); err != nil {
		t.Fatalf("claim faulted by a complete rule: %v", err)
	}
	f.SetFail(nil, OpComplete)

	f.FailNext(2, boom, OpClaim)
	for i := range 3 {
		_, err := f.Claim(ctx, "k", "", time.Minute)
		if (i < 2) != errors.Is(err, boom) {
			t.Fatalf("FailNext call %d: %v", i, err)
		}
	}

	// Fail after: the operation happens, the caller sees an error.
	f.SetFailAfter(boom, OpComplete)
	if err := f.Complete(ctx, "k", won.Token, answer, time.Minute, store.Journal{}); !errors.Is(err, boom) {
		t.Fatalf("SetFailAfter: %v", err)
	}
	f.SetFailAfter(nil, OpComplete)
	if rec, _ := f.Lookup(ctx, "k"); rec.State != store.StateAnswered {
		t.Fatalf("complete did not go through: %+v", rec)
	}

	// Latency honours the caller's deadline.
	f.SetLatency(time.Hour, OpLookup)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := f.Lookup(cctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("latency: %v", err)
	}
	f.Reset()
	if _, err := f.Lookup(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n := f.Calls(OpLookup); n != 1 {
		t.Fatalf("Calls after Reset: %d", n)
	}
	if f.Unwrap() == nil {
		t.Fatal("Unwrap")
	}
}
