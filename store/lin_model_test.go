package store

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// A sequential model of one key's life under the Store contract, for
// porcupine's linearizability checker. Histories are partitioned by key, so
// the state is one key's.
//
// Time is an input: every operation carries its call and return times (ns
// since the run began; return is linNever when the outcome is unknown), and
// the model derives expiry from them. A record set by an operation that ran
// in [c, r] with time-to-live d expires somewhere in [c+d, r+d]. An operation
// running in [c', r'] surely sees it expired when c' ≥ r+d+slack, surely
// sees it live when r' ≤ c+d−slack, and may see either in between: the
// model branches there (porcupine's nondeterministic model), since the real
// clock inside the store cannot be pinned closer than the interval.

// linNever is the return time of an operation whose outcome is unknown
// (time-out, connection error): porcupine may linearize it anywhere after
// its call, including after everything else (it never took effect).
const linNever = math.MaxInt64

// linSlack absorbs the stores' millisecond rounding of expiry times and the
// difference between Redis's clock and this process's monotonic clock.
const linSlack = int64(25 * time.Millisecond)

type linOp uint8

const (
	opClaim linOp = iota + 1
	opComplete
	opRelease
	opRenew
	opDelete
	opLookup
)

func (o linOp) String() string {
	return [...]string{"?", "claim", "complete", "release", "renew", "delete", "lookup"}[o]
}

// linIn is an operation's input, with its call and return times.
type linIn struct {
	Op     linOp
	Key    string
	FP     string        // claim
	Token  string        // complete, release, renew
	TTL    time.Duration // claim, renew: lock TTL; complete: answer TTL
	Status int           // complete
	Call   int64
	Ret    int64
}

type linErr uint8

const (
	errNone linErr = iota
	errNotOwner
	errNotFound
)

// linOut is what the store answered.
type linOut struct {
	Unknown bool // error other than the contract's: outcome unknown
	Err     linErr
	Outcome Outcome // claim
	Token   string  // claim won
	// The record returned by claim (not won) or lookup.
	Found     bool
	State     State
	FP        string
	Status    int
	BodyOK    bool   // the body is the one completed with Status
	Copies    int64  // the record's copies, this one included
	Conflicts int64  // -1: not checked (a replay need not carry them)
	Detail    string // the unknown error, for the visualisation
}

// linState is one key's state. St 0 is free (absent or expired); Token ""
// while in flight means nobody known holds the claim (its claimer got an
// error, so no client will ever present the token).
type linState struct {
	St        uint8 // 0 free, 1 in flight, 2 answered
	Token     string
	FP        string
	Status    int
	Copies    int64 // the record's copies, this one included
	Conflicts int64
	ExpLo     int64 // earliest and latest expiry (ns since start)
	ExpHi     int64
}

const (
	stFree uint8 = iota
	stInFlight
	stAnswered
)

func addSat(a int64, d time.Duration) int64 {
	if a > linNever-int64(d) {
		return linNever
	}
	return a + int64(d)
}

// preStates are the states op may see: s itself, s expired, or both.
func preStates(s linState, in linIn) []linState {
	if s.St == stFree {
		return []linState{s}
	}
	if s.ExpHi != linNever && in.Call >= s.ExpHi+linSlack {
		return []linState{{}}
	}
	if in.Ret != linNever && in.Ret <= s.ExpLo-linSlack {
		return []linState{s}
	}
	return []linState{s, {}}
}

func bodyFor(status int) string { return fmt.Sprintf("answer %d", status) }

// recMatches: the returned record is the state's. A conflict's record is
// metadata only (no answer), whatever the state.
func recMatches(s linState, o linOut, withAnswer bool) bool {
	want := StateInFlight
	if s.St == stAnswered {
		want = StateAnswered
	}
	if !o.Found || o.State != want || o.FP != s.FP || o.Copies != s.Copies ||
		(o.Conflicts >= 0 && o.Conflicts != s.Conflicts) {
		return false
	}
	if s.St == stAnswered && withAnswer {
		return o.Status == s.Status && o.BodyOK
	}
	return o.Status == 0
}

