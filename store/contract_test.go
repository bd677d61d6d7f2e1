package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// factory makes a fresh, empty store for one test.
type factory struct {
	name string
	new  func(t *testing.T) Store
}

var prefixSeq atomic.Int64

// factories starts one redis-server and one 3-master cluster for the whole
// run and returns a factory per store kind. Redis stores are kept apart by
// a fresh prefix each. Under go test -short there is no cluster (three
// more processes): the full run checks the Cluster store.
func factories(t *testing.T) []factory {
	single := redistest.Start(t).Client()
	// The plain stores send their scripts in the form their server reads
	// (flagged on Redis 7), as a gateway does after its start-up check;
	// redis_unflagged keeps the form every version reads.
	major := func(c redis.UniversalClient) int {
		rep, err := CheckRedis(context.Background(), c, RedisCheckOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Major
	}
	redisStore := func(c redis.UniversalClient, version int) func(t *testing.T) Store {
		return func(t *testing.T) Store {
			s := NewRedis(c, RedisOptions{Prefix: fmt.Sprintf("t%d", prefixSeq.Add(1))})
			s.UseServerVersion(version)
			t.Cleanup(func() { s.Close() })
			return s
		}
	}
	fs := []factory{
		{"memory", func(t *testing.T) Store {
			s := NewMemory()
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"embedded", func(t *testing.T) Store {
			s, err := NewEmbedded(filepath.Join(t.TempDir(), "idem.db"), EmbeddedOptions{NoSync: true, SweepInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", redisStore(single, major(single))},
		{"redis_unflagged", redisStore(single, 0)},
	}
	if !testing.Short() {
		cluster := redistest.StartCluster(t, 3).Client()
		fs = append(fs, factory{"redis_cluster", redisStore(cluster, major(cluster))})
	}
	return fs
}

// storeCase is one contract test, run on a fresh store of every kind. S is
// what the suite checks: the claim contract (Store), or the claim contract
// with the extensions the suite reads.
type storeCase[S any] struct {
	name string
	run  func(t *testing.T, s S)
}

// suite is one contract suite: the claim contract's or an extension's.
type suite struct {
	name string
	run  func(t *testing.T, f factory)
}

// suites are the contract suites TestContract runs; each suite's file
// adds its own.
var suites = []suite{newSuite("claim", "claim contract", slices.Concat(contractCases, waitCases))}

// newSuite runs cases on a store of f's kind; a store that does not
// implement S fails every case, saying what it keeps not (what).
func newSuite[S any](name, what string, cases []storeCase[S]) suite {
	return suite{name, func(t *testing.T, f factory) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				s := f.new(t)
				x, ok := s.(S)
				if !ok {
					t.Fatalf("%T keeps no %s", s, what)
				}
				c.run(t, x)
			})
		}
	}}
}

// TestContract runs every suite on every store kind, sharing one
// redis-server and one cluster. The store kinds run side by side, as each
// suite's cases do: every case has a store of its own (a fresh prefix on
// the shared servers), and most of a suite's time is TTLs waited out.
func TestContract(t *testing.T) {
	fs := factories(t)
	for _, su := range suites {
		t.Run(su.name, func(t *testing.T) {
			for _, f := range fs {
				t.Run(f.name, func(t *testing.T) {
					t.Parallel()
					su.run(t, f)
				})
			}
		})
	}
}

const (
	longTTL = time.Minute
	// shortTTL is a TTL the tests wait out; the calls made before it runs
	// out must fit in it even when a loaded 2-core machine under -race
	// stalls a goroutine for hundreds of ms (200ms did not).
	shortTTL = 2 * time.Second
	deadline = 3 * time.Second // generous: 2 shared cores, -race
)

// waitWakes checks that act (a completion, a release, a delete) on a key
// found in flight wakes every waiter of that key and no other's.
func waitWakes(t *testing.T, s Store, name string, act func(key, token string) error) {
	t.Helper()
	ctx := ctxT(t)
	key, other := "wait:"+name, "wait:other:"+name
	won := claim(t, s, key, "", longTTL, Won)
	otherWon := claim(t, s, other, "", longTTL, Won)
	// The waiting copies' own claims, as WaitAnswer's protocol has
	// them (a completion wakes only a key found in flight).
	claim(t, s, key, "", longTTL, InFlight)
	claim(t, s, other, "", longTTL, InFlight)
	done, stop, err := s.Wait(ctx, key)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	done2, stop2, err := s.Wait(ctx, key) // a second waiter on the same key
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	doneOther, stopOther, err := s.Wait(ctx, other)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	notWoken(t, done, name+" before")
	// Another key's event wakes only its own waiters (ordered on
	// one connection for Redis, so this is not a race).
	if err := act(other, otherWon.Token); err != nil {
		t.Fatal(err)
	}
	woken(t, doneOther, name+" of the other key")
	notWoken(t, done, name+" of another key")
	go func() {
		if err := act(key, won.Token); err != nil {
			t.Error(err)
		}
	}()
	woken(t, done, name)
	woken(t, done2, name+" (second waiter)")
	stop()
	stop2()
	stop() // idempotent
	stopOther()
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func claim(t *testing.T, s Store, key, fp string, ttl time.Duration, want Outcome) ClaimResult {
	t.Helper()
	r, err := s.Claim(ctxT(t), key, fp, ttl)
	if err != nil {
		t.Fatalf("Claim(%q): %v", key, err)
	}
	if r.Outcome != want {
		t.Fatalf("Claim(%q) = %v, want %v", key, r.Outcome, want)
	}
	if (want == Won) != (r.Token != "") {
		t.Fatalf("Claim(%q) = %v with token %q", key, r.Outcome, r.Token)
	}
	if want != Won && r.Record == nil {
		t.Fatalf("Claim(%q) = %v without a record", key, r.Outcome)
	}
	return r
}

func lookup(t *testing.T, s Store, key string) *Record {
	t.Helper()
	rec, err := s.Lookup(ctxT(t), key)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", key, err)
	}
	return rec
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, deadline, what, cond)
}

// eventuallyWithin is eventually with its own bound, for waits that
// include a TTL running out.
func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func woken(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(deadline):
		t.Fatalf("%s: waiter not woken within %v", what, deadline)
	}
}

