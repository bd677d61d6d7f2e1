package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// linRun is one recorded history: workers spread over stores (one store
// per gateway instance) run random operations on a few keys while fault
// (if any) runs.
type linRun struct {
	stores    []Store
	keys      []string
	workers   int
	dur       time.Duration // at least this long, and until fault returned + tail
	tail      time.Duration
	opTimeout time.Duration
	pace      time.Duration // think time between a worker's operations: [0, pace)
	maxOps    int           // per worker
	seed      uint64
	// fault runs once, dur/4 into the run; the history goes on meanwhile.
	fault func()
	// ready, when set, holds the fault back (at most until dur) until the
	// history has reached the state the fault is meant to hit: on a loaded
	// machine, dur/4 may not get there.
	ready func() bool
}

// linStats counts what a history exercised, so a test can assert that it
// checked something worth checking.
type linStats struct {
	ops, unknown, won, inFlight, answered, conflict int
	completed, released, renewed, deleted, notOwner int
	lookupsFound, lookupsMissing                    int
	// duringFault: operations that were running while the fault did (called
	// before it ended, returned or unknown after it began).
	duringFault int
}

func (s linStats) String() string {
	return fmt.Sprintf("%d ops (%d unknown): claims won %d, in flight %d, answered %d, conflict %d; "+
		"completed %d, released %d, renewed %d, deleted %d, not owner %d; lookups found %d, missing %d",
		s.ops, s.unknown, s.won, s.inFlight, s.answered, s.conflict, s.completed, s.released,
		s.renewed, s.deleted, s.notOwner, s.lookupsFound, s.lookupsMissing) +
		fmt.Sprintf("; %d during the fault", s.duringFault)
}

func (r linRun) record(t *testing.T) ([]porcupine.Operation, linStats) {
	t.Helper()
	if r.workers == 0 {
		r.workers = 8
	}
	if r.opTimeout == 0 {
		r.opTimeout = 2 * time.Second
	}
	if r.maxOps == 0 {
		r.maxOps = 4000
	}
	if r.tail == 0 {
		r.tail = time.Second
	}
	if r.seed == 0 {
		r.seed = rand.Uint64()
	}
	t.Logf("seed %d", r.seed)
	start := time.Now()
	stamp := func() int64 { return int64(time.Since(start)) }

	stop := make(chan struct{})
	var wg sync.WaitGroup
	hist := make([][]porcupine.Operation, r.workers)
	stats := make([]linStats, r.workers)
	for w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hist[w], stats[w] = r.worker(w, stamp, stop)
		}()
	}
	faultDone := make(chan struct{})
	var faultFrom, faultTo int64
	go func() {
		defer close(faultDone)
		if r.fault == nil {
			return
		}
		select {
		case <-time.After(r.dur / 4):
		case <-stop:
			return
		}
		for deadline := time.Now().Add(r.dur); r.ready != nil && !r.ready() && time.Now().Before(deadline); {
			select {
			case <-time.After(10 * time.Millisecond):
			case <-stop:
				return
			}
		}
		faultFrom = stamp()
		r.fault()
		faultTo = stamp()
	}()
	<-time.After(r.dur)
	<-faultDone
	<-time.After(r.tail) // operations after the fault are part of the history
	close(stop)
	wg.Wait()

	var h []porcupine.Operation
	var st linStats
	for w := range r.workers {
		h = append(h, hist[w]...)
		s := stats[w]
		st.ops += s.ops
		st.unknown += s.unknown
		st.won += s.won
		st.inFlight += s.inFlight
		st.answered += s.answered
		st.conflict += s.conflict
		st.completed += s.completed
		st.released += s.released
		st.renewed += s.renewed
		st.deleted += s.deleted
		st.notOwner += s.notOwner
		st.lookupsFound += s.lookupsFound
		st.lookupsMissing += s.lookupsMissing
	}
	if r.fault != nil {
		for _, op := range h {
			if op.Call <= faultTo && op.Return >= faultFrom {
				st.duringFault++
			}
		}
		t.Logf("fault from %v to %v", time.Duration(faultFrom), time.Duration(faultTo))
	}
	return h, st
}

var (
	linLockTTLs   = []time.Duration{150 * time.Millisecond, 400 * time.Millisecond, 1500 * time.Millisecond}
	linAnswerTTLs = []time.Duration{200 * time.Millisecond, 700 * time.Millisecond, 3 * time.Second}
	linFPs        = []string{"", "", "A", "A", "B"}
)