// apply is the sequential specification: the state after in, and whether
// out is a possible answer from s.
func apply(s linState, in linIn, out linOut) (linState, bool) {
	u := out.Unknown
	owns := s.St == stInFlight && s.Token != "" && s.Token == in.Token
	switch in.Op {
	case opClaim:
		if s.St == stFree {
			n := linState{St: stInFlight, Token: out.Token, FP: in.FP, Copies: 1,
				ExpLo: addSat(in.Call, in.TTL), ExpHi: addSat(in.Ret, in.TTL)}
			return n, u || (out.Err == errNone && out.Outcome == Won && out.Token != "")
		}
		n := s
		if in.FP != "" && s.FP != "" && in.FP != s.FP {
			n.Conflicts++
			return n, u || (out.Outcome == Conflict && recMatches(n, out, false))
		}
		n.Copies++
		want := InFlight
		if s.St == stAnswered {
			want = Answered
		}
		return n, u || (out.Outcome == want && recMatches(n, out, true))
	case opComplete:
		if !owns {
			return s, u || out.Err == errNotOwner
		}
		n := s
		n.St, n.Token, n.Status = stAnswered, "", in.Status
		n.ExpLo, n.ExpHi = addSat(in.Call, in.TTL), addSat(in.Ret, in.TTL)
		return n, u || out.Err == errNone
	case opRelease:
		if !owns {
			return s, u || out.Err == errNotOwner
		}
		return linState{}, u || out.Err == errNone
	case opRenew:
		if !owns {
			return s, u || out.Err == errNotOwner
		}
		n := s
		n.ExpLo, n.ExpHi = addSat(in.Call, in.TTL), addSat(in.Ret, in.TTL)
		return n, u || out.Err == errNone
	case opDelete:
		if s.St == stFree {
			return s, u || out.Err == errNotFound
		}
		return linState{}, u || out.Err == errNone
	case opLookup:
		if s.St == stFree {
			return s, u || out.Err == errNotFound
		}
		return s, u || (out.Err == errNone && recMatches(s, out, true))
	}
	return s, false
}

var linModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(linIn).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var ps [][]porcupine.Operation
		for _, k := range keys {
			ps = append(ps, byKey[k])
		}
		return ps
	},
	Init: func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		in, out := input.(linIn), output.(linOut)
		var next []any
		for _, p := range preStates(state.(linState), in) {
			if n, ok := apply(p, in, out); ok {
				next = append(next, n)
			}
		}
		return next
	},
	Equal: func(a, b any) bool { return a.(linState) == b.(linState) },
	Hash: func(state any) uint64 {
		s := state.(linState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%d|%s|%s|%d|%d|%d|%d|%d", s.St, s.Token, s.FP, s.Status, s.Copies, s.Conflicts, s.ExpLo, s.ExpHi)
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linIn), output.(linOut)
		var b strings.Builder
		fmt.Fprintf(&b, "%s(", in.Op)
		switch in.Op {
		case opClaim:
			fmt.Fprintf(&b, "fp=%q ttl=%v", in.FP, in.TTL)
		case opComplete:
			fmt.Fprintf(&b, "%s status=%d ttl=%v", short(in.Token), in.Status, in.TTL)
		case opRelease:
			fmt.Fprintf(&b, "%s", short(in.Token))
		case opRenew:
			fmt.Fprintf(&b, "%s ttl=%v", short(in.Token), in.TTL)
		}
		b.WriteString(") → ")
		switch {
		case out.Unknown:
			fmt.Fprintf(&b, "unknown (%s)", out.Detail)
		case out.Err == errNotOwner:
			b.WriteString("not owner")
		case out.Err == errNotFound:
			b.WriteString("not found")
		case in.Op == opClaim && out.Outcome == Won:
			fmt.Fprintf(&b, "won %s", short(out.Token))
		case in.Op == opClaim || in.Op == opLookup:
			if in.Op == opClaim {
				fmt.Fprintf(&b, "%s ", out.Outcome)
			}
			fmt.Fprintf(&b, "{%s fp=%q status=%d copies=%d conflicts=%d}", out.State, out.FP, out.Status, out.Copies, out.Conflicts)
		default:
			b.WriteString("ok")
		}
		return b.String()
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		exp := func(v int64) string {
			if v == linNever {
				return "∞"
			}
			return time.Duration(v).String()
		}
		switch s.St {
		case stInFlight:
			return fmt.Sprintf("in flight %s fp=%q copies=%d conflicts=%d expires [%s, %s]",
				short(s.Token), s.FP, s.Copies, s.Conflicts, exp(s.ExpLo), exp(s.ExpHi))
		case stAnswered:
			return fmt.Sprintf("answered %d fp=%q copies=%d conflicts=%d expires [%s, %s]",
				s.Status, s.FP, s.Copies, s.Conflicts, exp(s.ExpLo), exp(s.ExpHi))
		}
		return "free"
	},
}

