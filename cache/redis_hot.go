package cache

import (
	"context"
	_ "embed"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// hotAnswers keeps answered records in the process (RedisOptions.
// HotAnswers), so a duplicate of a key answered recently is replayed with
// no round trip to Redis. It must never replay an answer the store has
// dropped (a purge, a reopen) or let an expired one outlive its ttl. How:
//
//   - A fence. Before Delete and Reopen drop an answer, they publish a
//     block of the key on <prefix>:hot; every instance with the cache drops
//     the key, keeps it out of memory, and acknowledges in
//     <prefix>:hot:ack:<nonce>. Only once every live instance (the registry
//     <prefix>:hot:live, a sorted set of instance ids by the server's time
//     of their last heartbeat) has acknowledged, or a lease has passed, does
//     the script run; it publishes the key's unblock itself. Blocking
//     before the script, not invalidating after it, is what keeps the
//     history linearizable: once the script has run, a reader of Redis sees
//     the answer gone, and no instance may replay it after that
//     (TestLinearizableRedisHot found the difference).
//   - A lease. An instance replays from memory only while a PING sent on
//     its pub/sub connection less than a lease ago has come back, after a
//     heartbeat in the registry. Redis delivers a connection's messages in
//     order, so that pong proves every block published before the ping
//     was handled here; a purger that waited a lease without an
//     instance's acknowledgement knows it cannot be replaying from memory.
//     A lost pub/sub connection ends the lease at once and empties the cache
//     (blocks may have been missed in between).
//   - A generation, bumped by every block, unblock and loss of the
//     connection: a claim reply that left Redis before one of them reached
//     this process is not kept.
//   - An entry lives at most until the record's own expiry, as the claim
//     script measured it on the server's clock, less a margin, counted
//     from when the claim was sent.
//   - A replay from memory carries the copies this instance knows of and
//     the conflicts as they were when the entry was kept: those two counts
//     are not linearizable; everything else is.
//   - Copies replayed from memory are counted in Redis in batches (every
//     hotFlush, and at Close); the record's first-seen time guards the
//     count, so copies of a purged key are not counted in a new record of
//     the same key. Lookup on this instance counts the key's copies first.
//     Another instance sees them within hotFlush.
type hotAnswers struct {
	s       *Redis
	id      string
	channel string // s.hotChannel(), named once: receive compares every message with it
	max     int    // entries
	room    int64  // bytes: answers are up to max_answer each, most a few bytes
	lease   time.Duration
	base    time.Time // monotonic origin of until
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	gen   atomic.Uint64 // bumped by every block, unblock and reset
	hits  atomic.Int64  // claims answered from memory
	until atomic.Int64  // the lease: entries serve until base+until

	mu      sync.Mutex
	m       map[string]*hotEntry
	bytes   int64                           // held by m's entries (hotEntry.size)
	pending map[string]hotCount             // copies replayed here, not yet counted in Redis
	blocked map[string]map[string]time.Time // keys being dropped: the fences (nonce → until) keeping them out of memory
	nblocks int                             // fences in blocked
	floodTo time.Time                       // too many fences at once: nothing kept or replayed until then
	pings   map[string]chan struct{}        // the lease's pings under way, by payload
	epoch   uint64                          // resets so far (a pong from before one renews nothing)
}

type hotEntry struct {
	rec     *Record // as the claim returned it; shared, never written
	hits    int64   // copies replayed from this entry
	expires time.Time
	size    int64
}

// hotEntryBytes is a budget per entry on average: 10,000 entries hold at
// most 20 MiB, however large the answers.
const hotEntryBytes = 2 << 10

// entrySize is about what an entry holds in memory.
func entrySize(key string, r *Record) int64 {
	n := len(key) + len(r.Key) + len(r.Body) + len(r.Fingerprint) + 400
	for k, vs := range r.Header {
		n += len(k) + 16
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	return int64(n)
}

type hotCount struct {
	first int64 // the record's first-seen time, ms: which record they belong to
	n     int64
}

const (
	hotLease  = 2 * time.Second
	hotFlush  = 100 * time.Millisecond
	hotMargin = 100 * time.Millisecond // an entry ends this much before its record
	hotMaxAge = time.Minute
	// hotBlock: a key being dropped stays out of memory at most this long
	// when the drop's own message never comes; far past any store call.
	hotBlock = 30 * time.Second
)

var (
	//go:embed hot.lua
	hotLua         string
	hotCountScript = redis.NewScript(clockLua + hotLua + "\nreturn count()")
	hotFenceScript = redis.NewScript(clockLua + hotLua + "\nreturn fence()")
	hotBeatScript  = redis.NewScript(clockLua + hotLua + "\nreturn beat()")
)

func newHotAnswers(s *Redis, max int) *hotAnswers {
	h := &hotAnswers{
		s: s, id: newToken(), channel: s.hotChannel(), max: max, room: int64(max) * hotEntryBytes, lease: hotLease, base: time.Now(),
		m: make(map[string]*hotEntry), pending: make(map[string]hotCount), blocked: make(map[string]map[string]time.Time),
		pings: make(map[string]chan struct{}),
	}
	h.ctx, h.stop = context.WithCancel(context.Background())
	return h
}

func (s *Redis) hotChannel() string { return s.prefix + ":hot" }
func (s *Redis) hotLiveKey() string { return s.prefix + ":hot:live" }
func (s *Redis) hotAckKey(nonce string) string {
	return s.prefix + ":hot:ack:" + nonce
}

// now is the monotonic time since base.
func (h *hotAnswers) now() int64 { return int64(time.Since(h.base)) }

// leased: may entries be served now?
func (h *hotAnswers) leased() bool { return h.now() < h.until.Load() }

// hotTicket is what keep needs to know of a claim: the generation when
// it was sent, and when (the script ran after that).
type hotTicket struct {
	gen  uint64
	sent time.Time
}

// begin is called before a claim goes to Redis: the ticket to hand to
// keep, or ok false when no reply of this claim may be kept.
func (h *hotAnswers) begin() (t hotTicket, ok bool) {
	return hotTicket{gen: h.gen.Load(), sent: time.Now()}, h.leased()
}

// claim answers a duplicate from memory: a copy of the record with this
// copy counted, or ok false.
func (h *hotAnswers) claim(key, fingerprint string) (*Record, bool) {
	if !h.leased() {
		return nil, false
	}
	now := time.Now()
	h.mu.Lock()
	e := h.m[key]
	if e == nil || !now.Before(e.expires) || h.isBlocked(key, now) ||
		(fingerprint != "" && e.rec.Fingerprint != "" && fingerprint != e.rec.Fingerprint) {
		// Expired, or a conflict: Redis counts and answers it.
		if e != nil && !now.Before(e.expires) {
			h.remove(key, e)
		}
		h.mu.Unlock()
		return nil, false
	}
	e.hits++
	h.hits.Add(1)
	c := h.pending[key]
	c.first, c.n = e.rec.FirstSeen.UnixMilli(), c.n+1
	h.pending[key] = c
	rec := *e.rec
	hits := e.hits
	h.mu.Unlock()
	rec.Copies += hits
	rec.CopyOutcomes.Replayed += hits
	rec.LastSeen = now
	return &rec, true
}

// keep remembers an answered record a claim returned, unless an
// invalidation or reset came since begin returned t.
func (h *hotAnswers) keep(key string, rec *Record, t hotTicket) {
	// What was left of the record's ttl when the claim ran, by the
	// server's clock (the claim set LastSeen to its time), counted from
	// when the claim was sent: a reply that came late (a paused server)
	// must not stretch it.
	left := min(rec.ExpiresAt.Sub(rec.LastSeen)-hotMargin, hotMaxAge)
	if left <= 0 || rec.State != StateAnswered {
		return
	}
	e := &hotEntry{rec: rec, expires: t.sent.Add(left), size: entrySize(key, rec)}
	if e.size > h.room/8 {
		return // one answer would crowd out the others
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen.Load() != t.gen || !h.leased() || h.isBlocked(key, time.Now()) {
		return
	}
	if old, ok := h.m[key]; ok {
		h.remove(key, old)
	}
	for k, o := range h.m { // full: out go whichever the map yields
		if len(h.m) < h.max && h.bytes+e.size <= h.room {
			break
		}
		h.remove(k, o)
	}
	h.m[key] = e
	h.bytes += e.size
}

// remove takes e, key's entry, out; under mu.
func (h *hotAnswers) remove(key string, e *hotEntry) {
	delete(h.m, key)
	h.bytes -= e.size
}

// block forgets key, and any claim reply under way, and keeps it out of
// memory until the fence nonce unblocks it, or for hotBlock if that never
// comes (the script that was to drop the answer never ran, or its message
// was lost). Two fences of one key each hold it.
func (h *hotAnswers) block(key, nonce string) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen.Add(1)
	if e, ok := h.m[key]; ok {
		h.remove(key, e)
	}
	if h.nblocks >= 4*h.max {
		// A flood of purges: rather than track them all, keep and
		// replay nothing for as long as the newest could hold its key.
		h.floodTo = now.Add(hotBlock)
		clear(h.blocked)
		clear(h.m)
		h.nblocks, h.bytes = 0, 0
		return
	}
	fences := h.blocked[key]
	if fences == nil {
		fences = make(map[string]time.Time, 1)
		h.blocked[key] = fences
	}
	if _, ok := fences[nonce]; !ok {
		h.nblocks++
	}
	fences[nonce] = now.Add(hotBlock)
}

// unblock ends the fence nonce on key: its script has dropped the answer
// just now, so key is forgotten again (a reply from before must not be
// kept), and it may come back into memory once no other fence holds it.
func (h *hotAnswers) unblock(key, nonce string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen.Add(1)
	if e, ok := h.m[key]; ok {
		h.remove(key, e)
	}
	if fences := h.blocked[key]; fences != nil {
		if _, ok := fences[nonce]; ok {
			delete(fences, nonce)
			h.nblocks--
		}
		if len(fences) == 0 {
			delete(h.blocked, key)
		}
	}
}

// isBlocked: is key kept out of memory? Under mu.
func (h *hotAnswers) isBlocked(key string, now time.Time) bool {
	if now.Before(h.floodTo) {
		return true
	}
	fences := h.blocked[key]
	for nonce, until := range fences {
		if !now.Before(until) {
			delete(fences, nonce)
			h.nblocks--
		}
	}
	if len(fences) == 0 {
		delete(h.blocked, key)
		return false
	}
	return true
}

// prune forgets the fences that ran out on keys nobody asked for since.
func (h *hotAnswers) prune() {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for key := range h.blocked {
		h.isBlocked(key, now)
	}
}

// reset forgets everything and ends the lease: invalidations may have
// been missed.
func (h *hotAnswers) reset() {
	h.mu.Lock()
	h.gen.Add(1)
	h.epoch++
	h.until.Store(0)
	clear(h.m)
	h.bytes = 0
	h.mu.Unlock()
}

// loop renews the lease and counts replayed copies in Redis until close.
func (h *hotAnswers) loop() {
	defer h.wg.Done()
	renew := time.NewTicker(h.lease / 4)
	flush := time.NewTicker(hotFlush)
	defer renew.Stop()
	defer flush.Stop()
	h.renew()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-renew.C:
			h.renew()
		case <-flush.C:
			h.flush(context.Background())
			h.prune()
		}
	}
}

