package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Store on Redis (single, Sentinel or Cluster), shared by any
// number of gateway instances.
//
// Layout: one string per idempotency key, <prefix>:{<key>} (record.lua):
// the fields key, state, status, headers, body, body_cached, fp, copies,
// conflicts, first, last, expires, changed, the journal's counters nf,
// nr, ni (copies forwarded, replayed, found in flight), na (attempts) and
// nn (a notification kept), and dead ("1": Record.Dead), in recordFields'
// order, then the claim's token, the journal's notification (compressed
// past 512 bytes, journal.go) and its attempts (length-prefixed records),
// as MessagePack values one after another; a missing one false
// (conflicts until the first conflict, dead unless the record is
// marked). One value whatever its fields' sizes: a hash with one field
// past 64 bytes took Redis's hashtable encoding, and its journal two keys
// more (docs/performance.md, "A key's memory"). A record of that earlier
// layout (a hash, <prefix>:{<key>}:n and :a beside it) is refused as
// errOldLayout, never misread; Delete purges it.
// The key inside the braces is escaped ("%" → %25, "{" → %7B, "}" → %7D) so
// every key, whatever its bytes, is one intact hash tag; keys without those
// bytes stay readable. Wake-ups go to the pub/sub channel
// <prefix>:{<key>}:wake. On Cluster every script touches one key's hash tag
// only, so nothing is ever CROSSSLOT.
//
// List indexes: time buckets <prefix>:ib:{<state>:<ttl ms>:<width>:<n>}
// for answered and failed records (strings of entries, redis_list.go,
// written again sorted by key once finished, so a listing by a key prefix
// or a scope reads only what matches), one
// class per ttl (so each expires with its own records: routes with other
// ttls share a store without cutting each other's entries short), named in
// the set <prefix>:ix:classes; and sorted sets
// <prefix>:ix:{in_flight:<shard>} for claims (redis_inflight.go), 16 shards,
// each on its own hash tag so Cluster spreads them over its masters, whose
// members are ixMember(changed, key), all of score 0, so ZRANGE BYLEX walks
// them newest first. An index entry is written by the script that settles
// the claim on a single server, or in the same pipeline as that script on
// Cluster (the nodes are written in parallel); List checks each entry
// against its record and drops stale ones.
//
// Write scripts go out in batches that concurrent requests share, each
// sent and read by one of them (Batcher, redis_batch.go), and are never
// re-sent (see run in redis_once.go).
//
// Times come from the Redis server (TIME inside the scripts), so gateway
// instances with skewed clocks agree; expiry is PEXPIRE on the hash.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	opts   RedisOptions
	closed atomic.Bool
	unfit  atomic.Pointer[error] // set by SetUnfit: claims are refused
	// checked is the last complete check of the server (SetChecked).
	checked atomic.Pointer[RedisReport]

	// One pub/sub connection per store, started on the first Wait.
	psMu     sync.Mutex
	ps       *redis.PubSub
	subs     map[string]*subscription // channel → its waiters
	pongs    map[string]chan struct{} // PING payload → Wait blocked on it
	loopDone chan struct{}

	ifx      *inFlightIx
	path     batchPath        // where write commands go (pathFor)
	paths    sync.Map         // on Cluster: a master's address → its batchPath
	dups     atomic.Int32     // recent claims that found a record, of dupsScale (sawClaim)
	flagged  atomic.Bool      // the server reads script flags (Redis 7); see UseServerVersion
	classes  sync.Map         // ixClassID → *ixClass (ixClassOf)
	ifShards [ixShards]string // the in-flight list index's shard keys
	// A page of listBuckets ends after about this many buckets or bytes
	// of entries read (listBucketBudget, listByteBudget; tests set less).
	pageProbes, pageBytes int
	sortMax               int64 // ixSortMax (tests set less)
	// Background work (the sort of finished buckets, compactBuckets):
	// bgCtx ends with Close, which then waits for bg (at most bgWait);
	// bgMu orders a start (bg.Add) before Close's wait.
	bgMu     sync.Mutex
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc
}