func notWoken(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: waiter woken", what)
	default:
	}
}

var answer = Answer{
	Status: 201,
	Header: http.Header{
		"Content-Type": {"application/json"},
		"Set-Cookie":   {"a=1", "b=2"},
		"X-Empty":      {""},
	},
	Body:       []byte("{\"ok\":true}\x00\xff\r\n binary \x01"),
	BodyCached: true,
}

var contractCases = []storeCase[Store]{
	{"claim_complete_replay", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		won := claim(t, s, "order:1", "fp", longTTL, Won)
		rec := lookup(t, s, "order:1")
		if rec.State != StateInFlight || rec.Key != "order:1" || rec.Copies != 1 || rec.Fingerprint != "fp" {
			t.Fatalf("in-flight record: %+v", rec)
		}
		if err := s.Complete(ctx, "order:1", won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		for i := 2; i <= 4; i++ {
			r := claim(t, s, "order:1", "fp", longTTL, Answered)
			got := r.Record
			if got.State != StateAnswered || got.Key != "order:1" || got.Status != answer.Status ||
				!reflect.DeepEqual(got.Header, answer.Header) || !bytes.Equal(got.Body, answer.Body) ||
				!got.BodyCached || got.Copies != int64(i) {
				t.Fatalf("replay %d: %+v", i, got)
			}
			if got.LastSeen.Before(got.FirstSeen) || !got.ExpiresAt.After(got.LastSeen) {
				t.Fatalf("replay %d times: first %v last %v expires %v", i, got.FirstSeen, got.LastSeen, got.ExpiresAt)
			}
		}
		rec = lookup(t, s, "order:1")
		if rec.Copies != 4 || !bytes.Equal(rec.Body, answer.Body) || rec.Status != 201 {
			t.Fatalf("Lookup after replays: %+v", rec)
		}
		// A claim already completed is no longer held.
		for name, err := range map[string]error{
			"complete": s.Complete(ctx, "order:1", won.Token, answer, longTTL, Journal{}),
			"release":  s.Release(ctx, "order:1", won.Token, time.Hour, Journal{}),
			"renew":    s.Renew(ctx, "order:1", won.Token, longTTL),
		} {
			if !errors.Is(err, ErrNotOwner) {
				t.Errorf("%s after complete: %v, want ErrNotOwner", name, err)
			}
		}
		if _, err := s.Lookup(ctx, "order:2"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Lookup of unknown key: %v", err)
		}
	}},
	{"concurrent_claims", func(t *testing.T, s Store) {
		const keys, claimers = 12, 64
		ctx := ctxT(t)
		for k := range keys {
			key := fmt.Sprintf("race:%d", k)
			var wins, inflight atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make(chan error, claimers)
			for range claimers {
				wg.Go(func() {
					<-start
					r, err := s.Claim(ctx, key, "", longTTL)
					switch {
					case err != nil:
						errs <- err
					case r.Outcome == Won:
						wins.Add(1)
					case r.Outcome == InFlight:
						inflight.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if wins.Load() != 1 || inflight.Load() != claimers-1 {
				t.Fatalf("%s: %d won, %d in flight", key, wins.Load(), inflight.Load())
			}
			if rec := lookup(t, s, key); rec.Copies != claimers {
				t.Fatalf("%s: copies %d, want %d", key, rec.Copies, claimers)
			}
		}
	}},
	{"concurrent_replays", func(t *testing.T, s Store) {
		const replays = 64
		ctx := ctxT(t)
		won := claim(t, s, "k", "fp", longTTL, Won)
		if err := s.Complete(ctx, "k", won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, replays)
		for range replays {
			wg.Go(func() {
				r, err := s.Claim(ctx, "k", "fp", longTTL)
				if err == nil && (r.Outcome != Answered || !bytes.Equal(r.Record.Body, answer.Body)) {
					err = fmt.Errorf("replay: %v %+v", r.Outcome, r.Record)
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if rec := lookup(t, s, "k"); rec.Copies != replays+1 {
			t.Fatalf("copies %d, want %d", rec.Copies, replays+1)
		}
	}},
	{"wrong_token", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		won := claim(t, s, "k", "", longTTL, Won)
		before := lookup(t, s, "k")
		for _, tok := range []string{"", "nope", won.Token + "x"} {
			for name, err := range map[string]error{
				"complete": s.Complete(ctx, "k", tok, answer, longTTL, Journal{}),
				"release":  s.Release(ctx, "k", tok, time.Hour, Journal{}),
				"renew":    s.Renew(ctx, "k", tok, 2*longTTL),
			} {
				if !errors.Is(err, ErrNotOwner) {
					t.Errorf("%s with token %q: %v, want ErrNotOwner", name, tok, err)
				}
			}
		}
		if after := lookup(t, s, "k"); !reflect.DeepEqual(before, after) {
			t.Fatalf("record changed:\n%+v\n%+v", before, after)
		}
		// Nor on a key nobody claimed.
		if err := s.Complete(ctx, "other", won.Token, answer, longTTL, Journal{}); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("complete of unclaimed key: %v", err)
		}
		if err := s.Release(ctx, "other", won.Token, time.Hour, Journal{}); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("release of unclaimed key: %v", err)
		}
		if _, err := s.Lookup(ctx, "other"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unclaimed key appeared: %v", err)
		}
		// The right token still works.
		if err := s.Release(ctx, "k", won.Token, time.Hour, Journal{}); err != nil {
			t.Fatalf("release: %v", err)
		}
		// Released: kept as failed, and free.
		if rec := lookup(t, s, "k"); rec.State != StateFailed {
			t.Fatalf("released key: %+v, want state failed", rec)
		}
		claim(t, s, "k", "", longTTL, Won)
	}},
	{"renew_extends", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		won := claim(t, s, "k", "", shortTTL, Won)
		before := lookup(t, s, "k").ExpiresAt
		if err := s.Renew(ctx, "k", won.Token, longTTL); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		after := lookup(t, s, "k").ExpiresAt
		if after.Sub(before) < longTTL-shortTTL-time.Second {
			t.Fatalf("expiry moved from %v to %v", before, after)
		}
		time.Sleep(time.Until(before) + 100*time.Millisecond) // past the original lock TTL
		claim(t, s, "k", "", shortTTL, InFlight)
		if err := s.Complete(ctx, "k", won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatalf("Complete after renew: %v", err)
		}
	}},
	{"in_flight_expiry", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		old := claim(t, s, "k", "", shortTTL, Won)
		var won ClaimResult
		eventuallyWithin(t, shortTTL+deadline, "claim wins after the lock TTL", func() bool {
			r, err := s.Claim(ctx, "k", "", longTTL)
			if err != nil {
				t.Fatal(err)
			}
			won = r
			return r.Outcome == Won
		})
		if won.Token == old.Token {
			t.Fatal("same token twice")
		}
		if err := s.Complete(ctx, "k", old.Token, answer, longTTL, Journal{}); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("stale token completed: %v", err)
		}
		if err := s.Renew(ctx, "k", old.Token, longTTL); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("stale token renewed: %v", err)
		}
		if rec := lookup(t, s, "k"); rec.Copies != 1 || rec.State != StateInFlight {
			t.Fatalf("new claim's record: %+v", rec)
		}
		if err := s.Complete(ctx, "k", won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
	}},
	{"answered_expiry", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		won := claim(t, s, "k", "", longTTL, Won)
		if err := s.Complete(ctx, "k", won.Token, answer, shortTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "k", "", longTTL, Answered)
		eventuallyWithin(t, shortTTL+deadline, "answer forgotten after its ttl", func() bool {
			_, err := s.Lookup(ctx, "k")
			return errors.Is(err, ErrNotFound)
		})
		claim(t, s, "k", "", longTTL, Won)
	}},
	{"fingerprint_conflict", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		won := claim(t, s, "k", "amount=10", longTTL, Won)
		r := claim(t, s, "k", "amount=99", longTTL, Conflict)
		if r.Record.Fingerprint != "amount=10" || r.Record.Conflicts != 1 || r.Record.Copies != 1 {
			t.Fatalf("conflict record: %+v", r.Record)
		}
		claim(t, s, "k", "", longTTL, InFlight) // no fingerprint: no check
		claim(t, s, "k", "amount=10", longTTL, InFlight)
		if err := s.Complete(ctx, "k", won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		r = claim(t, s, "k", "amount=99", longTTL, Conflict)
		if r.Record.Conflicts != 2 || r.Record.Copies != 3 || r.Record.Body != nil || r.Record.State != StateAnswered {
			t.Fatalf("conflict on answered key: %+v", r.Record)
		}
		r = claim(t, s, "k", "amount=10", longTTL, Answered)
		if r.Record.Copies != 4 || r.Record.Fingerprint != "amount=10" || string(r.Record.Body) != string(answer.Body) {
			t.Fatalf("copy after conflicts: %+v", r.Record)
		}
		if rec := lookup(t, s, "k"); rec.Copies != 4 || rec.Conflicts != 2 {
			t.Fatalf("record after conflicts: %+v", rec)
		}
		// A key claimed without a fingerprint accepts any.
		claim(t, s, "nofp", "", longTTL, Won)
		if r := claim(t, s, "nofp", "x", longTTL, InFlight); r.Record.Copies != 2 {
			t.Fatalf("copies: %+v", r.Record)
		}
	}},
	{"copies_counting", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		won := claim(t, s, "k", "", longTTL, Won)
		first := lookup(t, s, "k")
		for i := 2; i <= 5; i++ {
			if r := claim(t, s, "k", "", longTTL, InFlight); r.Record.Copies != int64(i) {
				t.Fatalf("copy %d counted as %d", i, r.Record.Copies)
			}
		}
		if err := s.Complete(ctx, "k", won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // so last seen can move
		r := claim(t, s, "k", "", longTTL, Answered)
		if r.Record.Copies != 6 || !r.Record.FirstSeen.Equal(first.FirstSeen) || !r.Record.LastSeen.After(first.LastSeen) {
			t.Fatalf("record after 6 copies: %+v (first %+v)", r.Record, first)
		}
		if rec := lookup(t, s, "k"); rec.Copies != 6 {
			t.Fatalf("Lookup counted: %d", rec.Copies)
		}
	}},
	{"wait_wakes", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		waitWakes(t, s, "complete", func(k, tok string) error { return s.Complete(ctx, k, tok, answer, longTTL, Journal{}) })
		waitWakes(t, s, "release", func(k, tok string) error { return s.Release(ctx, k, tok, time.Hour, Journal{}) })
		// A waiter that stopped before the event is simply gone; a new one
		// on the same key still works.
		won := claim(t, s, "wait:again", "", longTTL, Won)
		_, stop, err := s.Wait(ctx, "wait:again")
		if err != nil {
			t.Fatal(err)
		}
		stop()
		done, stop, err := s.Wait(ctx, "wait:again")
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if err := s.Release(ctx, "wait:again", won.Token, time.Hour, Journal{}); err != nil {
			t.Fatal(err)
		}
		woken(t, done, "after resubscribe")
	}},
	{"body_not_cached", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		won := claim(t, s, "big", "", longTTL, Won)
		a := answer
		a.BodyCached = false
		if err := s.Complete(ctx, "big", won.Token, a, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		r := claim(t, s, "big", "", longTTL, Answered)
		if r.Record.BodyCached || len(r.Record.Body) != 0 || r.Record.Status != 201 || !reflect.DeepEqual(r.Record.Header, a.Header) {
			t.Fatalf("record: %+v", r.Record)
		}
		// An empty body that is cached stays cached.
		won = claim(t, s, "empty", "", longTTL, Won)
		if err := s.Complete(ctx, "empty", won.Token, Answer{Status: 204, BodyCached: true}, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		r = claim(t, s, "empty", "", longTTL, Answered)
		if !r.Record.BodyCached || len(r.Record.Body) != 0 || r.Record.Status != 204 || len(r.Record.Header) != 0 {
			t.Fatalf("record: %+v", r.Record)
		}
	}},
	{"odd_keys", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		// Keys that would break or collide under a naive hash tag.
		keys := []string{"a{b}", "a%7Bb%7D", "a%7bb%7d", "{", "}", "{}", "", "%", "%25", "x}y{z", "bin\x00\xff\xfe", "idem:{k}"}
		for i, k := range keys {
			won := claim(t, s, k, "", longTTL, Won)
			a := answer
			a.Status = 200 + i
			if err := s.Complete(ctx, k, won.Token, a, longTTL, Journal{}); err != nil {
				t.Fatalf("Complete(%q): %v", k, err)
			}
		}
		for i, k := range keys {
			r := claim(t, s, k, "", longTTL, Answered)
			if r.Record.Key != k || r.Record.Status != 200+i || r.Record.Copies != 2 {
				t.Fatalf("key %q: %+v", k, r.Record)
			}
		}
	}},
	{"closed", func(t *testing.T, s Store) {
		ctx := ctxT(t)
		won := claim(t, s, "k", "", longTTL, Won)
		done, stop, err := s.Wait(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		woken(t, done, "close")
		if _, err := s.Claim(ctx, "k", "", longTTL); !errors.Is(err, ErrClosed) {
			t.Fatalf("Claim after Close: %v", err)
		}
		if err := s.Complete(ctx, "k", won.Token, answer, longTTL, Journal{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Complete after Close: %v", err)
		}
		if _, _, err := s.Wait(ctx, "k"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait after Close: %v", err)
		}
		if _, err := s.Lookup(ctx, "k"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Lookup after Close: %v", err)
		}
	}},
}