func short(tok string) string {
	switch {
	case tok == "":
		return "?"
	case len(tok) > 6:
		return tok[:6]
	}
	return tok
}

// linOutcome turns a store's answer into the model's output; other errors
// are unknown outcomes.
func linOutcome(in linIn, res ClaimResult, rec *Record, err error) linOut {
	var o linOut
	switch {
	case err == nil:
	case errors.Is(err, ErrNotOwner):
		o.Err = errNotOwner
		return o
	case errors.Is(err, ErrNotFound):
		o.Err = errNotFound
		return o
	default:
		o.Unknown, o.Detail = true, err.Error()
		return o
	}
	if in.Op == opClaim {
		o.Outcome, o.Token, rec = res.Outcome, res.Token, res.Record
	}
	if rec != nil {
		o.Found, o.State, o.FP, o.Status = true, rec.State, rec.Fingerprint, rec.Status
		o.Copies, o.Conflicts = rec.Copies, rec.Conflicts
		o.BodyOK = rec.BodyCached && string(rec.Body) == bodyFor(rec.Status)
		if in.Op == opClaim && o.Outcome == Answered {
			// A replay's record need not carry the conflicts
			// (ClaimResult.Record); Lookup's are checked.
			o.Conflicts = -1
		}
	}
	return o
}

// linCheck checks a history. On a violation (or when the checker ran out
// of time) it writes porcupine's visualisation under $IDEMGATE_ARTIFACTS
// (or a kept temporary directory) and logs its path. It returns the result.
func linCheck(t *testing.T, name string, h []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	model := linModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, h, linCheckTimeout)
	if res == porcupine.Ok {
		return res
	}
	dir := os.Getenv("IDEMGATE_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "idemgate-lin-"); err != nil {
			t.Errorf("artefact directory: %v", err)
			return res
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("artefact directory: %v", err)
		return res
	}
	if res == porcupine.Illegal {
		linExplain(t, model, info, h)
	}
	path := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(name)+".html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		t.Errorf("writing %s: %v", path, err)
	} else {
		t.Logf("%s: %s history of %d operations; visualisation: %s", name, res, len(h), path)
	}
	return res
}

// linCheckTimeout bounds one check; a history that needs longer is a test
// failure (unchecked is not checked), so runs are kept small enough.
var linCheckTimeout = 60 * time.Second

// linExplain logs, for each partition, the end of the longest linearizable
// prefix and the operations that could not follow it: the spot to look at
// in the visualisation.
func linExplain(t *testing.T, model porcupine.Model, info porcupine.LinearizationInfo, h []porcupine.Operation) {
	t.Helper()
	desc := func(op porcupine.Operation) string {
		ret := "∞"
		if op.Return != linNever {
			ret = time.Duration(op.Return).String()
		}
		return fmt.Sprintf("[%v, %s] client %d %s %s", time.Duration(op.Call), ret, op.ClientId,
			op.Input.(linIn).Key, model.DescribeOperation(op.Input, op.Output))
	}
	for _, p := range info.PartialLinearizationsOperations() {
		var longest []porcupine.Operation
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == 0 {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "longest linearizable prefix (%d operations) ends:\n", len(longest))
		for _, op := range longest[max(0, len(longest)-6):] {
			fmt.Fprintf(&b, "  %s\n", desc(op))
		}
		type id struct {
			call   int64
			client int
		}
		done := map[id]bool{}
		for _, op := range longest {
			done[id{op.Call, op.ClientId}] = true
		}
		key := longest[0].Input.(linIn).Key
		var rest []porcupine.Operation
		for _, op := range h {
			if op.Input.(linIn).Key == key && !done[id{op.Call, op.ClientId}] {
				rest = append(rest, op)
			}
		}
		slices.SortFunc(rest, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		b.WriteString("the first operations not linearized after it:\n")
		for _, op := range rest[:min(len(rest), 8)] {
			fmt.Fprintf(&b, "  %s\n", desc(op))
		}
		t.Log(b.String())
	}
}