// RedisOptions tune the Redis store; the zero value is usable.
type RedisOptions struct {
	// Prefix namespaces every key and channel. Default "idem".
	Prefix string
	// WaitReplicas, when above 0, follows every write script (claim,
	// complete, release, renew, delete) and every Lookup with WAIT on the
	// same connection and treats fewer than WaitReplicas acknowledging
	// replicas as an error: the outcome is then unknown to the caller.
	// Redis replicates asynchronously, so without it a failover can lose a
	// claim or an answer that was already acknowledged (or read).
	WaitReplicas int
	// WaitTimeout bounds each WAIT; keep it below the client's read
	// time-out. Default 1s.
	WaitTimeout time.Duration
}

type subscription struct {
	refs    int
	waiters map[*waiter]struct{}
}

// recordFields: a record's fields, in the order its value holds them
// (record.lua).
var recordFields = []string{"key", "state", "status", "headers", "body",
	"body_cached", "fp", "copies", "conflicts", "first", "last", "expires",
	"changed", "nf", "nr", "ni", "na", "nn", "dead"}

// NewRedis returns a store on client. The client stays the caller's: Close
// does not close it, so one client can serve several stores and reloads.
func NewRedis(client redis.UniversalClient, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "idem"
	}
	if opts.WaitReplicas > 0 && opts.WaitTimeout <= 0 {
		opts.WaitTimeout = time.Second // WAIT 0 would block for ever
	}
	s := &Redis{
		c: client, prefix: opts.Prefix, opts: opts,
		subs: make(map[string]*subscription), pongs: make(map[string]chan struct{}),
		pageProbes: listBucketBudget, pageBytes: listByteBudget, sortMax: ixSortMax,
	}
	for i := range s.ifShards {
		s.ifShards[i] = s.ixShardKey(StateInFlight, "", i)
	}
	s.ifx = newInFlightIx(s)
	s.path = newBatchPath(client)
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	return s
}

// hashKey is the Redis key of key's hash: <prefix>:{<key>}, or for a
// business event of an order <prefix>:{<order>}:<event>, so an order's
// events and its state share a hash tag (one slot on Cluster).
func (s *Redis) hashKey(key string) string {
	order, event := OrderOf(key)
	if event == "" {
		return s.prefix + ":{" + escapeKey(key) + "}"
	}
	return s.prefix + ":{" + escapeKey(order) + "}:" + escapeKey(event)
}

// keys are the Redis keys the scripts take for key: its record and, when
// the script touches it (order), its order state; settle puts the index's
// keys between them on a single server. A script that leaves the order
// alone gets the record alone: no digest of the order to compute (a
// SHA-256 and 2 allocations per call), and each key costs a script ~1.1k
// Redis instructions. The two names where an earlier layout kept the
// journal went with it; only delete.lua, which purges a record of that
// layout, still takes them (Delete).
func (s *Redis) keys(key string, order bool) []string {
	h := s.hashKey(key)
	if !order {
		return []string{h}
	}
	name, _ := OrderOf(key)
	return []string{h, s.orderKey(name)}
}

// channel is the pub/sub channel that wakes key's waiters. Channels are not
// keys (PUBLISH is broadcast cluster-wide), but it carries the tag anyway so
// it could move to sharded pub/sub without a layout change. complete.lua
// names it itself, from the hash's name.
func (s *Redis) channel(key string) string {
	return s.hashKey(key) + ":wake"
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

func (s *Redis) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redis.ErrClosed) {
		return ErrClosed
	}
	if strings.HasPrefix(err.Error(), "WRONGTYPE") || strings.Contains(err.Error(), ": WRONGTYPE") {
		// GET, in a script or not, of a record that is a hash.
		return fmt.Errorf("store: redis %s: %w: %w", op, errOldLayout, err)
	}
	return fmt.Errorf("store: redis %s: %w", op, s.permissionHint(err))
}

// SetUnfit refuses every claim with an error wrapping ErrUnfit and why
// (a check that found the server evicting), until SetUnfit(nil). Only
// claims: answers of copies already at the backend are still completed.
func (s *Redis) SetUnfit(why error) {
	if why == nil {
		s.unfit.Store(nil)
		return
	}
	e := fmt.Errorf("%w: %v", ErrUnfit, why)
	s.unfit.Store(&e)
}

// SetChecked keeps rep, the last check of the server that reached every
// master (CheckRedis, at start and again in the background), for what
// depends on the server's settings: an async route's acks need AOF.
func (s *Redis) SetChecked(rep RedisReport) { s.checked.Store(&rep) }

