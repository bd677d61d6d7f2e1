package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A first copy's claim is one SET … NX, not a script. The script's
// fixed cost (the EVALSHA, its arguments crossing into Lua, the clock,
// packing the record in Lua) was about a third of Redis's work for a first
// copy; the SET writes the same record, packed here. Beside it, in the
// same round trip, an HMGET asks the key's order whether its event already
// ran (a key of its own event, such as Stripe's, has an order too), as the
// script does before it claims. When the key already has a record the SET
// writes nothing, and the claim script then judges the record
// (a replay, a copy in flight, a conflict, a claim that ran out): a
// duplicate costs a second round trip, a first copy one.
//
// Counted in Redis's instructions (BenchmarkRedisInstructions), a first
// copy's claim and completion cost 84k (91k journaled: the completion sets
// an answered record packed here too, setClaimToken) where the claim
// script and a completion that settles value by value cost 208k (246k),
// and a replay 93k where the script alone costs 79k. So while most recent
// claims found a record (a storm of retries, a replay benchmark: past 9 in
// 10, where the two costs meet), a claim goes straight to the script.
//
// Redis 7 only, where it is tested (the store tells the server's version by
// the script flags it reads: UseServerVersion; a Redis 6 keeps the claim
// script), and not with WaitReplicas, whose WAIT rides with the script
// (replicated).

// dupsScale is the fixed point of Redis.dups; setClaimsBelow is the share
// of duplicates (9 in 10) past which a claim is a script first.
const dupsScale, setClaimsBelow = 1024, 9 * 1024 / 10

// setClaims reports whether a claim may be a SET (above).
func (s *Redis) setClaims() bool {
	return s.flagged.Load() && s.opts.WaitReplicas <= 0 && s.dups.Load() < setClaimsBelow
}

// sawClaim notes whether a claim found its key's record (dup), in the
// share of duplicates among recent claims (a moving average over ~16;
// concurrent notes may overwrite each other, which only blurs it).
func (s *Redis) sawClaim(dup bool) {
	var x int32
	if dup {
		x = dupsScale
	}
	p := s.dups.Load()
	s.dups.Store(p + (x-p)/16)
}

// claimByScript claims key for token with the claim script (claim.lua);
// k is s.keys(key, true).
func (s *Redis) claimByScript(ctx context.Context, key string, k []string, token, fingerprint string, lockTTL time.Duration) (ClaimResult, error) {
	order, event := OrderOf(key)
	v, err := s.run(ctx, s.script(claimScript), k, token, fingerprint, ms(lockTTL), key, event, time.Now().UnixMilli()).Slice()
	if err != nil {
		return ClaimResult{}, s.wrap("claim", err)
	}
	if len(v) == 0 {
		return ClaimResult{}, fmt.Errorf("store: redis claim: empty reply")
	}
	var res ClaimResult
	switch str(v[0]) {
	case "won":
		if len(v) > 1 {
			s.ifx.won(key, num(v[1]))
		}
		return ClaimResult{Outcome: Won, Token: token}, nil
	case "order":
		if len(v) < 2 {
			return ClaimResult{}, fmt.Errorf("store: redis claim: order reply without its event")
		}
		return s.claimedOrder(key, order, event, str(v[1]))
	case "replayed":
		res.Outcome = Answered
	case "in_flight":
		res.Outcome = InFlight
	case "conflict":
		res.Outcome = Conflict
	default:
		return ClaimResult{}, fmt.Errorf("store: redis claim: unexpected reply %q", v[0])
	}
	// The reply is the record as the script left it (record.lua); a
	// replay reads replayFields of it, any other copy claimFields.
	var rec []string
	if len(v) == 2 {
		rec, err = unpackRecord(str(v[1]))
	} else {
		err = fmt.Errorf("store: redis claim: %s reply without its record", v[0])
	}
	switch {
	case err != nil:
	case res.Outcome == Answered: // "replayed": what a replay needs
		var buf [16]string
		res.Record, err = parseReplay(key, pick(buf[:0], rec, replaySlots))
	default:
		var buf [16]string
		res.Record, err = parseSome(key, "", claimSlots, pick(buf[:0], rec, claimSlots))
		if err == nil {
			// The script judged expiry by the server's clock when it
			// ran; the record it returns is as of then, not as of the
			// reply.
			res.Record.State = State(rec[1])
		}
	}
	if err != nil {
		return ClaimResult{}, s.wrap("claim", err)
	}
	return res, nil
}

