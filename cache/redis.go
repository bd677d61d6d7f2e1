package cache

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"slices"
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
// Layout: one hash per idempotency key, <prefix>:{<key>}, with the fields
// key, state, token, status, headers, body, body_cached, fp, copies,
// conflicts, first, last, expires, changed, and the journal's counters nf,
// nr, ni (copies forwarded, replayed, found in flight) and na (attempts).
// Beside it, with the same hash tag, the journal: <prefix>:{<key>}:n, the
// notification (a string, zstd), and <prefix>:{<key>}:a, the attempts (a
// string of length-prefixed records: a list costs three times as much). Keeping the big values out of the hash keeps it a small listpack.
// The key inside the braces is escaped ("%" → %25, "{" → %7B, "}" → %7D) so
// every key, whatever its bytes, is one intact hash tag; keys without those
// bytes stay readable. Wake-ups go to the pub/sub channel
// <prefix>:{<key>}:wake. Every script touches one key's hash tag only, so
// nothing is ever CROSSSLOT on Cluster.
//
// List indexes (answered and failed records): sorted sets
// <prefix>:ix:{<state>:<shard>}, 16 shards per state, each on its own hash
// tag so Cluster spreads them over its masters. Members are
// ixMember(changed, key), all of score 0, so ZRANGE BYLEX walks them newest
// first. An index entry is written in the same pipeline as the script that
// settles the claim (one round trip on a single server; on Cluster the two
// nodes are written in parallel); List checks each entry against its record
// and drops stale ones. In-flight claims live seconds and are listed by SCAN.
//
// Times come from the Redis server (TIME inside the scripts), so gateway
// instances with skewed clocks agree; expiry is PEXPIRE on the hash.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	opts   RedisOptions
	closed atomic.Bool

	// One pub/sub connection per store, started on the first Wait.
	psMu     sync.Mutex
	ps       *redis.PubSub
	subs     map[string]*subscription // channel → its waiters
	pongs    map[string]chan struct{} // PING payload → Wait blocked on it
	loopDone chan struct{}
}

// RedisOptions tune the Redis store; the zero value is usable.
type RedisOptions struct {
	// Prefix namespaces every key and channel. Default "idem".
	Prefix string
	// ScanCount is the COUNT hint of each SCAN step in InFlight. Default 500.
	ScanCount int
	// ScanSteps bounds the SCAN calls one InFlight call makes. Default 8.
	ScanSteps int
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

var (
	//go:embed claim.lua
	claimLua string
	//go:embed complete.lua
	completeLua string
	//go:embed release.lua
	releaseLua string
	//go:embed renew.lua
	renewLua string
	//go:embed delete.lua
	deleteLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed journal.lua
	journalLua string

	claimScript    = redis.NewScript(journalLua + claimLua)
	completeScript = redis.NewScript(journalLua + completeLua)
	releaseScript  = redis.NewScript(journalLua + releaseLua)
	leaveScript    = redis.NewScript(journalLua + leaveLua)
	renewScript    = redis.NewScript(journalLua + renewLua)
	deleteScript   = redis.NewScript(deleteLua)
)

// recordFields is the order in which the scripts and Lookup read a record.
var recordFields = []string{"key", "state", "status", "headers", "body",
	"body_cached", "fp", "copies", "conflicts", "first", "last", "expires",
	"changed", "nf", "nr", "ni", "na"}

// ixShards is the number of list index shards per state.
const ixShards = 16

// NewRedis returns a store on client. The client stays the caller's: Close
// does not close it, so one client can serve several stores and reloads.
func NewRedis(client redis.UniversalClient, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "idem"
	}
	if opts.ScanCount <= 0 {
		opts.ScanCount = 500
	}
	if opts.ScanSteps <= 0 {
		opts.ScanSteps = 8
	}
	if opts.WaitReplicas > 0 && opts.WaitTimeout <= 0 {
		opts.WaitTimeout = time.Second // WAIT 0 would block for ever
	}
	return &Redis{
		c: client, prefix: opts.Prefix, opts: opts,
		subs: make(map[string]*subscription), pongs: make(map[string]chan struct{}),
	}
}