// renew extends the lease: a heartbeat in the registry that publishes a
// ping, sent after sent; once the ping has come back on the pub/sub
// connection, the lease runs a lease from sent.
func (h *hotAnswers) renew() {
	sent := h.now()
	ping := "p\n" + h.id + "\n" + newToken()
	back := make(chan struct{})
	h.mu.Lock()
	epoch := h.epoch
	h.pings[ping] = back
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.pings, ping)
		h.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(h.ctx, h.lease/2)
	defer cancel()
	err := hotBeatScript.Run(ctx, h.s.c, []string{h.s.hotLiveKey()}, h.id, ms(h.lease), h.s.hotChannel(), ping).Err()
	if err != nil {
		return // the lease runs out by itself
	}
	select {
	case <-back:
	case <-ctx.Done():
		return
	}
	h.mu.Lock()
	if h.epoch == epoch {
		h.until.Store(sent + int64(h.lease))
	}
	h.mu.Unlock()
}

// pong takes a lease's ping back from the pub/sub connection.
func (h *hotAnswers) pong(ping string) {
	h.mu.Lock()
	if c, ok := h.pings[ping]; ok {
		close(c)
		delete(h.pings, ping)
	}
	h.mu.Unlock()
}

// flush counts the copies replayed from memory in their records.
func (h *hotAnswers) flush(ctx context.Context, only ...string) {
	h.mu.Lock()
	var batch map[string]hotCount
	if only == nil {
		if len(h.pending) == 0 {
			h.mu.Unlock()
			return
		}
		batch, h.pending = h.pending, make(map[string]hotCount)
	} else {
		batch = make(map[string]hotCount)
		for _, k := range only {
			if c, ok := h.pending[k]; ok {
				batch[k] = c
				delete(h.pending, k)
			}
		}
	}
	h.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	failed := h.s.count(ctx, batch)
	if len(failed) == 0 {
		return
	}
	// Counted next time. A count whose connection broke after it was sent
	// may have run: it is not sent again (onceScripter), and is lost.
	h.mu.Lock()
	for k, c := range failed {
		if p, ok := h.pending[k]; ok && p.first == c.first {
			c.n += p.n
		} else if ok {
			continue // a newer record of the key: the old copies go
		}
		h.pending[k] = c
	}
	h.mu.Unlock()
}