// Checked is the report SetChecked last kept; nil when no check has yet
// reached the server. It is shared: read it, never change it.
func (s *Redis) Checked() *RedisReport { return s.checked.Load() }

func (s *Redis) Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (ClaimResult, error) {
	if s.closed.Load() {
		return ClaimResult{}, ErrClosed
	}
	if e := s.unfit.Load(); e != nil {
		return ClaimResult{}, *e
	}
	token := newToken()
	// The record's and the order state's names, for either claim: a
	// duplicate that the SET finds goes on to the script with them (the
	// order's name is a SHA-256 of it).
	k := s.keys(key, true)
	if s.setClaims() {
		if res, done, err := s.claimBySet(ctx, key, k, token, fingerprint, lockTTL); done || err != nil {
			return res, err
		}
		// The key has a record: the script judges it, counting the copy.
		return s.claimByScript(ctx, key, k, token, fingerprint, lockTTL)
	}
	res, err := s.claimByScript(ctx, key, k, token, fingerprint, lockTTL)
	if err == nil {
		s.sawClaim(res.Outcome != Won)
	}
	return res, err
}

func (s *Redis) Complete(ctx context.Context, key, token string, a Answer, ttl time.Duration, j Journal) error {
	if s.closed.Load() {
		return ErrClosed
	}
	changed := time.Now().UnixMilli()
	// The claim's record as its SET wrote it, when the token tells it
	// (a SET claim's: setClaimToken), and the answered record as the
	// script would write it from that claim: while the key holds the
	// claim's record untouched, the script sets the answered one as it
	// is (complete.lua). Otherwise the script takes the answer's values
	// out of it, and the claim's own values in it (unknown here) go
	// unread.
	var claimed []byte
	c, isSet := parseSetClaimToken(token)
	if isSet {
		claimed = newClaimRecord(key, c.fingerprint, token, c.at, c.at+c.lock)
	}
	// Room for what settle appends: the order indexes' two, the member
	// and the index's four.
	args := make([]any, 0, 13)
	args = append(args, token, claimed, newAnsweredRecord(key, c, a, changed, changed+ms(ttl), j), ms(ttl))
	var oi *orderIx
	if a.Order != nil {
		// The event's time is the gateway's: Lua's TIME would need a
		// second pass over the arguments, and it only tells an operator
		// when the event ran. Without an order the three are not sent
		// (complete.lua: ~1.1k instructions each).
		_, event := OrderOf(key)
		args = append(args, event, strconv.FormatInt(ms(a.Order.TTL), 10), encodeOrderEvent(time.UnixMilli(changed), a.Order))
		oi = s.orderIndexOf(key, time.UnixMilli(changed), a.Order)
	}
	sx := s.searchIxOf(key, searchRefs(j, a.Order), searchTTL(ttl, a.Order))
	err := s.settle(ctx, s.script(completeScript), key, s.keys(key, a.Order != nil), StateAnswered, changed, ttl, false, oi, sx, args...)
	return s.casErr("complete", err)
}

// journalArgs are a journal's script arguments ("" for none).
func journalArgs(j Journal) (notif, att []byte) {
	sc := notificationScratch.Get().(*notificationBufs)
	defer notificationScratch.Put(sc)
	n, a := sc.journal(j)
	return append([]byte{}, n...), append([]byte{}, a...)
}

// deadArg is the release and leave scripts' dead argument: "1" marks the
// record Dead (the journal's attempt is), "" clears the mark.
func deadArg(j Journal) string {
	if j.Attempt != nil && j.Attempt.Dead {
		return "1"
	}
	return ""
}