// escapeKey makes key safe inside a hash tag (see Redis).
func escapeKey(key string) string {
	if key == "" {
		// "{}" would hash the whole Redis key, parting the record from its
		// journal; a lone "%" is what no escaped key can be.
		return "%"
	}
	if !strings.ContainsAny(key, "%{}") {
		return key
	}
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// hashKey is the Redis key of key's hash.
func (s *Redis) hashKey(key string) string {
	return s.prefix + ":{" + escapeKey(key) + "}"
}

// keys are the Redis keys of key's record and journal, as the scripts take
// them.
func (s *Redis) keys(key string) []string {
	h := s.hashKey(key)
	return []string{h, h + ":n", h + ":a"}
}

// ixKey is the list index shard of key in state st.
func (s *Redis) ixKey(st State, key string) string {
	return s.ixShardKey(st, int(crc32.ChecksumIEEE([]byte(key))%ixShards))
}

func (s *Redis) ixShardKey(st State, shard int) string {
	return s.prefix + ":ix:{" + string(st) + ":" + strconv.Itoa(shard) + "}"
}

// channel is the pub/sub channel that wakes key's waiters. Channels are not
// keys (PUBLISH is broadcast cluster-wide), but it carries the tag anyway so
// it could move to sharded pub/sub without a layout change.
func (s *Redis) channel(key string) string {
	return s.hashKey(key) + ":wake"
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// run runs a write script on key's hash. go-redis re-sends a command whose
// connection broke after it was written; a script that may already have run
// must not run twice (a claim would find its own claim in flight, a
// conflict or copy would count twice, a complete would find the key
// answered and report a lost claim), so scripts go out as commands
// go-redis never re-sends: a broken connection is an error, the outcome
// unknown. With WaitReplicas the script runs inside replicated.
func (s *Redis) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	hkey := keys[0]
	if s.opts.WaitReplicas <= 0 {
		return sc.Run(ctx, onceScripter{s.c}, keys, args...)
	}
	exec := func(load bool) *redis.Cmd {
		var cmd *redis.Cmd
		err := s.replicated(ctx, hkey, func(p redis.Pipeliner) redis.Cmder {
			if load {
				cmd = sc.Eval(ctx, onceScripter{p}, keys, args...)
			} else {
				cmd = sc.EvalSha(ctx, onceScripter{p}, keys, args...)
			}
			return cmd
		})
		if cmd == nil { // no server to send it to
			cmd = redis.NewCmd(ctx)
		}
		if err != nil {
			cmd.SetErr(err)
		}
		return cmd
	}
	cmd := exec(false)
	if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		cmd = exec(true)
	}
	return cmd
}

// replicated sends the command queue adds, a fence and WAIT in one
// pipeline (one connection) to the server holding hkey — on a Cluster the
// key's master, as a keyless WAIT would go to any node — and returns
// ErrNotReplicated unless WaitReplicas replicas acknowledged it all. The
// fence (a string beside the hash, gone after 1ms) is a write every time:
// WAIT waits for the connection's own last write, and a command that
// wrote nothing (a lookup, a not-owner answer) may still have read a
// write that is not replicated yet. When the command itself failed, that
// error is left on it and replicated returns nil; when no server holds
// hkey, queue is not called.
func (s *Redis) replicated(ctx context.Context, hkey string, queue func(p redis.Pipeliner) redis.Cmder) error {
	var c redis.Cmdable = s.c
	cc, cluster := s.c.(*redis.ClusterClient)
	if cluster {
		node, err := cc.MasterForKey(ctx, hkey)
		if err != nil {
			return err
		}
		c = node
	}
	pipe := c.Pipeline()
	cmd := queue(pipe)
	fence := pipe.Set(ctx, hkey+":fence", 1, time.Millisecond)
	wait := pipe.Do(ctx, "WAIT", s.opts.WaitReplicas, ms(s.opts.WaitTimeout))
	_, _ = pipe.Exec(ctx) // each command carries its own error
	if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
		if cluster {
			cc.ReloadState(ctx) // MOVED or a dead node: route afresh next time
		}
		return nil
	}
	if err := fence.Err(); err != nil {
		return err
	}
	n, err := wait.Int64()
	if err == nil && n < int64(s.opts.WaitReplicas) {
		err = fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, s.opts.WaitReplicas, s.opts.WaitTimeout)
	}
	return err
}

// onceScripter sends EVAL and EVALSHA as commands go-redis never re-sends
// (see run); SCRIPT EXISTS and LOAD go through unchanged.
type onceScripter struct {
	c interface {
		redis.Scripter
		Process(ctx context.Context, cmd redis.Cmder) error
	}
}

