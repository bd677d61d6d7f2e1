package store

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestClaimScriptFields: the claim script packs a duplicate's record in
// the order its HMGETs name the fields, and the gateway unpacks it in
// replayFields' order (a replay, with the copy's time after them) or
// claimFields' order (any other); the lists must be one.
func TestClaimScriptFields(t *testing.T) {
	ms := regexp.MustCompile(`(?s)redis\.call\('HMGET', h, (.*?)\)`).FindAllStringSubmatch(claimLua, -1)
	if len(ms) != 2 {
		t.Fatalf("claim.lua has %d HMGETs of the record, want 2 (a replay's, the whole record's)", len(ms))
	}
	for i, want := range [][]string{replayFields[:len(replayFields)-1], claimFields} {
		var got []string
		for _, f := range strings.Split(ms[i][1], ",") {
			got = append(got, strings.Trim(strings.TrimSpace(f), "'"))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("claim.lua's HMGET %d reads %v, the gateway %v", i+1, got, want)
		}
	}
	if replayFields[len(replayFields)-1] != "last" {
		t.Fatalf("a replay's last field is %q, the script sends the copy's time", replayFields[len(replayFields)-1])
	}
	for i, at := range replaySlots {
		if at < 2 {
			t.Fatalf("replayFields[%d] %q is not a record field (or is key or state)", i, replayFields[i])
		}
	}
	if claimFields[0] != "state" {
		t.Fatalf("claimFields starts with %q; Claim reads the state the script judged there", claimFields[0])
	}
	for i, at := range claimSlots {
		if at < 1 {
			t.Fatalf("claimFields[%d] %q is not a record field (or is key)", i, claimFields[i])
		}
	}
}

// A claim that ran out with nothing to keep leaves its fields until Redis
// expires the hash (the script judges by the record's expires, Redis by
// the key's TTL, a millisecond apart at most). The next claim starts a
// new record: none of the old one's counters and times may show through
// the field a claim no longer writes (conflicts), nor through those it
// never wrote (ni).
func TestRedisClaimOverStaleRecord(t *testing.T) {
	s, c := redisStore(t)
	ctx := context.Background()
	const key = "stale-claim"
	old, err := s.Claim(ctx, key, "fp", time.Minute)
	if err != nil || old.Outcome != Won {
		t.Fatalf("claim: %+v %v", old, err)
	}
	// Copies and a conflict while it was in flight, then it ran out.
	if err := c.HSet(ctx, s.hashKey(key), "conflicts", "3", "last", "1000", "changed", "1000",
		"ni", "2", "copies", "6", "expires", "1").Err(); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	won, err := s.Claim(ctx, key, "fp2", time.Minute)
	if err != nil || won.Outcome != Won || won.Token == old.Token {
		t.Fatalf("claim over the stale record: %+v %v", won, err)
	}
	r, err := s.Lookup(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != StateInFlight || r.Copies != 1 || r.Conflicts != 0 || r.CopyOutcomes.InFlight != 0 ||
		r.Fingerprint != "fp2" || r.FirstSeen.Before(before) ||
		!r.LastSeen.Equal(r.FirstSeen) || !r.Changed.Equal(r.FirstSeen) {
		t.Fatalf("the new record shows the stale one: %+v", r)
	}
	time.Sleep(5 * time.Millisecond)
	dup, err := s.Claim(ctx, key, "fp2", time.Minute)
	if err != nil || dup.Outcome != InFlight {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
	if r, err = s.Lookup(ctx, key); err != nil {
		t.Fatal(err)
	}
	if r.Copies != 2 || !r.LastSeen.After(r.FirstSeen) || !r.Changed.Equal(r.FirstSeen) {
		t.Fatalf("after a duplicate: copies %d, first %v, last %v, changed %v", r.Copies, r.FirstSeen, r.LastSeen, r.Changed)
	}
}