// settle runs a settling script and writes key's list index entry with
// it, into the time bucket of its class (redis_list.go). On a single server the
// script writes the index itself (one command, in a batch shared with other
// requests'); on Cluster the index shards live on other
// nodes, and the index commands go in the same pipeline as the script (one
// round trip; the nodes are written in parallel). The index entry is
// written whatever the script answers: List checks entries against their
// records, so a refused settle leaves only a stale entry. With
// WaitReplicas on Cluster, the script runs through run (WAIT) and the index
// is written after it. A completion's order index writes (oi, or nil) go
// the same way: in the script on a single server (only when it completes),
// in the pipeline on Cluster (readers check them against the order state).
func (s *Redis) settle(ctx context.Context, sc *redis.Script, key string, keys []string, st State, changed int64,
	ttl time.Duration, stillHeld bool, oi *orderIx, sx *searchIx, args ...any,
) error {
	c, register := s.ixClassOf(st, ttl)
	if done := c.moved(c.bucketOf(changed)); done != nil {
		s.compactBuckets(done)
	}
	ix, ifIx := c.bucketKey(c.bucketOf(changed)), s.ifShards[ixShard(key)]
	entry := ixEntry(changed, key)
	old, written := s.ifx.settled(key)
	held, name := "", ""
	if stillHeld {
		// Leave changed the record's time: its in-flight entry too.
		held = ixMember(changed, key)
	}
	if register {
		name = c.name
	}
	if _, cluster := s.c.(*redis.ClusterClient); !cluster {
		// The index's keys right after the record (journal.lua's index),
		// then the order state, if any.
		nk := len(keys) + 3
		if oi != nil {
			nk += len(oi.keys)
		}
		if sx != nil {
			nk += len(sx.keys)
		}
		keys = append(append(make([]string, 0, nk), keys[0], ix, ifIx, s.ixClassesKey()), keys[1:]...)
		if oi != nil {
			keys = append(keys, oi.keys...)
			args = append(args, oi.entry, oi.event)
		}
		if sx != nil {
			keys = append(keys, sx.keys...) // last: searched (journal.lua)
		}
		args = append(args, entry, c.bttl)
		// The index's usually empty arguments up to the last one set
		// (index in journal.lua): each costs the script ~1.1k
		// instructions.
		tail := [...]string{old, held, name}
		n := len(tail)
		for n > 0 && tail[n-1] == "" {
			n--
		}
		for _, a := range tail[:n] {
			args = append(args, a)
		}
		return s.run(ctx, sc, keys, args...).Err()
	}
	index := func(p redis.Pipeliner, first bool) {
		if name != "" {
			p.SAdd(ctx, s.ixClassesKey(), name)
		}
		if entry != "" && first {
			// APPEND is no ZADD: once, not again with a reloaded script.
			p.Append(ctx, ix, entry)
			p.PExpire(ctx, ix, time.Duration(c.ttl+c.width)*time.Millisecond+ixSkew)
		}
		if written {
			p.ZRem(ctx, ifIx, old)
		}
		if held != "" {
			p.ZAdd(ctx, ifIx, redis.Z{Member: held})
		}
		if oi != nil && first {
			oi.write(ctx, p) // RPUSH is no ZADD: once, not again with a reloaded script
		}
		if sx != nil && first {
			sx.write(ctx, p)
		}
	}
	if s.opts.WaitReplicas > 0 {
		err := s.run(ctx, sc, keys, args...).Err()
		if err == nil {
			_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error { index(p, true); return nil })
		}
		return err
	}
	exec := func(load bool) error {
		var cmd *redis.Cmd
		_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if load {
				cmd = sc.Eval(ctx, onceScripter(p), keys, args...)
			} else {
				cmd = sc.EvalSha(ctx, onceScripter(p), keys, args...)
			}
			index(p, !load)
			return nil
		})
		return cmd.Err() // the index write's own error does not matter
	}
	err := exec(false)
	if err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		// The server lost its script cache (a restart, a failover).
		err = exec(true)
	}
	return err
}

func (s *Redis) casErr(op string, err error) error {
	if errors.Is(err, redis.Nil) {
		return ErrNotOwner
	}
	return s.wrap(op, err)
}

func (s *Redis) Release(ctx context.Context, key, token string, ttl time.Duration, j Journal) error {
	if s.closed.Load() {
		return ErrClosed
	}
	changed := time.Now().UnixMilli()
	notif, att := journalArgs(j)
	if ttl <= 0 {
		err := s.run(ctx, s.script(releaseScript), s.keys(key, false), token, s.channel(key), 0, changed, notif, att, deadArg(j)).Err()
		return s.casErr("release", err)
	}
	err := s.settle(ctx, s.script(releaseScript), key, s.keys(key, false), StateFailed, changed, ttl, false, nil,
		s.searchIxOf(key, searchRefs(j), ttl), token, s.channel(key), ms(ttl), changed, notif, att, deadArg(j))
	return s.casErr("release", err)
}

