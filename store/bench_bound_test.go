package store

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkRedisBound measures how little Redis CPU a first copy and an
// uncached replay could cost, whatever the store's layout. The store's
// own cost is BenchmarkStoreCPU's, on the same client and path (Batcher, 32
// callers).
//
// A first copy writes what the contract keeps: the record, the journal
// (stripeLikeNotification's compressed form and one attempt, 631 + ~30
// B), the order's event, the listing index's entry and the wake-up of
// waiting duplicates, one value per key, in two round trips. Its cases:
//   - nginx_gate: the commands of a hand-written nginx + Lua gate: SET NX
//     and GET, then its script that checks the token and SETs the answer.
//     It keeps none of the above;
//   - plain: those writes as the fewest plain commands, with no checks;
//   - lua: the same writes in two minimal scripts, the completion checking
//     the owner token. Only a script can make that check on Redis 7.0 (no
//     compare-and-set command), and a completion that lost its claim must
//     write nothing, so every write of the completion goes in it.
//
// A replay reads the answer and counts the copy: plain (GET and HINCRBY),
// lua (the same in a script), lua_packed_answer (a hash of the store's
// record fields, with the answer packed into one field, the
// counters beside it) and store (the store's claim of a record it wrote). The
// one_string cases keep the whole record in one string, its state and
// fingerprint at the head for the script to check, and call the script as
// the store calls its claim (4 keys, 5 arguments): one_string counts
// nothing; one_string_counted counts the copy as the record keeps it
// (copies, replayed copies, last seen on the server's clock) in a hash of
// its own.
func BenchmarkRedisBound(b *testing.B) {
	c, pid := cpuBenchRedis(b)
	batch := NewBatcher(c)
	ctx := context.Background()
	// send sends cmds together, as the store does (one round trip when
	// nothing else is under way), and waits for all of them.
	send := func(b *testing.B, cmds ...redis.Cmder) {
		_ = batch.Do(ctx, cmds...)
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil && err != redis.Nil {
				b.Error(cmd.Name(), err)
			}
		}
	}
	script := func(b *testing.B, s *redis.Script, keys []string, args ...any) any {
		a := []any{"evalsha", s.Hash(), len(keys)}
		for _, k := range keys {
			a = append(a, k)
		}
		cmd := redis.NewCmd(ctx, append(a, args...)...)
		send(b, cmd)
		return cmd.Val()
	}

	journal := string(encodeNotification(stripeLikeNotification())) + string(encodeAttempt(attempt(200, AttemptAnswered, "success")))
	if len(journal) < 600 || len(journal) > 720 {
		b.Fatalf("journal of %d bytes, want the store's ~660", len(journal))
	}
	const token = "9f86d081884c7d659a2feaa0c55ad015"       // as newToken makes them
	claimed := token + strings.Repeat("c", 150-len(token)) // token, key, state, fp, counters, times
	answered := strings.Repeat("a", 230)                   // … and status, headers, body
	const event, value = "paid", "1764600000000:2000"
	var seq atomic.Int64
	key := func() string { return "bound:{" + strconv.FormatInt(seq.Add(1), 10) + "}" }
	lock, ttl, ottl := ms(30*time.Second), ms(time.Hour), ms(72*time.Hour)

	claimLua := redis.NewScript(`
local t = redis.call('TIME')
if redis.call('HGET', KEYS[2], ARGV[3]) then return 0 end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0`)
	completeLua := redis.NewScript(`
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
if not v or v:sub(1, #ARGV[9]) ~= ARGV[9] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
redis.call('PEXPIRE', KEYS[3], ARGV[6])
redis.call('ZADD', KEYS[4], 0, ARGV[7])
redis.call('PUBLISH', ARGV[8], 'c')
return 1`)
	// The nginx + Lua gate's completion script, verbatim.
	ngxComplete := redis.NewScript("if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('SET',KEYS[1],ARGV[2],'PX',ARGV[3]) end return 0")
	replayLua := redis.NewScript(`
local v = redis.call('GET', KEYS[1])
redis.call('HINCRBY', KEYS[2], 'copies', 1)
return v`)
	packedReplayLua := redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local v = redis.call('HMGET', KEYS[1], 'state', 'fp', 'rp', 'copies', 'nr', 'first')
if v[1] ~= 'answered' then return false end
if ARGV[1] ~= '' and v[2] and v[2] ~= '' and v[2] ~= ARGV[1] then return 'conflict' end
local c, n = (tonumber(v[4]) or 0) + 1, (tonumber(v[5]) or 0) + 1
redis.call('HSET', KEYS[1], 'copies', c, 'nr', n, 'last', now)
return {'answered', v[3], c, n, v[6], now}`)
	// The record's head: "A" (answered), the fingerprint's length in two
	// digits, the fingerprint; then the rest of the record.
	oneStringRead := `
local v = redis.call('GET', KEYS[1])
if not v or v:sub(1, 1) ~= 'A' then return false end
local n = tonumber(v:sub(2, 3))
if ARGV[2] ~= '' and n > 0 and v:sub(4, 3 + n) ~= ARGV[2] then return 'conflict' end
`
	oneStringLua := redis.NewScript(oneStringRead + `return {'replayed', v}`)
	oneStringCountedLua := redis.NewScript(clockLua + `
