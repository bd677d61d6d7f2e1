package store

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// A first copy's completion, while the key still holds the record its
// SET claim wrote, sets the answered record the gateway packed: no value
// by value settling, so no clock read (TIME). A claim a duplicate touched
// meanwhile is settled value by value, and keeps what the duplicate
// counted.
func TestRedisCompleteOfAnUntouchedSetClaimIsPacked(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := NewRedis(srv.Client(), RedisOptions{Prefix: "cp"})
	s.UseServerVersion(7)
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t)
	a := Answer{Status: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("success"), BodyCached: true}
	j := Journal{Notification: stripeEventNotification(), Attempt: attempt(200, AttemptAnswered, "success")}
	// The scripts loaded.
	warm := claim(t, s, "warm", "", time.Minute, Won)
	claim(t, s, "warm", "", time.Minute, InFlight)
	if err := s.Complete(ctx, "warm", warm.Token, a, time.Hour, Journal{}); err != nil {
		t.Fatal(err)
	}

	won := claim(t, s, "stripe:evt_packed", "fp", time.Minute, Won)
	clock := srv.CommandCalls("time")
	if err := s.Complete(ctx, "stripe:evt_packed", won.Token, a, time.Hour, j); err != nil {
		t.Fatal(err)
	}
	if got := srv.CommandCalls("time") - clock; got != 0 {
		t.Errorf("completing an untouched SET claim read the clock %d times, want 0 (the packed answer set as it is)", got)
	}
	rec, err := s.Lookup(ctx, "stripe:evt_packed")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != StateAnswered || rec.Status != 200 || string(rec.Body) != "success" || rec.Header.Get("Content-Type") != "text/plain" ||
		rec.Copies != 1 || rec.Fingerprint != "fp" || rec.Notification == nil || len(rec.Attempts) != 1 {
		t.Fatalf("the packed answer: %+v %v", rec, err)
	}
	if d := time.Until(rec.ExpiresAt); d < 59*time.Minute || d > time.Hour+time.Second {
		t.Errorf("the answer ends %v away, want about its ttl (1h)", d)
	}
	if ttl := srv.Client().PTTL(ctx, s.hashKey("stripe:evt_packed")).Val(); ttl < 59*time.Minute {
		t.Errorf("the answered key lives %v, want its ttl", ttl)
	}
	if r := claim(t, s, "stripe:evt_packed", "other", time.Minute, Conflict); r.Record.Fingerprint != "fp" {
		t.Errorf("a copy with another fingerprint: %+v", r.Record)
	}

	// A duplicate counted in flight: the completion settles the record
	// value by value, the copies counted kept, its waiter woken.
	won = claim(t, s, "stripe:evt_touched", "fp", time.Minute, Won)
	claim(t, s, "stripe:evt_touched", "fp", time.Minute, InFlight)
	woken, stop, err := s.Wait(ctx, "stripe:evt_touched")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	clock = srv.CommandCalls("time")
	if err := s.Complete(ctx, "stripe:evt_touched", won.Token, a, time.Hour, j); err != nil {
		t.Fatal(err)
	}
	if got := srv.CommandCalls("time") - clock; got == 0 {
		t.Errorf("completing a touched claim did not read the clock: it was not settled value by value")
	}
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Errorf("the waiter was not woken")
	}
	rec, err = s.Lookup(ctx, "stripe:evt_touched")
	if err != nil || rec.State != StateAnswered || rec.Copies != 2 || string(rec.Body) != "success" || rec.Notification == nil || len(rec.Attempts) != 1 {
		t.Fatalf("the touched claim's answer: %+v %v", rec, err)
	}

	// A claim that ran out and was claimed again: the first token no
	// longer holds it, packed or not.
	won = claim(t, s, "stripe:evt_lost", "fp", 100*time.Millisecond, Won)
	time.Sleep(300 * time.Millisecond)
	again := claim(t, s, "stripe:evt_lost", "fp", time.Minute, Won)
	if err := s.Complete(ctx, "stripe:evt_lost", won.Token, a, time.Hour, j); err != ErrNotOwner {
		t.Errorf("completing a lost claim: %v, want ErrNotOwner", err)
	}
	if err := s.Complete(ctx, "stripe:evt_lost", again.Token, a, time.Hour, j); err != nil {
		t.Errorf("completing the claim that holds it: %v", err)
	}
}