func (s *Redis) Leave(ctx context.Context, key, token string, ttl time.Duration, j Journal) error {
	if s.closed.Load() {
		return ErrClosed
	}
	// The record turns failed when its lock runs out; it is indexed as
	// failed now, and List shows it once it reads so.
	changed := time.Now().UnixMilli()
	notif, att := journalArgs(j)
	err := s.settle(ctx, s.script(leaveScript), key, s.keys(key, false), StateFailed, changed, ttl, true, nil,
		s.searchIxOf(key, searchRefs(j), ttl), token, ms(ttl), changed, notif, att, deadArg(j))
	if err == nil {
		s.ifx.left(key, changed)
	}
	return s.casErr("leave", err)
}

func (s *Redis) Renew(ctx context.Context, key, token string, lockTTL time.Duration) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.run(ctx, s.script(renewScript), s.keys(key, false), token, ms(lockTTL)).Err()
	return s.casErr("renew", err)
}

// Lookup reads the record with its journal: one value (record.lua), one
// GET.
func (s *Redis) Lookup(ctx context.Context, key string) (*Record, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	h := s.hashKey(key)
	var g *redis.StringCmd
	var err error
	if s.opts.WaitReplicas > 0 {
		// A read may see a write that a failover is about to lose: it too
		// waits until what it read is on WaitReplicas replicas.
		werr := s.replicated(ctx, h, func(p redis.Pipeliner) redis.Cmder {
			g = p.Get(ctx, h)
			return g
		})
		if g == nil { // no server to send it to
			err = werr
		} else if err = g.Err(); (err == nil || errors.Is(err, redis.Nil)) && werr != nil {
			err = werr // a missing record too is known once replicated
		}
	} else {
		g = s.c.Get(ctx, h)
		err = g.Err()
	}
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, s.wrap("lookup", err)
	}
	v, err := unpackRecord(g.Val())
	if err != nil {
		return nil, s.wrap("lookup", err)
	}
	rec, err := recordOf(v)
	if err != nil {
		return nil, s.wrap("lookup", err)
	}
	notif, atts := v[recordNotif], v[recordAttempts]
	if v[1] == string(StateInFlight) && rec.State == StateFailed && rec.AttemptCount == 0 && notif == "" {
		// A claim that ran out with no journal: gone (Redis expires it
		// any moment), as the claim script sees it.
		return nil, ErrNotFound
	}
	if notif != "" {
		if rec.Notification, err = decodeNotification([]byte(notif)); err != nil {
			return nil, s.wrap("lookup", err)
		}
	}
	for a := []byte(atts); len(a) > 0; {
		n := 0
		if len(a) >= 2 {
			n = int(binary.BigEndian.Uint16(a))
		}
		if n == 0 || len(a) < 2+n {
			return nil, s.wrap("lookup", errCorrupt)
		}
		at, err := decodeAttempt(a[2 : 2+n])
		if err != nil {
			return nil, s.wrap("lookup", err)
		}
		rec.Attempts = append(rec.Attempts, at)
		a = a[2+n:]
	}
	return rec, nil
}

func (s *Redis) Reopen(ctx context.Context, key string, ttl time.Duration) error {
	if s.closed.Load() {
		return ErrClosed
	}
	changed := time.Now().UnixMilli()
	_, event := OrderOf(key)
	err := s.settle(ctx, s.script(reopenScript), key, s.keys(key, true), StateFailed, changed, ttl, false, nil, nil, ms(ttl), changed, event)
	if errors.Is(err, redis.Nil) {
		return ErrNotFound
	}
	return s.wrap("reopen", err)
}

func (s *Redis) Delete(ctx context.Context, key string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	_, event := OrderOf(key)
	// delete.lua also purges a record of the earlier layout, whose journal
	// keys it must be given (on Cluster a script declares what it touches).
	k := s.keys(key, true)
	h := k[0]
	err := s.run(ctx, s.script(deleteScript), []string{h, h + ":n", h + ":a", k[1]}, s.channel(key), event).Err()
	if m, ok := s.ifx.settled(key); ok {
		_ = s.c.ZRem(ctx, s.ixKey(StateInFlight, "", key), m).Err() // else List repairs it
	}
	if errors.Is(err, redis.Nil) {
		return ErrNotFound
	}
	return s.wrap("delete", err)
}

var _ Store = (*Redis)(nil)
