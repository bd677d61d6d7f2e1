package store_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/faultystore"
	"github.com/idemgate/idemgate/store"
)

// TestSettlerKeepsAndRetries: a completion that fails is kept, served by
// Kept, retried until the store takes it, and reported once.
func TestSettlerKeepsAndRetries(t *testing.T) {
	f := faultystore.NewFaulty(store.NewMemory())
	st := store.NewSettler(f, store.SettlerOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	defer st.Close()
	ctx := context.Background()
	won, err := f.Claim(ctx, "k", "fp", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("store down")
	f.SetFail(boom, faultystore.OpComplete, faultystore.OpLookup)
	done := make(chan error, 1)
	err = st.Complete(ctx, "k", won.Token, "fp", answer, time.Hour, store.Journal{}, func(err error) { done <- err })
	if !errors.Is(err, store.ErrKept) {
		t.Fatalf("Complete with the store down = %v, want store.ErrKept", err)
	}
	rec := st.Kept("k")
	if rec == nil || rec.Status != answer.Status || string(rec.Body) != string(answer.Body) || rec.Fingerprint != "fp" {
		t.Fatalf("Kept = %+v, want the answer", rec)
	}
	if st.Kept("other") != nil {
		t.Fatal("Kept answers a key it does not hold")
	}
	time.Sleep(100 * time.Millisecond)
	if n := f.Calls(faultystore.OpComplete); n < 2 {
		t.Fatalf("completion tried %d times in 100ms, want retries", n)
	}
	f.Reset()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("done(%v), want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the kept answer was never settled")
	}
	if st.Kept("k") != nil || st.Pending() != 0 {
		t.Fatal("answer still kept after it was settled")
	}
	got, err := f.Lookup(ctx, "k")
	if err != nil || got.State != store.StateAnswered || got.Status != answer.Status {
		t.Fatalf("store has %+v %v, want the answer", got, err)
	}
}

// TestSettlerAppliedButUnacknowledged: an attempt that the store applied
// but whose reply was lost is recognised on the next one, not reported as
// a lost claim.
func TestSettlerAppliedButUnacknowledged(t *testing.T) {
	f := faultystore.NewFaulty(store.NewMemory())
	st := store.NewSettler(f, store.SettlerOptions{MinBackoff: 10 * time.Millisecond})
	defer st.Close()
	ctx := context.Background()
	won, _ := f.Claim(ctx, "k", "", time.Minute)
	f.SetFailAfter(errors.New("reply lost"), faultystore.OpComplete)
	done := make(chan error, 1)
	if err := st.Complete(ctx, "k", won.Token, "", answer, time.Hour, store.Journal{}, func(err error) { done <- err }); !errors.Is(err, store.ErrKept) {
		t.Fatalf("Complete = %v, want store.ErrKept", err)
	}
	f.Reset()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("done(%v), want nil: the first attempt had stored the answer", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("never settled")
	}
}

// TestSettlerLostClaim: when the claim is gone meanwhile (expired, taken by
// another request), the retry ends with store.ErrNotOwner and the answer is
// dropped.
func TestSettlerLostClaim(t *testing.T) {
	f := faultystore.NewFaulty(store.NewMemory())
	st := store.NewSettler(f, store.SettlerOptions{MinBackoff: 10 * time.Millisecond})
	defer st.Close()
	ctx := context.Background()
	won, _ := f.Claim(ctx, "k", "", time.Minute)
	f.SetFail(errors.New("down"), faultystore.OpComplete)
	done := make(chan error, 1)
	if err := st.Complete(ctx, "k", won.Token, "", answer, time.Hour, store.Journal{}, func(err error) { done <- err }); !errors.Is(err, store.ErrKept) {
		t.Fatalf("Complete = %v, want store.ErrKept", err)
	}
	if err := f.Delete(ctx, "k"); err != nil { // an operator purged it
		t.Fatal(err)
	}
	f.Reset()
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrNotOwner) {
			t.Fatalf("done(%v), want store.ErrNotOwner", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("never ended")
	}
	if st.Kept("k") != nil {
		t.Fatal("a lost answer is still kept")
	}
}

// TestSettlerClose: Close ends the retries with store.ErrClosed and waits for them.
func TestSettlerClose(t *testing.T) {
	f := faultystore.NewFaulty(store.NewMemory())
	st := store.NewSettler(f, store.SettlerOptions{MinBackoff: 10 * time.Millisecond})
	won, _ := f.Claim(context.Background(), "k", "", time.Minute)
	f.SetFail(errors.New("down"), faultystore.OpComplete)
	done := make(chan error, 1)
	_ = st.Complete(context.Background(), "k", won.Token, "", answer, time.Hour, store.Journal{}, func(err error) { done <- err })
	st.Close()
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrClosed) {
			t.Fatalf("done(%v), want store.ErrClosed", err)
		}
	default:
		t.Fatal("Close returned before the retry ended")
	}
}

// TestSettlerLocal: a duplicate waits for the copy at the backend from
// this process, and only for that.
func TestSettlerLocal(t *testing.T) {
	st := store.NewSettler(store.NewMemory(), store.SettlerOptions{})
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st.AwaitLocal(ctx, "k") {
		t.Fatal("AwaitLocal found a copy nobody marked")
	}
	settled := st.Local("k")
	done := make(chan bool)
	go func() { done <- st.AwaitLocal(ctx, "k") }()
	select {
	case <-done:
		t.Fatal("AwaitLocal returned before the local copy settled")
	case <-time.After(100 * time.Millisecond):
	}
	settled.Settled()
	if !<-done {
		t.Fatal("AwaitLocal = false after the local copy settled")
	}
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	defer st.Local("k2").Settled()
	if st.AwaitLocal(short, "k2") {
		t.Fatal("AwaitLocal = true when its context ended first")
	}
}

