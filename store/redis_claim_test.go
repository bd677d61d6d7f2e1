package store

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// A first copy's claim on Redis 7 is one SET beside one HGET of its
// order, in one round trip, and runs no script; a duplicate's claim runs
// the claim script, which counts it.
func TestRedisFirstCopyClaimIsNoScript(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	s := NewRedis(c, RedisOptions{Prefix: "sc"})
	s.UseServerVersion(7)
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t)
	// The claim script loaded (its first EVALSHA fails, then an EVAL).
	claim(t, s, "warm", "", time.Minute, Won)
	claim(t, s, "warm", "", time.Minute, InFlight)

	scripts, sets, hgets := srv.ScriptCalls(), srv.CommandCalls("set"), srv.CommandCalls("hget", "hmget")
	won := claim(t, s, "stripe:evt_A", "fp", time.Minute, Won)
	if got := srv.ScriptCalls() - scripts; got != 0 {
		t.Errorf("a first copy's claim ran %d scripts, want 0", got)
	}
	if got := srv.CommandCalls("set") - sets; got != 1 {
		t.Errorf("a first copy's claim ran %d SETs, want 1", got)
	}
	if got := srv.CommandCalls("hget", "hmget") - hgets; got != 1 {
		t.Errorf("a first copy's claim asked its order %d times, want 1", got)
	}
	rec, err := s.Lookup(ctx, "stripe:evt_A")
	if err != nil || rec.State != StateInFlight || rec.Copies != 1 || rec.Fingerprint != "fp" || rec.CopyOutcomes.Forwarded != 1 {
		t.Fatalf("the claim's record: %+v %v", rec, err)
	}
	if d := time.Until(rec.ExpiresAt); d < 50*time.Second || d > time.Minute+time.Second {
		t.Errorf("the claim's end is %v away, want about its lock (1m)", d)
	}

	scripts = srv.ScriptCalls()
	if r := claim(t, s, "stripe:evt_A", "fp", time.Minute, InFlight); r.Record.Copies != 2 {
		t.Errorf("the duplicate's record: %+v, want 2 copies", r.Record)
	}
	if got := srv.ScriptCalls() - scripts; got != 1 {
		t.Errorf("a duplicate's claim ran %d scripts, want 1 (the claim script)", got)
	}
	if err := s.Complete(ctx, "stripe:evt_A", won.Token, Answer{Status: 200, BodyCached: true, Body: []byte("ok")}, time.Hour, Journal{}); err != nil {
		t.Fatal(err)
	}
	if r := claim(t, s, "stripe:evt_A", "fp", time.Minute, Answered); r.Record.Status != 200 || string(r.Record.Body) != "ok" || r.Record.Copies != 3 {
		t.Errorf("the replay: %+v", r.Record)
	}
}

// A claim made by a SET carries the gateway's estimate of its end, but its
// lock is judged by the server: a gateway clock an hour behind or ahead
// neither frees the key early nor holds it past its lock, and a Leave
// still lets it run out at its lock.
func TestRedisSetClaimJudgedByServerClock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	s := NewRedis(c, RedisOptions{Prefix: "sk"})
	s.UseServerVersion(7)
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t)
	// setClaim writes key's claim for token as a gateway whose clock is
	// skew off would, with the lock lock.
	setClaim := func(key, token string, skew, lock time.Duration) {
		t.Helper()
		now := time.Now().Add(skew).UnixMilli()
		if err := c.Set(context.Background(), s.hashKey(key), newClaimRecord(key, "", token, now, now+lock.Milliseconds()), lock).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Behind: its estimate has passed, its lock has not.
	setClaim("behind", "t1", -time.Hour, 10*time.Second)
	claim(t, s, "behind", "", time.Minute, InFlight)
	if rec, err := s.Lookup(ctx, "behind"); err != nil || rec.State != StateInFlight {
		t.Fatalf("lookup: %+v %v, want in flight", rec, err)
	}
	if err := s.Renew(ctx, "behind", "t1", 10*time.Second); err != nil {
		t.Fatalf("renewing a held claim: %v", err)
	}
	if err := s.Complete(ctx, "behind", "t1", Answer{Status: 200}, time.Hour, Journal{}); err != nil {
		t.Fatalf("completing a held claim: %v", err)
	}

	// Ahead: its estimate is an hour on, its lock ran out.
	setClaim("ahead", "t2", time.Hour, 200*time.Millisecond)
	time.Sleep(400 * time.Millisecond)
	claim(t, s, "ahead", "", time.Minute, Won)

	// Behind, then left (kept an hour with its journal): it runs out at
	// its lock, not at the estimate (already past) nor an hour on.
	setClaim("left", "t3", -time.Hour, 700*time.Millisecond)
	if err := s.Leave(ctx, "left", "t3", time.Hour, Journal{Attempt: &Attempt{Start: time.Now(), Status: 502}}); err != nil {
		t.Fatalf("leaving a held claim: %v", err)
	}
	claim(t, s, "left", "", time.Minute, InFlight)
	time.Sleep(900 * time.Millisecond)
	claim(t, s, "left", "", time.Minute, Won)
	if ttl := c.PTTL(context.Background(), s.hashKey("left")).Val(); ttl < 50*time.Second {
		t.Errorf("the left record lives %v, want its ttl kept", ttl)
	}
}

