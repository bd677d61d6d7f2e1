package store

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The model itself: small hand-made histories it must accept or refuse,
// so a green history check means something.
func TestLinearizableModel(t *testing.T) {
	t.Parallel()
	ms := func(v float64) int64 { return int64(v * float64(time.Millisecond)) }
	type op struct {
		client    int
		in        linIn
		out       linOut
		call, ret float64 // ms; ret < 0: unknown outcome
	}
	claim := func(fp string, ttl time.Duration) linIn { return linIn{Op: opClaim, Key: "k", FP: fp, TTL: ttl} }
	won := func(tok string) linOut { return linOut{Outcome: Won, Token: tok} }
	inFlight := func(fp string, copies, conflicts int64) linOut {
		return linOut{Outcome: InFlight, Found: true, State: StateInFlight, FP: fp, Copies: copies, Conflicts: conflicts}
	}
	lookup := linIn{Op: opLookup, Key: "k"}
	found := func(st State, fp string, status int, copies int64) linOut {
		return linOut{Found: true, State: st, FP: fp, Status: status, BodyOK: status != 0, Copies: copies}
	}
	complete := func(tok string, status int) linIn {
		return linIn{Op: opComplete, Key: "k", Token: tok, Status: status, TTL: time.Second}
	}
	unknown := linOut{Unknown: true, Detail: "time-out"}
	sec := time.Second
	cases := []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"one winner, one copy", []op{
			{0, claim("", sec), won("t1"), 0, 1},
			{1, claim("", sec), inFlight("", 2, 0), 2, 3},
		}, porcupine.Ok},
		{"two winners while the claim lives", []op{
			{0, claim("", sec), won("t1"), 0, 1},
			{1, claim("", sec), won("t2"), 500, 501},
		}, porcupine.Illegal},
		{"second winner after the lock TTL", []op{
			{0, claim("", 100*time.Millisecond), won("t1"), 0, 1},
			{1, claim("", sec), won("t2"), 200, 201},
		}, porcupine.Ok},
		{"either side of the lock TTL: live", []op{
			{0, claim("", 100*time.Millisecond), won("t1"), 0, 10},
			{1, claim("", sec), inFlight("", 2, 0), 95, 96},
		}, porcupine.Ok},
		{"either side of the lock TTL: expired", []op{
			{0, claim("", 100*time.Millisecond), won("t1"), 0, 10},
			{1, claim("", sec), won("t2"), 95, 96},
		}, porcupine.Ok},
		{"once seen expired, never live again", []op{
			{0, claim("", 100*time.Millisecond), won("t1"), 0, 10},
			{1, lookup, linOut{Err: errNotFound}, 95, 96},
			{2, lookup, found(StateInFlight, "", 0, 1), 97, 98},
		}, porcupine.Illegal},
		{"a stale token cannot complete", []op{
			{0, claim("", 100*time.Millisecond), won("t1"), 0, 1},
			{1, claim("", sec), won("t2"), 200, 201},
			{0, complete("t1", 200), linOut{}, 202, 203},
		}, porcupine.Illegal},
		{"complete, then replay", []op{
			{0, claim("A", sec), won("t1"), 0, 1},
			{0, complete("t1", 201), linOut{}, 2, 3},
			{1, claim("A", sec), linOut{Outcome: Answered, Found: true, State: StateAnswered, FP: "A", Status: 201, BodyOK: true, Copies: 2}, 4, 5},
			{1, claim("B", sec), linOut{Outcome: Conflict, Found: true, State: StateAnswered, FP: "A", Copies: 2, Conflicts: 1}, 6, 7},
		}, porcupine.Ok},
		{"a replay with the wrong answer", []op{
			{0, claim("", sec), won("t1"), 0, 1},
			{0, complete("t1", 201), linOut{}, 2, 3},
			{1, lookup, found(StateAnswered, "", 200, 1), 4, 5},
		}, porcupine.Illegal},
		{"an unknown claim may have run", []op{
			{0, claim("", sec), unknown, 0, -1},
			{1, claim("", sec), inFlight("", 2, 0), 10, 11},
		}, porcupine.Ok},
		{"an unknown claim may not have run", []op{
			{0, claim("", sec), unknown, 0, -1},
			{1, claim("", sec), won("t2"), 10, 11},
			{1, lookup, found(StateInFlight, "", 0, 1), 12, 13},
		}, porcupine.Ok},
		{"an unknown claim ran at most once", []op{
			{0, claim("", sec), unknown, 0, -1},
			{1, claim("", sec), won("t2"), 10, 11},
			{1, lookup, found(StateInFlight, "", 0, 3), 12, 13},
		}, porcupine.Illegal},
		{"nobody holds an unknown claim's token", []op{
			{0, claim("", sec), unknown, 0, -1},
			{1, claim("", sec), inFlight("", 2, 0), 10, 11},
			{1, complete("", 200), linOut{}, 12, 13},
		}, porcupine.Illegal},
		{"release frees, delete of nothing is not found", []op{
			{0, claim("", sec), won("t1"), 0, 1},
			{0, linIn{Op: opRelease, Key: "k", Token: "t1"}, linOut{}, 2, 3},
			{1, linIn{Op: opDelete, Key: "k"}, linOut{Err: errNotFound}, 4, 5},
			{1, claim("", sec), won("t2"), 6, 7},
		}, porcupine.Ok},
		{"renew keeps the claim past its first TTL", []op{
			{0, claim("", 100*time.Millisecond), won("t1"), 0, 1},
			{0, linIn{Op: opRenew, Key: "k", Token: "t1", TTL: sec}, linOut{}, 50, 51},
			{1, claim("", sec), won("t2"), 300, 301},
		}, porcupine.Illegal},
	}
	for _, c := range cases {
		var h []porcupine.Operation
		for _, o := range c.ops {
			in := o.in
			in.Call, in.Ret = ms(o.call), ms(o.ret)
			if o.ret < 0 {
				in.Ret = linNever
			}
			h = append(h, porcupine.Operation{ClientId: o.client, Input: in, Call: in.Call, Output: o.out, Return: in.Ret})
		}
		if got := porcupine.CheckOperations(linModel.ToModel(), h); (got && c.want != porcupine.Ok) || (!got && c.want == porcupine.Ok) {
			t.Errorf("%s: linearizable %v, want %s", c.name, got, c.want)
		}
	}
}
