package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The wait protocol runs in the claim suite (see suites), so every store
// is checked with it.
var waitCases = []storeCase[Store]{{"wait_answer", testWaitAnswer}}

func testWaitAnswer(t *testing.T, s Store) {
	ctx := ctxT(t)
	opts := func(d time.Duration) WaitOptions {
		return WaitOptions{Deadline: time.Now().Add(d), OpTimeout: 2 * time.Second, Recheck: 500 * time.Millisecond}
	}
	type got struct {
		rec *Record
		err error
	}
	waitWith := func(key string, o WaitOptions) <-chan got {
		ch := make(chan got, 1)
		go func() {
			rec, err := WaitAnswer(ctx, s, key, o)
			ch <- got{rec, err}
		}()
		return ch
	}
	wait := func(key string, d time.Duration) <-chan got { return waitWith(key, opts(d)) }
	recv := func(ch <-chan got, what string) got {
		t.Helper()
		select {
		case g := <-ch:
			return g
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: WaitAnswer did not return", what)
		}
		return got{}
	}

	// Answered while waiting: the record. The waiter claims first, as the
	// handler does (a completion wakes a key a claim found in flight).
	won := claim(t, s, "wa:complete", "", longTTL, Won)
	claim(t, s, "wa:complete", "", longTTL, InFlight)
	// No recheck within the wait: only the completion's wake-up ends it.
	ch := waitWith("wa:complete", WaitOptions{Deadline: time.Now().Add(10 * time.Second), OpTimeout: 2 * time.Second, Recheck: time.Minute})
	time.Sleep(100 * time.Millisecond) // let it subscribe; a completion before is found by its look-up anyway
	if err := s.Complete(ctx, "wa:complete", won.Token, answer, longTTL, Journal{}); err != nil {
		t.Fatal(err)
	}
	if g := recv(ch, "complete"); g.err != nil || g.rec == nil || g.rec.State != StateAnswered || g.rec.Status != answer.Status {
		t.Fatalf("complete: got %+v %v, want the answered record", g.rec, g.err)
	}

	// Already answered before the wait: the record at once.
	if g := recv(wait("wa:complete", 10*time.Second), "answered"); g.err != nil || g.rec == nil {
		t.Fatalf("answered: got %+v %v", g.rec, g.err)
	}

	// Released while waiting: nil, nil (the waiter may claim).
	won = claim(t, s, "wa:release", "", longTTL, Won)
	ch = wait("wa:release", 10*time.Second)
	time.Sleep(100 * time.Millisecond)
	if err := s.Release(ctx, "wa:release", won.Token, time.Hour, Journal{}); err != nil {
		t.Fatal(err)
	}
	if g := recv(ch, "release"); g.err != nil || g.rec != nil {
		t.Fatalf("release: got %+v %v, want nil, nil", g.rec, g.err)
	}

	// Still in flight at the deadline: ErrWaitTimeout, not before.
	claim(t, s, "wa:timeout", "", longTTL, Won)
	start := time.Now()
	g := recv(wait("wa:timeout", time.Second), "timeout")
	if !errors.Is(g.err, ErrWaitTimeout) || time.Since(start) < time.Second {
		t.Fatalf("timeout: got %v after %v, want ErrWaitTimeout after 1s", g.err, time.Since(start))
	}

	// The owner died: its claim expires without a wake-up; the recheck
	// finds the key free.
	claim(t, s, "wa:expire", "", 1500*time.Millisecond, Won)
	if g := recv(wait("wa:expire", 8*time.Second), "expire"); g.err != nil || g.rec != nil {
		t.Fatalf("expiry: got %+v %v, want nil, nil", g.rec, g.err)
	}

	// The request goes away: its own error, not a time-out.
	claim(t, s, "wa:cancel", "", longTTL, Won)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, err := WaitAnswer(cctx, s, "wa:cancel", opts(10*time.Second)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: got %v, want context.Canceled", err)
	}
}