// claimedOrder is the claim's answer for key, whose event ran in its
// order (ran: the event's stored value) and has no record.
func (s *Redis) claimedOrder(key, order, event, ran string) (ClaimResult, error) {
	ev, err := decodeOrderEvent(order, event, ran)
	if err != nil {
		return ClaimResult{}, s.wrap("claim", err)
	}
	return ClaimResult{Outcome: Answered, Record: fromOrder(key, ev)}, nil
}

// claimBySet tries to claim key for token with one SET NX, beside an HMGET
// of its order; k is s.keys(key, true). done: res is the claim's
// outcome (won, or the event ran in its order and the key has no record);
// otherwise the key has a record, nothing was written, and the claim
// script is to judge it.
func (s *Redis) claimBySet(ctx context.Context, key string, k []string, token, fingerprint string, lockTTL time.Duration) (res ClaimResult, done bool, err error) {
	now, lock := time.Now().UnixMilli(), ms(lockTTL)
	token = setClaimToken(token, now, lock, fingerprint)
	order, event := OrderOf(key)
	// HMGET of one field, not HGET, and SET … NX without GET: a first
	// copy's answers are then [nil] and OK, never a nil reply, which
	// go-redis turns into an error value (allocations and errors.As on
	// every first copy). The record
	// a duplicate's SET would hand back goes unread: the claim script
	// reads it anyway.
	//
	// The two commands' arguments share one array (a command keeps the
	// slice it is given).
	args := &[...]any{"hmget", k[1], event, "set", k[0], newClaimRecord(key, fingerprint, token, now, now+lock), "px", lock, "nx"}
	ask := redis.NewCmd(ctx, args[:3:3]...)
	set := redis.NewCmd(ctx, args[3:]...)
	if err := s.sendPair(ctx, k[0], ask, set); err != nil {
		return ClaimResult{}, false, s.wrap("claim", err)
	}
	var ran string
	switch v, err := ask.Slice(); {
	case err != nil:
		return ClaimResult{}, false, s.wrap("claim", err)
	case len(v) != 1:
		return ClaimResult{}, false, s.wrap("claim", fmt.Errorf("HMGET of one field answered %d values", len(v)))
	case v[0] != nil:
		ran = str(v[0])
	}
	switch err := set.Err(); {
	case errors.Is(err, redis.Nil): // the key has a record: nothing written
		s.sawClaim(true)
		return ClaimResult{}, false, nil
	case err != nil:
		return ClaimResult{}, false, s.wrap("claim", err)
	}
	s.sawClaim(false)
	if ran != "" {
		// No record, but the event ran in its order: the claim goes as it
		// came (the script would have written nothing).
		if err := s.Release(ctx, key, token, 0, Journal{}); err != nil {
			return ClaimResult{}, false, err
		}
		res, err := s.claimedOrder(key, order, event, ran)
		return res, true, err
	}
	s.ifx.won(key, now)
	return ClaimResult{Outcome: Won, Token: token}, true, nil
}

// sendPair sends a and b, commands on hkey's slot, in one round trip as the
// scripts go (run): in a batch (Batcher), never re-sent on a broken
// connection (where a SET that ran would find a record, this claim's own,
// and take it for another's). An error is its caller's context's: neither
// command may be read.
func (s *Redis) sendPair(ctx context.Context, hkey string, a, b *redis.Cmd) error {
	return s.pathFor(ctx, hkey).batch.Do(ctx, onceCmd{a}, onceCmd{b})
}