// TestSettlerLocalAgain: a key marked again before its first copy settled
// (a claim of this process that ran out while at the backend, won again):
// a duplicate that waits for the first copy wakes when that one settles,
// and one that waits after the second mark, when the second does.
func TestSettlerLocalAgain(t *testing.T) {
	st := store.NewSettler(store.NewMemory(), store.SettlerOptions{})
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	await := func() chan bool {
		done := make(chan bool, 1)
		waiting := make(chan struct{})
		go func() { close(waiting); done <- st.AwaitLocal(ctx, "k") }()
		<-waiting
		time.Sleep(50 * time.Millisecond) // let it reach its wait
		return done
	}
	pending := func(done chan bool, who string) {
		t.Helper()
		select {
		case <-done:
			t.Fatalf("%s woke before its copy settled", who)
		case <-time.After(50 * time.Millisecond):
		}
	}
	first := st.Local("k")
	onFirst := await()
	second := st.Local("k")
	onSecond := await()
	second.Settled()
	if !<-onSecond {
		t.Fatal("the duplicate waiting for the second copy: AwaitLocal = false after it settled")
	}
	pending(onFirst, "the duplicate waiting for the first copy")
	first.Settled()
	if !<-onFirst {
		t.Fatal("the duplicate waiting for the first copy: AwaitLocal = false after it settled")
	}
	if st.AwaitLocal(ctx, "k") {
		t.Fatal("AwaitLocal found a copy after both settled")
	}
}

// answer is the backend's answer the settler keeps (the contract suite's).
var answer = store.Answer{
	Status:     201,
	Header:     http.Header{"Content-Type": {"application/json"}},
	Body:       []byte("{\"ok\":true}\x00\xff\r\n binary \x01"),
	BodyCached: true,
}

// TestSettlerBoundsAttempt: a completion's attempt against a store that
// does not answer ends at the sooner of the caller's deadline and
// OpTimeout, and the answer is kept.
func TestSettlerBoundsAttempt(t *testing.T) {
	for _, c := range []struct {
		name      string
		opTimeout time.Duration
		deadline  time.Duration // 0: none
		want      time.Duration
	}{
		{"op timeout, no deadline", 100 * time.Millisecond, 0, 100 * time.Millisecond},
		{"op timeout before the deadline", 100 * time.Millisecond, time.Hour, 100 * time.Millisecond},
		{"deadline before the op timeout", time.Hour, 100 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := faultystore.NewFaulty(store.NewMemory())
			st := store.NewSettler(f, store.SettlerOptions{OpTimeout: c.opTimeout, MinBackoff: time.Hour, MaxBackoff: time.Hour})
			defer st.Close()
			won, err := f.Claim(context.Background(), "k", "fp", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			f.SetLatency(time.Hour, faultystore.OpComplete) // a store that does not answer
			// Timed from before the deadline is set, which counts from then.
			start := time.Now()
			ctx := context.Background()
			if c.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.deadline)
				defer cancel()
			}
			err = st.Complete(ctx, "k", won.Token, "fp", answer, time.Hour, store.Journal{}, func(error) {})
			took := time.Since(start)
			if !errors.Is(err, store.ErrKept) {
				t.Fatalf("Complete = %v, want store.ErrKept", err)
			}
			if took < c.want || took > c.want+2*time.Second {
				t.Errorf("the attempt took %v, want about %v", took, c.want)
			}
		})
	}
}

// deadlineStore records the deadline of the contexts its completions get.
type deadlineStore struct {
	store.Store
	deadline time.Time
	ok       bool
}

func (s *deadlineStore) Complete(ctx context.Context, key, token string, a store.Answer, ttl time.Duration, j store.Journal) error {
	s.deadline, s.ok = ctx.Deadline()
	return s.Store.Complete(ctx, key, token, a, ttl, j)
}

// TestSettlerKeepsCallerDeadline: a caller's deadline that ends within
// OpTimeout is the attempt's own, with no timer of the Settler's; one
// further off is cut to OpTimeout.
func TestSettlerKeepsCallerDeadline(t *testing.T) {
	const op = time.Second
	for _, c := range []struct {
		name  string
		after time.Duration // the caller's deadline after OpTimeout
		kept  bool
	}{
		{"before the op timeout", -op / 2, true},
		{"far past it", time.Minute, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &deadlineStore{Store: store.NewMemory()}
			st := store.NewSettler(s, store.SettlerOptions{OpTimeout: op})
			defer st.Close()
			won, err := s.Claim(context.Background(), "k", "fp", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			want := time.Now().Add(op + c.after)
			ctx, cancel := context.WithDeadline(context.Background(), want)
			defer cancel()
			if err := st.Complete(ctx, "k", won.Token, "fp", answer, time.Hour, store.Journal{}, nil); err != nil {
				t.Fatal(err)
			}
			switch {
			case !s.ok:
				t.Fatal("the store's call had no deadline")
			case c.kept && !s.deadline.Equal(want):
				t.Fatalf("the store's call ends %v before the caller's deadline, want the caller's own", want.Sub(s.deadline))
			case !c.kept && !s.deadline.Before(want.Add(-c.after+time.Millisecond)):
				t.Fatalf("the store's call ends %v after OpTimeout, want it cut to OpTimeout", s.deadline.Sub(time.Now().Add(op)))
			}
		})
	}
}