type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

func (o onceScripter) eval(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	cmd.SetFirstKeyPos(3)
	_ = o.c.Process(ctx, onceCmd{cmd})
	return cmd
}

func (o onceScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "eval", script, keys, args)
}

func (o onceScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "evalsha", sha1, keys, args)
}

func (o onceScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "eval_ro", script, keys, args)
}

func (o onceScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "evalsha_ro", sha1, keys, args)
}

func (o onceScripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return o.c.ScriptExists(ctx, hashes...)
}

func (o onceScripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return o.c.ScriptLoad(ctx, script)
}

// ErrNotReplicated: a write was not acknowledged by RedisOptions.WaitReplicas
// replicas in time. It may or may not have been applied, and may be lost in
// a failover: callers treat it like any other store error.
var ErrNotReplicated = errors.New("cache: redis write not acknowledged by enough replicas")

func (s *Redis) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redis.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("cache: redis %s: %w", op, err)
}

func (s *Redis) Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (ClaimResult, error) {
	if s.closed.Load() {
		return ClaimResult{}, ErrClosed
	}
	token := newToken()
	v, err := s.run(ctx, claimScript, s.keys(key), token, fingerprint, ms(lockTTL), key).Slice()
	if err != nil {
		return ClaimResult{}, s.wrap("claim", err)
	}
	if len(v) == 0 {
		return ClaimResult{}, fmt.Errorf("cache: redis claim: empty reply")
	}
	var res ClaimResult
	switch str(v[0]) {
	case "won":
		return ClaimResult{Outcome: Won, Token: token}, nil
	case "in_flight":
		res.Outcome = InFlight
	case "answered":
		res.Outcome = Answered
	case "conflict":
		res.Outcome = Conflict
	default:
		return ClaimResult{}, fmt.Errorf("cache: redis claim: unexpected reply %q", v[0])
	}
	res.Record, err = parseRecord(v[1:])
	if err == nil {
		// The script judged expiry by the server's clock when it ran;
		// the record it returns is as of then, not as of the reply.
		res.Record.State = State(str(v[2]))
	}
	if err != nil {
		return ClaimResult{}, s.wrap("claim", err)
	}
	return res, nil
}

func (s *Redis) Complete(ctx context.Context, key, token string, a Answer, ttl time.Duration, j Journal) error {
	if s.closed.Load() {
		return ErrClosed
	}
	var body []byte
	cached := "0"
	if a.BodyCached {
		body, cached = a.Body, "1"
	}
	changed := time.Now().UnixMilli()
	notif, att := journalArgs(j)
	err := s.settle(ctx, completeScript, key, StateAnswered, changed, ttl, token, a.Status,
		appendHeader(nil, a.Header), body, cached, ms(ttl), s.channel(key), changed, notif, att)
	return s.casErr("complete", err)
}

// journalArgs are a journal's script arguments ("" for none).
func journalArgs(j Journal) (notif, att []byte) {
	notif, att = []byte{}, []byte{}
	if j.Notification != nil {
		notif = encodeNotification(j.Notification)
	}
	if j.Attempt != nil {
		a := encodeAttempt(j.Attempt)
		att = binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(a)), uint16(len(a)))
		att = append(att, a...)
	}
	return notif, att
}

// settle runs a settling script and writes key's list index entry in
// the same pipeline (one round trip; on Cluster the two nodes are written
// in parallel), trimming the shard of entries older than ttl. The index
// entry is written whatever the script answers: List checks entries
// against their records, so a refused settle leaves only a stale entry.
// With WaitReplicas the script runs through run (WAIT) and the index is
// written after it.
func (s *Redis) settle(ctx context.Context, sc *redis.Script, key string, st State, changed int64,
	ttl time.Duration, args ...any,
) error {
	keys := s.keys(key)
	ix := s.ixKey(st, key)
	index := func(p redis.Pipeliner) {
		p.ZAdd(ctx, ix, redis.Z{Member: ixMember(changed, key)})
		p.ZRemRangeByLex(ctx, ix, "["+ixMember(changed-ttl.Milliseconds(), "")[:16], "+")
	}
	if s.opts.WaitReplicas > 0 {
		err := s.run(ctx, sc, keys, args...).Err()
		if err == nil {
			_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error { index(p); return nil })
		}
		return err
	}
	exec := func(load bool) error {
		var cmd *redis.Cmd
		_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if load {
				cmd = sc.Eval(ctx, onceScripter{p}, keys, args...)
			} else {
				cmd = sc.EvalSha(ctx, onceScripter{p}, keys, args...)
			}
			index(p)
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
		err := s.run(ctx, releaseScript, s.keys(key), token, s.channel(key), 0, changed, notif, att).Err()
		return s.casErr("release", err)
	}
	err := s.settle(ctx, releaseScript, key, StateFailed, changed, ttl,
		token, s.channel(key), ms(ttl), changed, notif, att)
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
	err := s.settle(ctx, leaveScript, key, StateFailed, changed, ttl,
		token, ms(ttl), changed, notif, att)
	return s.casErr("leave", err)
}