// newClaimRecord is a new claim's record as claim.lua would write it
// (record.lua: 22 MessagePack values, strings or false), with one
// difference: its token is marked "~", and its end is the gateway's
// estimate. Its lock is the key's own life (PX), which the first script
// to read the record writes as a time on the server's clock, unmarking
// the token (record.lua, lock_end), so a gateway whose clock is off never
// shortens or stretches a claim. (A gateway of an earlier version reads
// the estimate as the claim's end, and the marked token as another's.)
// Times are the gateway's: when it was first and last seen, for people.
func newClaimRecord(key, fingerprint, token string, now, lockEnd int64) []byte {
	const f = 0xc2 // false: a field not set
	// One allocation, of the record's size: the times and the marked token
	// are written in place.
	b := make([]byte, 0, msgpackStrLen(len(key))+msgpackStrLen(len(StateInFlight))+4+msgpackStrLen(len(fingerprint))+3+
		3*msgpackIntLen(now)+msgpackIntLen(lockEnd)+7+msgpackStrLen(1+len(token))+2)
	b = appendMsgpackStr(b, key)                   // key
	b = appendMsgpackStr(b, string(StateInFlight)) // state
	b = append(b, f, f, f, f)                      // status, headers, body, body_cached
	b = appendMsgpackStr(b, fingerprint)           // fp
	b = appendMsgpackStr(b, "1")                   // copies
	b = append(b, f)                               // conflicts
	at := len(b)
	b = appendMsgpackInt(b, now)           // first
	ns := b[at:]                           // now, packed
	b = append(b, ns...)                   // last
	b = appendMsgpackInt(b, lockEnd)       // expires
	b = append(b, ns...)                   // changed
	b = appendMsgpackStr(b, "1")           // nf
	b = append(b, f, f, f, f, f)           // nr, ni, na, nn, dead
	b = appendMsgpackHead(b, 1+len(token)) // the claim's token, marked
	b = append(append(b, '~'), token...)
	return append(b, f, f) // notification, attempts
}

// A SET claim's token carries what its record holds that its completion
// could not otherwise know: the claim's time, its lock and its
// fingerprint. Complete then packs the claim's record again, byte for
// byte, and the answered record it becomes; while the key still holds
// that claim's record, untouched, the completion script sets the answered
// one as it is (complete.lua). The token's random part alone makes it the
// claim's (newToken); the rest is for Complete. Tokens are the store's:
// callers pass them back as they got them.
//
// <32 hex digits>.<time, ms, base 36>.<lock, ms, base 36>.<fingerprint>

// setClaim is what a SET claim's token tells of its record.
type setClaim struct {
	at, lock    int64 // ms: the claim's time (the gateway's), its lock
	fingerprint string
}

// maxTokenFingerprint bounds the fingerprint a token carries (a digest
// is 64 hex digits); a claim with a longer one gets a plain token, and its
// completion the script's value by value path.
const maxTokenFingerprint = 128

// setClaimToken is the token of a SET claim made at now (ms) for lock ms,
// whose random part is random (newToken).
func setClaimToken(random string, now, lock int64, fingerprint string) string {
	if len(fingerprint) > maxTokenFingerprint {
		return random
	}
	var buf [192]byte // the token's one allocation is its string
	b := append(buf[:0], random...)
	b = strconv.AppendInt(append(b, '.'), now, 36)
	b = strconv.AppendInt(append(b, '.'), lock, 36)
	return string(append(append(b, '.'), fingerprint...))
}

// parseSetClaimToken reads a SET claim's token (setClaimToken); ok is false
// for any other token.
func parseSetClaimToken(token string) (c setClaim, ok bool) {
	const n = 32 // newToken's hex digits
	if len(token) < n+6 || token[n] != '.' {
		return setClaim{}, false
	}
	at, rest, ok1 := strings.Cut(token[n+1:], ".")
	lock, fp, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return setClaim{}, false
	}
	var err1, err2 error
	c.at, err1 = strconv.ParseInt(at, 36, 64)
	c.lock, err2 = strconv.ParseInt(lock, 36, 64)
	if err1 != nil || err2 != nil || c.at <= 0 || c.lock <= 0 {
		return setClaim{}, false
	}
	c.fingerprint = fp
	return c, true
}