local now = string.format('%d', now_ms())` + oneStringRead + `
local c = redis.call('HINCRBY', KEYS[2], 'copies', 1)
local r = redis.call('HINCRBY', KEYS[2], 'nr', 1)
redis.call('HSET', KEYS[2], 'last', now)
return {'replayed', v, c, r, now}`)
	for _, s := range []*redis.Script{claimLua, completeLua, ngxComplete, replayLua, packedReplayLua, oneStringLua, oneStringCountedLua} {
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}

	st := NewRedis(c, RedisOptions{})
	b.Cleanup(func() { st.Close() })
	won, err := st.Claim(ctx, "bound:stored", "fp", time.Minute)
	if err != nil || won.Outcome != Won {
		b.Fatal(won, err)
	}
	if err := st.Complete(ctx, "bound:stored", won.Token, Answer{Status: 200, Header: answer.Header, Body: []byte("success"), BodyCached: true}, time.Hour, Journal{}); err != nil {
		b.Fatal(err)
	}
	// The store's fields as a hash (its layout before a record was one
	// value, record.lua), the answer packed into one field.
	const stored = "bound:packed"
	if err := c.HSet(ctx, stored, "key", "bound:stored", "state", "answered", "fp", "fp", "copies", "1",
		"first", "1764600000000", "last", "1764600000000", "expires", "1764603600000",
		"changed", "1764600000000", "nf", "1", "token", "", "rp", strings.Repeat("r", 60)).Err(); err != nil {
		b.Fatal(err)
	}
	if err := c.Set(ctx, "bound:replay", answered, 0).Err(); err != nil {
		b.Fatal(err)
	}
	oneRecord := "A02fp" + answered
	if err := c.Set(ctx, "bound:one", oneRecord, 0).Err(); err != nil {
		b.Fatal(err)
	}
	if err := c.HSet(ctx, "bound:one:c", "copies", 1, "nr", 0, "last", "1764600000000").Err(); err != nil {
		b.Fatal(err)
	}
	// The arguments of the store's claim: its 4 keys and 5 arguments.
	oneKeys := []string{"bound:one", "bound:one:c", "bound:one:n", "bound:one:a"}
	oneArgs := []any{token, "fp", lock, "bound:one", ""}

	firstCopy := func(b *testing.B, k string) {
		if script(b, claimLua, []string{k, k + ":o"}, claimed, lock, event) != int64(1) {
			b.Error("claim lost")
		}
		if script(b, completeLua, []string{k, k + ":n", k + ":o", "bound:ix"},
			answered, ttl, journal, event, value, ottl, k+"\x00"+value, "bound:wake", token) != int64(1) {
			b.Error("completion lost")
		}
	}
	cases := []struct {
		name string
		op   func(b *testing.B)
	}{
		{"first_copy/nginx_gate", func(b *testing.B) {
			k := key()
			send(b, redis.NewStatusCmd(ctx, "set", k, token, "nx", "px", lock), redis.NewStringCmd(ctx, "get", k))
			if script(b, ngxComplete, []string{k}, token, answered, ttl) != "OK" {
				b.Error("completion lost")
			}
		}},
		{"first_copy/plain", func(b *testing.B) {
			k := key()
			send(b, redis.NewStatusCmd(ctx, "set", k, claimed, "nx", "px", lock),
				redis.NewStringCmd(ctx, "hget", k+":o", event))
			send(b, redis.NewStatusCmd(ctx, "set", k, answered, "px", ttl),
				redis.NewStatusCmd(ctx, "set", k+":n", journal, "px", ttl),
				redis.NewIntCmd(ctx, "hset", k+":o", event, value),
				redis.NewBoolCmd(ctx, "pexpire", k+":o", ottl),
				redis.NewIntCmd(ctx, "zadd", "bound:ix", 0, k+"\x00"+value),
				redis.NewIntCmd(ctx, "publish", "bound:wake", "c"))
		}},
		{"first_copy/lua", func(b *testing.B) { firstCopy(b, key()) }},
		{"first_copy/lua_claim_alone", func(b *testing.B) {
			k := key()
			if script(b, claimLua, []string{k, k + ":o"}, claimed, lock, event) != int64(1) {
				b.Error("claim lost")
			}
		}},
		{"replay/plain", func(b *testing.B) {
			get := redis.NewStringCmd(ctx, "get", "bound:replay")
			send(b, get, redis.NewIntCmd(ctx, "hincrby", "bound:replay:c", "copies", 1))
			if get.Val() != answered {
				b.Error("no answer")
			}
		}},
		{"replay/lua", func(b *testing.B) {
			if script(b, replayLua, []string{"bound:replay", "bound:replay:c"}) != answered {
				b.Error("no answer")
			}
		}},
		{"replay/lua_packed_answer", func(b *testing.B) {
			if v, _ := script(b, packedReplayLua, []string{stored}, "fp").([]any); len(v) != 6 || v[0] != "answered" {
				b.Errorf("replay: %v", v)
			}
		}},
		{"replay/one_string", func(b *testing.B) {
			if v, _ := script(b, oneStringLua, oneKeys, oneArgs...).([]any); len(v) != 2 || v[1] != oneRecord {
				b.Errorf("replay: %v", v)
			}
		}},
		{"replay/one_string_counted", func(b *testing.B) {
			if v, _ := script(b, oneStringCountedLua, oneKeys, oneArgs...).([]any); len(v) != 5 || v[1] != oneRecord {
				b.Errorf("replay: %v", v)
			}
		}},
		{"replay/store", func(b *testing.B) {
			if r, err := st.Claim(ctx, "bound:stored", "fp", time.Minute); err != nil || r.Outcome != Answered {
				b.Error(r, err)
			}
		}},
	}
	for _, cs := range cases {
		b.Run(cs.name, func(b *testing.B) {
			cs.op(b)
			measureCPU(b, pid, func() { cs.op(b) })
		})
	}
}