// While most recent claims found a record (a storm of retries), a claim
// goes straight to the script, which judges a duplicate in one round
// trip; once fresh keys are the rule again, first copies are SETs again.
func TestRedisClaimFollowsTheShareOfDuplicates(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := NewRedis(srv.Client(), RedisOptions{Prefix: "sd"})
	s.UseServerVersion(7)
	t.Cleanup(func() { s.Close() })
	ctx := ctxT(t)
	won := claim(t, s, "replayed", "", time.Minute, Won)
	if err := s.Complete(ctx, "replayed", won.Token, Answer{Status: 200}, time.Hour, Journal{}); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		claim(t, s, "replayed", "", time.Minute, Answered)
	}
	// A storm: the duplicate costs one round trip, a script.
	// (A SET claim asks the order with an HMGET; the script, finding a
	// record, does not.)
	scripts, hgets := srv.ScriptCalls(), srv.CommandCalls("hget", "hmget")
	claim(t, s, "replayed", "", time.Minute, Answered)
	if ds, dh := srv.ScriptCalls()-scripts, srv.CommandCalls("hget", "hmget")-hgets; ds != 1 || dh != 0 {
		t.Errorf("a duplicate in a storm of them ran %d scripts and %d HGETs, want 1 and 0 (the script alone)", ds, dh)
	}
	// Fresh keys again: within some 40 claims, a first copy is a SET.
	for i := range 40 {
		scripts = srv.ScriptCalls()
		claim(t, s, fmt.Sprintf("fresh%d", i), "", time.Minute, Won)
		if srv.ScriptCalls() == scripts {
			if i == 0 {
				t.Error("the first copy right after a storm of duplicates was a SET, want the script")
			}
			return
		}
	}
	t.Error("after 40 first copies, a first copy still ran the claim script")
}

// newClaimRecord writes the record claim.lua writes for a new claim, value
// for value, but for the times (the gateway's clock, not the server's) and
// the token (marked "~" until a script touches the record): the two are
// written apart, so they must not drift apart.
func TestRedisSetClaimRecordIsTheScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	s := NewRedis(c, RedisOptions{Prefix: "sr"}) // the claim script: no server version given
	t.Cleanup(func() { s.Close() })
	won := claim(t, s, "stripe:evt_twin", "fp", time.Minute, Won)
	raw, err := c.Get(ctxT(t), s.hashKey("stripe:evt_twin")).Result()
	if err != nil {
		t.Fatal(err)
	}
	script, err := unpackRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	set, err := unpackRecord(string(newClaimRecord("stripe:evt_twin", "fp", won.Token, now, now+60000)))
	if err != nil {
		t.Fatal(err)
	}
	times := map[int]bool{9: true, 10: true, 11: true, 12: true} // first, last, expires, changed
	for i := range script {
		switch {
		case times[i]:
			if _, err := strconv.ParseInt(set[i], 10, 64); err != nil || script[i] == "" {
				t.Errorf("%s: the script's %q, the SET's %q, want times in ms", recordFields[i], script[i], set[i])
			}
		case i == recordToken:
			if set[i] != "~"+script[i] {
				t.Errorf("token: the script's %q, the SET's %q, want it marked", script[i], set[i])
			}
		case set[i] != script[i]:
			name := "journal"
			if i < len(recordFields) {
				name = recordFields[i]
			}
			t.Errorf("%s: the script's %q, the SET's %q", name, script[i], set[i])
		}
	}
}

// The packed records are allocated at their size: one allocation, not
// grown and not a size class above.
func TestPackedRecordsSized(t *testing.T) {
	long := func(n int) string { return strings.Repeat("k", n) }
	for _, key := range []string{"", "stripe:evt_1", long(31), long(32), long(255), long(256), long(70000)} {
		for _, fp := range []string{"", strings.Repeat("0f", 32), long(200)} {
			for _, at := range []int64{1, 1764900000123} {
				tok := setClaimToken(newToken(), at, 30000, fp)
				if b := newClaimRecord(key, fp, tok, at, at+30000); len(b) != cap(b) {
					t.Errorf("claim record (key %d, fp %d bytes): len %d, cap %d", len(key), len(fp), len(b), cap(b))
				}
				c, _ := parseSetClaimToken(tok)
				for _, a := range []Answer{
					{Status: 200},
					{Status: 201, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("success"), BodyCached: true},
					{Status: 500, Header: http.Header{"X": {long(300)}}, Body: []byte(long(70000)), BodyCached: true},
				} {
					for _, j := range []Journal{{}, {Notification: &Notification{Method: "POST", Body: []byte(long(40))}},
						{Notification: &Notification{Method: "POST"}, Attempt: &Attempt{Start: time.UnixMilli(at), Outcome: AttemptAnswered, Status: 200}}} {
						if b := newAnsweredRecord(key, c, a, at, at+3600000, j); len(b) != cap(b) {
							t.Errorf("answered record (key %d, fp %d, body %d bytes, journal %v): len %d, cap %d",
								len(key), len(fp), len(a.Body), j.Notification != nil, len(b), cap(b))
						}
					}
				}
			}
		}
	}
}