func (r linRun) worker(w int, stamp func() int64, stop chan struct{}) ([]porcupine.Operation, linStats) {
	rng := rand.New(rand.NewPCG(r.seed, uint64(w)))
	store := r.stores[w%len(r.stores)]
	var h []porcupine.Operation
	var st linStats
	tokens := map[string][]string{} // key → tokens this worker won, newest last
	var next *linIn                 // follow-up on a claim just won
	for n := 0; n < r.maxOps; n++ {
		select {
		case <-stop:
			return h, st
		default:
		}
		var in linIn
		if next != nil && rng.IntN(10) < 7 {
			in = *next
		} else {
			in = r.randomOp(rng, tokens)
		}
		next = nil
		in, out := linDo(store, in, r.opTimeout, stamp)
		st.ops++
		if out.Unknown {
			st.unknown++
			in.Ret = linNever
			if in.Op != opLookup { // an unanswered read constrains nothing
				h = append(h, porcupine.Operation{ClientId: w, Input: in, Call: in.Call, Output: out, Return: linNever})
			}
			// Back off, so one outage does not pile up ambiguous operations.
			select {
			case <-stop:
				return h, st
			case <-time.After(50*time.Millisecond + time.Duration(rng.IntN(100))*time.Millisecond):
			}
			continue
		}
		h = append(h, porcupine.Operation{ClientId: w, Input: in, Call: in.Call, Output: out, Return: in.Ret})
		switch {
		case out.Err == errNotOwner:
			st.notOwner++
		case in.Op == opClaim:
			switch out.Outcome {
			case Won:
				st.won++
				ts := append(tokens[in.Key], out.Token)
				if len(ts) > 3 {
					ts = ts[1:]
				}
				tokens[in.Key] = ts
				next = r.followUp(rng, in.Key, out.Token)
			case InFlight:
				st.inFlight++
			case Answered:
				st.answered++
			case Conflict:
				st.conflict++
			}
		case in.Op == opComplete:
			st.completed++
		case in.Op == opRelease:
			st.released++
		case in.Op == opRenew:
			st.renewed++
		case in.Op == opDelete && out.Err == errNone:
			st.deleted++
		case in.Op == opLookup && out.Err == errNone:
			st.lookupsFound++
		case in.Op == opLookup:
			st.lookupsMissing++
		}
		if r.pace > 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(r.pace))))
		}
	}
	return h, st
}

// followUp is what a gateway does with a claim it won: complete it (most
// often), release it, or renew it first.
func (r linRun) followUp(rng *rand.Rand, key, token string) *linIn {
	in := &linIn{Key: key, Token: token}
	switch p := rng.IntN(10); {
	case p < 6:
		in.Op, in.Status, in.TTL = opComplete, 200+rng.IntN(3), linAnswerTTLs[rng.IntN(len(linAnswerTTLs))]
	case p < 8:
		in.Op = opRelease
	default:
		in.Op, in.TTL = opRenew, linLockTTLs[rng.IntN(len(linLockTTLs))]
	}
	return in
}

func (r linRun) randomOp(rng *rand.Rand, tokens map[string][]string) linIn {
	key := r.keys[rng.IntN(len(r.keys))]
	token := func() string {
		ts := tokens[key]
		switch {
		case rng.IntN(10) == 0: // a token that never owned anything
			return "bogus-" + key
		case len(ts) == 0:
			// Another key's token: never this key's owner.
			for _, ts := range tokens {
				if len(ts) > 0 {
					return ts[len(ts)-1]
				}
			}
			return "bogus"
		case rng.IntN(4) == 0: // possibly stale
			return ts[rng.IntN(len(ts))]
		}
		return ts[len(ts)-1]
	}
	in := linIn{Key: key}
	switch p := rng.IntN(100); {
	case p < 35:
		in.Op, in.FP, in.TTL = opClaim, linFPs[rng.IntN(len(linFPs))], linLockTTLs[rng.IntN(len(linLockTTLs))]
	case p < 47:
		in.Op, in.Token, in.Status, in.TTL = opComplete, token(), 200+rng.IntN(3), linAnswerTTLs[rng.IntN(len(linAnswerTTLs))]
	case p < 55:
		in.Op, in.Token = opRelease, token()
	case p < 65:
		in.Op, in.Token, in.TTL = opRenew, token(), linLockTTLs[rng.IntN(len(linLockTTLs))]
	case p < 69:
		in.Op = opDelete
	default:
		in.Op = opLookup
	}
	return in
}

// linDo runs in on store, stamping its call and return times.
func linDo(store Store, in linIn, timeout time.Duration, stamp func() int64) (linIn, linOut) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	in.Call = stamp()
	var (
		res ClaimResult
		rec *Record
		err error
	)
	switch in.Op {
	case opClaim:
		res, err = store.Claim(ctx, in.Key, in.FP, in.TTL)
	case opComplete:
		err = store.Complete(ctx, in.Key, in.Token, Answer{Status: in.Status,
			Body: []byte(bodyFor(in.Status)), BodyCached: true}, in.TTL, Journal{})
	case opRelease:
		// ttl 0: forget the key, as the model says (a kept, failed
		// record is the journal's, tested by the contract tests).
		err = store.Release(ctx, in.Key, in.Token, 0, Journal{})
	case opRenew:
		err = store.Renew(ctx, in.Key, in.Token, in.TTL)
	case opDelete:
		// The model checks the purge with the claim contract; every
		// store has it (an error here fails the history).
		var rc Recovery
		if rc, err = As[Recovery](store, "recovery"); err == nil {
			err = rc.Delete(ctx, in.Key)
		}
	case opLookup:
		rec, err = store.Lookup(ctx, in.Key)
	}
	in.Ret = stamp()
	out := linOutcome(in, res, rec, err)
	return in, out
}