func (s *Redis) Renew(ctx context.Context, key, token string, lockTTL time.Duration) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.run(ctx, renewScript, s.keys(key), token, ms(lockTTL)).Err()
	return s.casErr("renew", err)
}

// Lookup reads the record and its journal in one pipeline (one round
// trip: the three keys share a hash tag, hence a node).
func (s *Redis) Lookup(ctx context.Context, key string) (*Record, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	keys := s.keys(key)
	var hm *redis.SliceCmd
	var err error
	if s.opts.WaitReplicas > 0 {
		// A read may see a write that a failover is about to lose: it too
		// waits until what it read is on WaitReplicas replicas.
		werr := s.replicated(ctx, keys[0], func(p redis.Pipeliner) redis.Cmder {
			hm = p.HMGet(ctx, keys[0], recordFields...)
			return hm
		})
		if hm == nil { // no server to send it to
			err = werr
		} else if err = hm.Err(); err == nil {
			err = werr
		}
	} else {
		hm = s.c.HMGet(ctx, keys[0], recordFields...)
		err = hm.Err()
	}
	if err != nil {
		return nil, s.wrap("lookup", err)
	}
	v := hm.Val()
	if len(v) < 2 || v[1] == nil {
		return nil, ErrNotFound
	}
	rec, err := parseRecord(v)
	if err != nil {
		return nil, s.wrap("lookup", err)
	}
	// The journal only when there is one: a waiter's look at an
	// in-flight claim stays one command.
	var notif, atts string
	if rec.AttemptCount > 0 {
		jv, err := s.c.MGet(ctx, keys[1], keys[2]).Result()
		if err != nil {
			return nil, s.wrap("lookup", err)
		}
		notif, atts = str(jv[0]), str(jv[1])
	}
	if str(v[1]) == string(StateInFlight) && rec.State == StateFailed && rec.AttemptCount == 0 && notif == "" {
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

func (s *Redis) Delete(ctx context.Context, key string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.run(ctx, deleteScript, s.keys(key), s.channel(key)).Err()
	if errors.Is(err, redis.Nil) {
		return ErrNotFound
	}
	return s.wrap("delete", err)
}

// parseRecord reads the values of recordFields.
func parseRecord(v []any) (*Record, error) {
	if len(v) != len(recordFields) {
		return nil, fmt.Errorf("record of %d fields, want %d", len(v), len(recordFields))
	}
	r := &Record{
		Key:         str(v[0]),
		State:       State(str(v[1])),
		Status:      int(num(v[2])),
		BodyCached:  str(v[5]) == "1",
		Fingerprint: str(v[6]),
		Copies:      num(v[7]),
		Conflicts:   num(v[8]),
		FirstSeen:   time.UnixMilli(num(v[9])),
		LastSeen:    time.UnixMilli(num(v[10])),
		ExpiresAt:   time.UnixMilli(num(v[11])),
		Changed:     time.UnixMilli(num(v[12])),
		CopyOutcomes: CopyCounts{
			Forwarded: num(v[13]), Replayed: num(v[14]), InFlight: num(v[15]),
		},
		AttemptCount: num(v[16]),
	}
	if r.State == StateInFlight && !time.Now().Before(r.ExpiresAt) {
		// The claim ran out; a record still here keeps a journal and
		// reads as failed (the scripts judge by the server's clock).
		r.State = StateFailed
	}
	if h := str(v[3]); h != "" {
		var err error
		if r.Header, err = decodeHeader([]byte(h)); err != nil {
			return nil, err
		}
	}
	if b := str(v[4]); b != "" {
		r.Body = []byte(b)
	}
	return r, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// Wait subscribes to key's channel on the store's shared pub/sub connection
// and returns once Redis has confirmed the subscription (a PING behind the
// SUBSCRIBE on the same connection has come back), so a Complete after Wait
// returns is never missed. The channel may also close spuriously, when the
// pub/sub connection was lost and messages may have been missed: callers
// re-check with Lookup or Claim anyway.
func (s *Redis) Wait(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if s.closed.Load() {
		return nil, nil, ErrClosed
	}
	ch := s.channel(key)
	w := &waiter{ch: make(chan struct{})}
	ping := newToken()
	pong := make(chan struct{})

	s.psMu.Lock()
	if s.closed.Load() {
		s.psMu.Unlock()
		return nil, nil, ErrClosed
	}
	if s.ps == nil {
		// The pub/sub connection lives as long as the store, not the
		// first waiter's request.
		s.ps = s.c.Subscribe(context.WithoutCancel(ctx))
		s.loopDone = make(chan struct{})
		go s.receive(s.ps, s.loopDone)
	}
	sub := s.subs[ch]
	var err error
	if sub == nil {
		sub = &subscription{waiters: make(map[*waiter]struct{})}
		s.subs[ch] = sub
		err = s.ps.Subscribe(ctx, ch)
	}
	sub.refs++
	sub.waiters[w] = struct{}{}
	if err == nil {
		s.pongs[ping] = pong
		err = s.ps.Ping(ctx, ping)
	}
	s.psMu.Unlock()

	var once sync.Once
	stop := func() { once.Do(func() { s.unsubscribe(ch, w, ping) }) }
	if err != nil {
		stop()
		return nil, nil, s.wrap("subscribe", err)
	}
	select {
	case <-pong:
		return w.ch, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	}
}

// unsubscribe drops one waiter; the last one out sends UNSUBSCRIBE. Both
// happen under psMu, so SUBSCRIBE and UNSUBSCRIBE go out in the order the
// reference counts changed.
func (s *Redis) unsubscribe(ch string, w *waiter, ping string) {
	s.psMu.Lock()
	defer s.psMu.Unlock()
	delete(s.pongs, ping)
	sub := s.subs[ch]
	if sub == nil {
		return
	}
	delete(sub.waiters, w)
	if sub.refs--; sub.refs > 0 {
		return
	}
	delete(s.subs, ch)
	if s.ps != nil && !s.closed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.ps.Unsubscribe(ctx, ch) // on failure the next reconnect drops it
		cancel()
	}
}

// receive dispatches the pub/sub connection's messages until Close.
func (s *Redis) receive(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), 30*time.Second)
		if s.closed.Load() {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Idle: a PING proves the connection is still alive; if
				// it is not, the next receive fails and reconnects.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = ps.Ping(ctx)
				cancel()
				continue
			}
			// Lost connection: go-redis reconnects and resubscribes on the
			// next receive, but messages may have been missed meanwhile.
			s.wakeAll()
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			s.psMu.Lock()
			var ws []*waiter
			if sub := s.subs[m.Channel]; sub != nil {
				for w := range sub.waiters {
					ws = append(ws, w)
				}
				clear(sub.waiters)
			}
			s.psMu.Unlock()
			for _, w := range ws {
				w.wake()
			}
		case *redis.Pong:
			s.psMu.Lock()
			if c, ok := s.pongs[m.Payload]; ok {
				close(c)
				delete(s.pongs, m.Payload)
			}
			s.psMu.Unlock()
		}
	}
}

