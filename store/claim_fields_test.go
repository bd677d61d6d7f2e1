package store

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClaimScriptFields: record.lua names a record's fields in
// recordFields' order (then the token, the notification and the
// attempts), as unpackRecord reads them; the claim script answers a
// duplicate with the record it wrote, of which Claim reads replayFields
// (a replay) or claimFields (any other).
func TestClaimScriptFields(t *testing.T) {
	m := regexp.MustCompile(`(?s)\nlocal (KEY, .*?) =`).FindStringSubmatch(recordLua)
	if m == nil {
		t.Fatal("record.lua names no fields")
	}
	var names []string // record.lua's constant → its field
	for _, f := range strings.Split(m[1], ",") {
		names = append(names, strings.TrimSpace(f))
	}
	field := func(name string) string {
		switch name {
		case "CACHED":
			return "body_cached"
		case "TOKEN", "NOTIF", "ATTS":
			return strings.ToLower(name) + "*"
		}
		return strings.ToLower(name)
	}
	var got []string
	for _, n := range names {
		got = append(got, field(n))
	}
	want := append(slices.Clone(recordFields), "token*", "notif*", "atts*")
	if !slices.Equal(got, want) || recordToken != len(recordFields) || recordNotif != recordToken+1 ||
		recordAttempts != recordNotif+1 || recordWidth != len(want) {
		t.Fatalf("record.lua's fields %v, the gateway's %v", got, want)
	}
	// A duplicate's reply is the record as the script wrote it, which
	// Claim reads with unpackRecord.
	if n, m := strings.Count(claimLua, "return {'replayed', v}"), strings.Count(claimLua, ", save(h, r)}"); n != 1 || m != 1 {
		t.Fatalf("claim.lua answers %d replays and %d other duplicates with the record it wrote, want 1 and 1", n, m)
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

// setRecordFields sets fields (name, value, …; recordFields' names) of
// the record of h in place, keeping its ttl, as a test's way to age or
// bend it.
func setRecordFields(t *testing.T, c *redis.Client, h string, fields ...string) {
	t.Helper()
	args := make([]any, 0, len(fields))
	for i := 0; i < len(fields); i += 2 {
		at := slices.Index(recordFields, fields[i])
		if at < 0 {
			t.Fatalf("no record field %q", fields[i])
		}
		args = append(args, at+1, fields[i+1])
	}
	err := c.Eval(context.Background(), `local r = {cmsgpack.unpack(redis.call('GET', KEYS[1]))}
for i = 1, #ARGV, 2 do r[tonumber(ARGV[i])] = ARGV[i + 1] end
redis.call('SET', KEYS[1], cmsgpack.pack(unpack(r)), 'KEEPTTL')
return 1`, []string{h}, args...).Err()
	if err != nil {
		t.Fatal(err)
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
	setRecordFields(t, c, s.hashKey(key), "conflicts", "3", "last", "1000", "changed", "1000",
		"ni", "2", "copies", "6", "expires", "1")
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