// newAnsweredRecord is the record complete.lua writes when it completes
// claim c of key (a claim its SET made, untouched: copies 1, no waiter,
// no journal yet) with answer a and journal j at changed (ms), the key
// kept until expires (ms, the gateway's estimate: the key's own life, on
// the server's clock, is what ends it). For another claim (c zero) its
// claim values are placeholders the script does not read.
func newAnsweredRecord(key string, c setClaim, a Answer, changed, expires int64, j Journal) []byte {
	const f = 0xc2 // false: a field not set
	// The journal's values (journalArgs), made in the notification's
	// scratch buffers and copied into the record: the record is their one
	// allocation.
	sc := notificationScratch.Get().(*notificationBufs)
	defer notificationScratch.Put(sc)
	notif, att := sc.journal(j)
	var body []byte
	cached := "0"
	if a.BodyCached {
		body, cached = a.Body, "1"
	}
	// One allocation, of the record's size: the headers and times are
	// written in place.
	hl := headerLen(a.Header)
	b := make([]byte, 0, msgpackStrLen(len(key))+msgpackStrLen(len(StateAnswered))+msgpackIntLen(int64(a.Status))+
		msgpackStrLen(hl)+msgpackStrLen(len(body))+msgpackStrLen(len(cached))+msgpackStrLen(len(c.fingerprint))+3+
		2*msgpackIntLen(c.at)+msgpackIntLen(expires)+msgpackIntLen(changed)+6+
		setLen(len(att) > 0)+setLen(len(notif) > 0)+orFalseLen(notif)+orFalseLen(att))
	b = appendMsgpackStr(b, key)                         // key
	b = appendMsgpackStr(b, string(StateAnswered))       // state
	b = appendMsgpackInt(b, int64(a.Status))             // status
	b = appendHeader(appendMsgpackHead(b, hl), a.Header) // headers
	b = appendMsgpackStr(b, body)                        // body
	b = appendMsgpackStr(b, cached)                      // body_cached
	b = appendMsgpackStr(b, c.fingerprint)               // fp
	b = appendMsgpackStr(b, "1")                         // copies
	b = append(b, f)                                     // conflicts
	at := len(b)
	b = appendMsgpackInt(b, c.at)    // first
	b = append(b, b[at:]...)         // last
	b = appendMsgpackInt(b, expires) // expires
	b = appendMsgpackInt(b, changed) // changed
	b = appendMsgpackStr(b, "1")     // nf
	b = append(b, f, f)              // nr, ni
	b = appendSet(b, len(att) > 0)   // na
	b = appendSet(b, len(notif) > 0) // nn
	b = append(b, f, f)              // dead, token
	b = appendOrFalse(b, notif)      // notification
	return appendOrFalse(b, att)     // attempts
}

// appendSet appends "1" when set, else false (a counter or mark the
// scripts leave unset).
func appendSet(b []byte, set bool) []byte {
	if set {
		return appendMsgpackStr(b, "1")
	}
	return append(b, 0xc2)
}

// appendOrFalse appends v as a MessagePack str, or false when empty.
func appendOrFalse(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, 0xc2)
	}
	return appendMsgpackStr(b, v)
}

// appendMsgpackStr appends s as a MessagePack str, in the shortest form
// (as Redis's cmsgpack packs a Lua string).
func appendMsgpackStr[T string | []byte](b []byte, s T) []byte {
	return append(appendMsgpackHead(b, len(s)), s...)
}

// appendMsgpackHead appends the head of a MessagePack str of n bytes, in
// the shortest form; the str's bytes follow.
func appendMsgpackHead(b []byte, n int) []byte {
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= 0xff:
		b = append(b, 0xd9, byte(n))
	case n <= 0xffff:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return b
}

// msgpackStrLen is the length of a MessagePack str of n bytes, its head
// included (appendMsgpackStr).
func msgpackStrLen(n int) int {
	switch {
	case n < 32:
		return 1 + n
	case n <= 0xff:
		return 2 + n
	case n <= 0xffff:
		return 3 + n
	}
	return 5 + n
}

// msgpackIntLen is the length of v packed by appendMsgpackInt.
func msgpackIntLen(v int64) int {
	var d [20]byte
	return 1 + len(strconv.AppendInt(d[:0], v, 10))
}

// setLen is the length of a mark packed by appendSet.
func setLen(set bool) int {
	if set {
		return 2
	}
	return 1
}

// orFalseLen is the length of v packed by appendOrFalse.
func orFalseLen(v []byte) int {
	if len(v) == 0 {
		return 1
	}
	return msgpackStrLen(len(v))
}

// appendMsgpackInt appends v in decimal as a MessagePack str (as Lua's
// tostring of an integer packs): at most 20 bytes, a fixstr.
func appendMsgpackInt(b []byte, v int64) []byte {
	at := len(b)
	b = strconv.AppendInt(append(b, 0xa0), v, 10)
	b[at] |= byte(len(b) - at - 1)
	return b
}