// wakeAll wakes every waiter and every Wait blocked on its PING: something
// may have been missed, so all re-check.
func (s *Redis) wakeAll() {
	s.psMu.Lock()
	var ws []*waiter
	for _, sub := range s.subs {
		for w := range sub.waiters {
			ws = append(ws, w)
		}
		clear(sub.waiters)
	}
	for p, c := range s.pongs {
		close(c)
		delete(s.pongs, p)
	}
	s.psMu.Unlock()
	for _, w := range ws {
		w.wake()
	}
}

// Close stops the pub/sub connection and wakes all waiters. It does not
// close the client, which the caller owns.
func (s *Redis) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.psMu.Lock()
	ps, done := s.ps, s.loopDone
	s.psMu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
	s.wakeAll()
	return nil
}

// List: in-flight claims by SCAN (listInFlight), answered and failed
// records from the list indexes (listIndexed).
func (s *Redis) List(ctx context.Context, q ListQuery) (ListPage, error) {
	if s.closed.Load() {
		return ListPage{}, ErrClosed
	}
	if err := q.normalize(); err != nil {
		return ListPage{}, err
	}
	if q.State == StateInFlight {
		recs, next, err := s.listInFlight(ctx, q)
		return ListPage{Records: recs, Next: next}, err
	}
	return s.listIndexed(ctx, q)
}