// close counts what is pending, stops the loop and leaves the registry,
// so purges stop waiting for this instance.
func (h *hotAnswers) close() {
	h.stop()
	h.wg.Wait()
	h.reset()
	h.flush(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = h.s.c.ZRem(ctx, h.s.hotLiveKey(), h.id).Err() // else it ages out of the window
}

// count runs the count script for each key in one pipeline and returns
// the counts Redis never got (to try again).
func (s *Redis) count(ctx context.Context, batch map[string]hotCount) map[string]hotCount {
	keys := make([]string, 0, len(batch))
	for k := range batch {
		keys = append(keys, k)
	}
	exec := func(keys []string, load bool) (redo []string, failed map[string]hotCount) {
		cmds := make([]*redis.Cmd, len(keys))
		_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				c := batch[k]
				args := []any{strconv.FormatInt(c.first, 10), c.n}
				if load {
					cmds[i] = hotCountScript.Eval(ctx, onceScripter(p), []string{s.hashKey(k)}, args...)
				} else {
					cmds[i] = hotCountScript.EvalSha(ctx, onceScripter(p), []string{s.hashKey(k)}, args...)
				}
			}
			return nil
		})
		for i, cmd := range cmds {
			err := cmd.Err()
			switch {
			case err == nil || errors.Is(err, redis.Nil):
			case !load && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")):
				redo = append(redo, keys[i])
			case isSent(err):
				// It may have run: not again.
			default:
				if failed == nil {
					failed = make(map[string]hotCount)
				}
				failed[keys[i]] = batch[keys[i]]
			}
		}
		return redo, failed
	}
	redo, failed := exec(keys, false)
	if len(redo) > 0 {
		_, f := exec(redo, true)
		for k, c := range f {
			if failed == nil {
				failed = make(map[string]hotCount)
			}
			failed[k] = c
		}
	}
	return failed
}