// The answered record the gateway packs (newAnsweredRecord) is the one the
// script writes value by value from the same claim, byte for byte but for
// the completion's times (the two are written apart, in two languages).
func TestRedisPackedAnswerIsTheScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := ctxT(t)
	const key = "stripe:evt_twin"
	for _, tc := range []struct {
		name string
		a    Answer
		j    Journal
	}{
		{"journaled", Answer{Status: 200, Header: http.Header{"Content-Type": {"text/plain"}, "X-A": {"1", "2"}}, Body: []byte("success"), BodyCached: true},
			Journal{Notification: stripeEventNotification(), Attempt: attempt(200, AttemptAnswered, "success")}},
		{"journaled_short", Answer{Status: 200, Body: []byte("success"), BodyCached: true}, // a notification stored raw
			Journal{Notification: &Notification{Method: "POST", URI: "/notify", Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}},
				Body: []byte("out_trade_no=o-1&total_amount=9.90"), BodySize: 34}, Attempt: attempt(200, AttemptAnswered, "success")}},
		{"bare", Answer{Status: 204}, Journal{}},
		{"body_not_cached", Answer{Status: 200, Body: []byte("big")}, Journal{Attempt: attempt(200, AttemptAnswered, "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packed := NewRedis(c, RedisOptions{Prefix: "pk" + tc.name})
			settled := NewRedis(c, RedisOptions{Prefix: "st" + tc.name})
			now := time.Now().UnixMilli()
			// The same claim on both: packed's token tells its record,
			// settled's does not.
			tp := setClaimToken(newToken(), now, 60000, "fp")
			ts := newToken()
			for s, tok := range map[*Redis]string{packed: tp, settled: ts} {
				if err := c.Set(ctx, s.hashKey(key), newClaimRecord(key, "fp", tok, now, now+60000), time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			clock := srv.CommandCalls("time")
			if err := packed.Complete(ctx, key, tp, tc.a, time.Hour, tc.j); err != nil {
				t.Fatal(err)
			}
			if got := srv.CommandCalls("time") - clock; got != 0 {
				t.Fatalf("the packed completion read the clock %d times: not packed", got)
			}
			if err := settled.Complete(ctx, key, ts, tc.a, time.Hour, tc.j); err != nil {
				t.Fatal(err)
			}
			var raw [2][]string
			for i, s := range []*Redis{packed, settled} {
				v, err := c.Get(ctx, s.hashKey(key)).Result()
				if err != nil {
					t.Fatal(err)
				}
				if raw[i], err = rawValues(v); err != nil {
					t.Fatal(err)
				}
			}
			times := map[int]bool{11: true, 12: true} // expires, changed
			for i := range raw[0] {
				name := "journal"
				if i < len(recordFields) {
					name = recordFields[i]
				}
				switch {
				case times[i]:
					if len(raw[0][i]) != len(raw[1][i]) {
						t.Errorf("%s: packed %q, settled %q, want times in ms", name, raw[0][i], raw[1][i])
					}
				case raw[0][i] != raw[1][i]:
					t.Errorf("%s: packed %q, settled %q", name, raw[0][i], raw[1][i])
				}
			}
		})
	}
}

// rawValues splits a record's value (record.lua) into its 22 values as
// packed, type byte and all, so false and "" differ.
func rawValues(p string) ([]string, error) {
	var v []string
	for p != "" {
		if p[0] == 0xc2 {
			v, p = append(v, p[:1]), p[1:]
			continue
		}
		l, rest, ok := msgpackString(p)
		if !ok || l > len(rest) {
			return nil, errCorrupt
		}
		n := len(p) - len(rest) + l
		v, p = append(v, p[:n]), p[n:]
	}
	if len(v) != recordWidth {
		return nil, errCorrupt
	}
	return v, nil
}

// A SET claim's token reads back as what it was made of; any other token
// reads as none.
func TestSetClaimToken(t *testing.T) {
	random := newToken()
	for _, fp := range []string{"", "fp", strings.Repeat("ab", 32), "a.b.c"} {
		tok := setClaimToken(random, 1764900000123, 30000, fp)
		c, ok := parseSetClaimToken(tok)
		if !ok || c.at != 1764900000123 || c.lock != 30000 || c.fingerprint != fp || !strings.HasPrefix(tok, random+".") {
			t.Errorf("fingerprint %q: token %q read as %+v %v", fp, tok, c, ok)
		}
	}
	if tok := setClaimToken(random, 1, 1, strings.Repeat("x", maxTokenFingerprint+1)); tok != random {
		t.Errorf("a fingerprint past the bound made token %q, want the plain one", tok)
	}
	for _, tok := range []string{random, "t1", "", random + ".", random + ".zz", random + ".1.", random + ".-1.5.fp", random + ".1.0.fp", "x" + random[1:] + "1.1.fp"} {
		if c, ok := parseSetClaimToken(tok); ok {
			t.Errorf("token %q read as a SET claim's: %+v", tok, c)
		}
	}
}

// A replay counts its copy in the record's first values and leaves the
// journal after them as it is, byte for byte, without a clock read: when
// it was last seen is the gateway's time, and the answer's end its key's.
func TestRedisReplayLeavesTheJournalAsItIs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	for _, version := range []int{6, 7} { // the claim a script first, or a SET
		s := NewRedis(c, RedisOptions{Prefix: "rp" + strconv.Itoa(version)})
		s.UseServerVersion(version)
		ctx := ctxT(t)
		a := Answer{Status: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("success"), BodyCached: true}
		j := Journal{Notification: stripeEventNotification(), Attempt: attempt(200, AttemptAnswered, "success")}
		won := claim(t, s, "stripe:evt_replayed", "fp", time.Minute, Won)
		if err := s.Complete(ctx, "stripe:evt_replayed", won.Token, a, time.Hour, j); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "stripe:evt_replayed", "fp", time.Minute, Answered) // the script loaded
		read := func() []string {
			t.Helper()
			v, err := c.Get(ctx, s.hashKey("stripe:evt_replayed")).Result()
			if err != nil {
				t.Fatal(err)
			}
			raw, err := rawValues(v)
			if err != nil {
				t.Fatal(err)
			}
			return raw
		}
		before, clock := read(), srv.CommandCalls("time")
		at := time.Now().UnixMilli()
		r := claim(t, s, "stripe:evt_replayed", "fp", time.Minute, Answered)
		if got := srv.CommandCalls("time") - clock; got != 0 {
			t.Errorf("Redis %d: a replay read the clock %d times, want 0", version, got)
		}
		if r.Record.Status != 200 || string(r.Record.Body) != "success" || r.Record.Copies != 3 || r.Record.LastSeen.UnixMilli() < at {
			t.Errorf("Redis %d: the replay's record %+v", version, r.Record)
		}
		after := read()
		for i := range before {
			switch i {
			case 7, 14: // copies, nr: counted
				n, _, _ := msgpackString(after[i])
				if want := map[int]string{7: "3", 14: "2"}[i]; after[i][len(after[i])-n:] != want {
					t.Errorf("Redis %d: %s %q after the replay, want %s", version, recordFields[i], after[i], want)
				}
			case 10: // last: the gateway's time
				n, _, _ := msgpackString(after[i])
				if ms, err := strconv.ParseInt(after[i][len(after[i])-n:], 10, 64); err != nil || ms < at {
					t.Errorf("Redis %d: last %q after the replay, want the copy's time (>= %d)", version, after[i], at)
				}
			default:
				if after[i] != before[i] {
					t.Errorf("Redis %d: value %d changed by the replay: %q → %q", version, i, before[i], after[i])
				}
			}
		}
		if ttl := c.PTTL(ctx, s.hashKey("stripe:evt_replayed")).Val(); ttl < 59*time.Minute {
			t.Errorf("Redis %d: the replayed key lives %v, want its ttl kept", version, ttl)
		}
		rec, err := s.Lookup(ctx, "stripe:evt_replayed")
		if err != nil || rec.Notification == nil || len(rec.Attempts) != 1 || rec.CopyOutcomes.Replayed != 2 {
			t.Errorf("Redis %d: the record after replays: %+v %v", version, rec, err)
		}
		s.Close()
	}
}