// listIndexed merges the state's index shards newest first. Each shard
// gives at most Limit members after the cursor (ZRANGE BYLEX, one pipeline);
// the merge goes no further than the horizon, the earliest last member of a
// shard that gave a full Limit (beyond it that shard may hold more). The
// candidates' records are read in batches of Limit (one pipeline each, at
// most 4), checked (state, changed time, filters) and stale index entries
// dropped. Work per page: 16 range reads and at most 4×Limit records.
func (s *Redis) listIndexed(ctx context.Context, q ListQuery) (ListPage, error) {
	after, err := decodeListCursor(q.Cursor)
	if err != nil {
		return ListPage{}, err
	}
	st := q.State
	if st == StateDead {
		st = StateFailed
	}
	from := "-"
	if q.Cursor != "" {
		from = "(" + ixMember(after.Changed, after.Key)
	}
	shards := make([]*redis.StringSliceCmd, ixShards)
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range shards {
			shards[i] = p.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.ixShardKey(st, i), Start: from, Stop: "+",
				ByLex: true, Count: int64(q.Limit)})
		}
		return nil
	})
	if err != nil {
		return ListPage{}, s.wrap("list", err)
	}
	var horizon string
	type cand struct {
		member, shard string
		pos           listPos
	}
	var cands []cand
	for i, c := range shards {
		ms := c.Val()
		if len(ms) == q.Limit && (horizon == "" || ms[len(ms)-1] < horizon) {
			horizon = ms[len(ms)-1]
		}
		for _, m := range ms {
			if pos, ok := parseIxMember(m); ok {
				cands = append(cands, cand{member: m, shard: s.ixShardKey(st, i), pos: pos})
			}
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return strings.Compare(a.member, b.member) })
	var page ListPage
	more := false // a shard may hold more beyond what this page reads
	for i, c := range cands {
		if c.pos.Changed < q.Since.UnixMilli() {
			cands = cands[:i]
			break
		}
		if horizon != "" && c.member >= horizon {
			cands = cands[:i+1]
			more = true
			break
		}
	}
	var stale []cand
	consumed := 0
	for batch := 0; consumed < len(cands) && batch < 4 && len(page.Records) < q.Limit; batch++ {
		chunk := cands[consumed:min(len(cands), consumed+q.Limit)]
		cmds := make([]*redis.SliceCmd, len(chunk))
		_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range chunk {
				if q.keyMatches(c.pos.Key) {
					cmds[i] = p.HMGet(ctx, s.hashKey(c.pos.Key), recordFields...)
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return ListPage{}, s.wrap("list", err)
		}
		for i, c := range chunk {
			consumed++
			after = c.pos
			if cmds[i] == nil {
				continue
			}
			v := cmds[i].Val()
			var rec *Record
			if len(v) > 1 && v[1] != nil {
				if rec, err = parseRecord(v); err != nil {
					return ListPage{}, s.wrap("list", err)
				}
			}
			if rec == nil || rec.Changed.UnixMilli() != c.pos.Changed ||
				(rec.State != st && !(st == StateFailed && rec.State == StateInFlight)) {
				stale = append(stale, c)
				continue
			}
			if q.matches(rec) {
				page.Records = append(page.Records, rec)
				if len(page.Records) == q.Limit {
					break
				}
			}
		}
	}
	if more || consumed < len(cands) {
		page.Next = encodeListCursor(after)
	}
	if len(stale) > 0 {
		// Read-repair: entries whose record moved on or is gone.
		_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range stale {
				p.ZRem(ctx, c.shard, c.member)
			}
			return nil
		})
	}
	return page, nil
}