// isSent: may the command have reached Redis? Only a refused dial, an
// exhausted pool or a closed client say for sure that it did not.
func isSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return !errors.Is(err, redis.ErrPoolTimeout) && !errors.Is(err, redis.ErrClosed)
}

// fence runs before a script that drops key's answer (delete.lua,
// reopen.lua): it blocks key on every live instance with hot answers —
// each drops it and stops keeping and replaying it from memory — and
// returns once each has said so, or a lease has passed (by then one that
// has not cannot replay from memory: see hotAnswers). The script then
// publishes done (the returned message) in itself, which unblocks key
// wherever it arrives. Blocking first matters: once the script has run,
// any reader of Redis sees the answer gone, and no instance may replay it
// after that. An error means nothing was blocked: do not drop the answer.
func (s *Redis) fence(ctx context.Context, key string) (channel, done string, err error) {
	nonce := newToken()
	start := time.Now()
	if s.hot != nil {
		s.hot.block(key, nonce)
	}
	// The caller's bound too: a fence cut short is an error, and then
	// nothing is dropped.
	ctx, cancel := context.WithTimeout(ctx, hotLease+time.Second)
	defer cancel()
	// The registry is read after the publish, in the same script: an
	// instance that joins later renews its lease after it has seen the
	// block. The block goes out from the registry's server, as the
	// lease's pings do (see beat in hot.lua).
	live, err := hotFenceScript.Run(ctx, s.c, []string{s.hotLiveKey()},
		s.hotChannel(), "b\n"+nonce+"\n"+key, ms(hotLease+time.Second)).StringSlice()
	if err != nil {
		return "", "", s.wrap("fence", err)
	}
	done = "d\n" + nonce + "\n" + key
	if s.hot != nil {
		live = slices.DeleteFunc(live, func(id string) bool { return id == s.hot.id })
	}
	if len(live) == 0 {
		return s.hotChannel(), done, nil
	}
	ackKey := s.hotAckKey(nonce)
	defer s.c.Del(ctx, ackKey)
	for wait := 500 * time.Microsecond; ; wait = min(2*wait, 20*time.Millisecond) {
		acked, err := s.c.SMembers(ctx, ackKey).Result()
		if err == nil && !slices.ContainsFunc(live, func(id string) bool { return !slices.Contains(acked, id) }) {
			break
		}
		left := hotLease - time.Since(start)
		if left <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return "", "", s.wrap("fence", ctx.Err())
		case <-time.After(min(wait, left)):
		}
	}
	return s.hotChannel(), done, nil
}

// hotMessage handles a message on the hot answers' channel: "b" blocks the
// key and says so (fence), "d" unblocks it. Both drop it.
func (s *Redis) hotMessage(payload string) {
	kind, rest, _ := strings.Cut(payload, "\n")
	nonce, key, ok := strings.Cut(rest, "\n")
	if !ok || s.hot == nil {
		return
	}
	switch kind {
	case "p":
		s.hot.pong(payload)
		return
	case "d":
		s.hot.unblock(key, nonce)
		return
	case "b":
	default:
		return
	}
	s.hot.block(key, nonce)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hotLease)
		defer cancel()
		p := s.c.Pipeline()
		p.SAdd(ctx, s.hotAckKey(nonce), s.hot.id)
		p.PExpire(ctx, s.hotAckKey(nonce), 2*hotLease)
		_, _ = p.Exec(ctx)
	}()
}