// listInFlight lists in-flight claims with SCAN, never KEYS: a global index
// (a sorted set) would have to live in one slot and be written by every
// claim, which Cluster refuses (CROSSSLOT) and which would be a hot key.
// SCAN MATCH <prefix>:{* TYPE hash walks each master in address order; the
// opaque cursor holds the node, its SCAN cursor and, when a SCAN batch held
// more claims than the page had room for, the last hash key returned (that
// batch is re-read and continued from there). One call makes at most
// ScanSteps SCAN calls. As with SCAN itself, a key may be listed twice when
// Redis resizes its table between pages, and one that comes or goes while
// listing may or may not appear.
func (s *Redis) listInFlight(ctx context.Context, q ListQuery) ([]*Record, string, error) {
	limit := q.Limit
	pos, err := decodeScanCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return nil, "", s.wrap("in_flight", err)
	}
	i := 0
	if pos.Node != "" {
		// The node of the cursor, or the next one if it left the cluster.
		i, _ = slices.BinarySearchFunc(nodes, pos.Node, func(n scanNode, a string) int { return cmp.Compare(n.addr, a) })
		if i == len(nodes) || nodes[i].addr != pos.Node {
			pos = scanCursor{}
		}
	}
	match := globEscape(s.prefix) + ":{*"
	var recs []*Record
	for step := 0; step < s.opts.ScanSteps && i < len(nodes); step++ {
		n := nodes[i]
		keys, next, err := n.c.ScanType(ctx, pos.Cur, match, int64(s.opts.ScanCount), "hash").Result()
		if err != nil {
			return nil, "", s.wrap("in_flight", err)
		}
		found, err := s.inFlightOf(ctx, n.c, keys, string(pos.After), &q)
		if err != nil {
			return nil, "", s.wrap("in_flight", err)
		}
		if room := limit - len(recs); len(found) > room {
			recs = append(recs, found[:room]...)
			last := s.hashKey(recs[len(recs)-1].Key)
			return recs, encodeScanCursor(scanCursor{Node: n.addr, Cur: pos.Cur, After: []byte(last)}), nil
		}
		recs = append(recs, found...)
		pos = scanCursor{Node: n.addr, Cur: next}
		if next == 0 {
			i++
			if i == len(nodes) {
				return recs, "", nil
			}
			pos = scanCursor{Node: nodes[i].addr}
		}
		if len(recs) == limit {
			break
		}
	}
	return recs, encodeScanCursor(pos), nil
}

// inFlightOf reads the records of keys (one pipeline on the node that
// holds them) and returns the in-flight ones sorted by hash key, after the
// hash key after.
func (s *Redis) inFlightOf(ctx context.Context, c redis.Cmdable, keys []string, after string, q *ListQuery) ([]*Record, error) {
	slices.Sort(keys)
	if after != "" {
		i, _ := slices.BinarySearch(keys, after)
		for i < len(keys) && keys[i] <= after {
			i++
		}
		keys = keys[i:]
	}
	if len(keys) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.SliceCmd, len(keys))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, k, recordFields...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var recs []*Record
	for _, cmd := range cmds {
		v := cmd.Val()
		if len(v) < 2 || str(v[1]) != string(StateInFlight) {
			continue // answered, or gone since SCAN saw it
		}
		rec, err := parseRecord(v)
		if err != nil {
			return nil, err
		}
		if q.matches(rec) {
			recs = append(recs, rec)
		}
	}
	return recs, nil
}

type scanNode struct {
	addr string
	c    redis.Cmdable
}

// scanNodes lists where to SCAN: each master of a Cluster, sorted by
// address so a cursor can name its position; otherwise the client itself.
func (s *Redis) scanNodes(ctx context.Context) ([]scanNode, error) {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok {
		return []scanNode{{c: s.c}}, nil
	}
	var mu sync.Mutex
	var nodes []scanNode
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, scanNode{addr: c.Options().Addr, c: c})
		mu.Unlock()
		return nil
	})
	slices.SortFunc(nodes, func(a, b scanNode) int { return cmp.Compare(a.addr, b.addr) })
	return nodes, err
}

type scanCursor struct {
	Node  string `json:"n,omitempty"`
	Cur   uint64 `json:"c,omitempty"`
	After []byte `json:"k,omitempty"`
}

func encodeScanCursor(c scanCursor) string {
	b, _ := json.Marshal(c)
	return "r" + base64.RawURLEncoding.EncodeToString(b)
}

func decodeScanCursor(s string) (scanCursor, error) {
	var c scanCursor
	if s == "" {
		return c, nil
	}
	if s[0] != 'r' {
		return c, errBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s[1:])
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, errBadCursor
	}
	return c, nil
}

// globEscape quotes the glob characters of SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if strings.IndexByte(`*?[]\`, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

var _ Store = (*Redis)(nil)
