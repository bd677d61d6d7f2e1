package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/keying"
)

// The Redis store's order state and its reconciliation indexes (see Order
// and OrderIndex). An order's state is a hash, event → its value
// (order_codec.go), kept order_ttl after its last event, at
//
//	<prefix>:{<tag>}o<digest>
//
// where <digest> is 96 bits of SHA-256 of the order's name (base64url, 16
// characters) and <tag> the shortest string whose Cluster hash slot is the
// order's own (slotTag): the state sits in the slot of the order's event
// records, <prefix>:{<order>}:<event>, so the claim and the completion
// scripts touch one slot, and its name does not repeat the order's (an
// Alipay order's is 50 bytes and more): the key costs 32 bytes, not 80, of
// the 200-byte budget an order has. Collisions of 96 bits are not a
// concern below 10^14 orders.
//
// The day index: a list per scope, merchant and UTC day,
// <prefix>:rx:{<scope>:<merchant>:<yyyymmdd>}, of packed order ids
// (packID: 15 bytes for a 28-digit trade_no), kept order_ttl after its
// last entry. The ref index: a string per (scope, payment|refund, object),
// <prefix>:rf:<digest>, of ","-prefixed event keys (without their scope),
// kept order_ttl. Both are written by the completion script on a single
// server and in the completion's own pipeline on Cluster, as the list
// index is (settle); a day list takes one slot, which is plenty: RPUSH
// costs nothing, and a reconciliation reads it in pages.

// slotTags[s] is the shortest string of [0-9a-zA-Z] (the first in that
// order) whose Cluster hash slot is s; every slot has one of at most three
// characters. The table is part of the layout: it must never change.
var slotTags = sync.OnceValue(func() *[16384]string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var t [16384]string
	left := len(t)
	try := func(s string) {
		if slot := crc16(s) % 16384; t[slot] == "" {
			t[slot] = s
			left--
		}
	}
	for _, a := range alphabet {
		try(string(a))
	}
	for _, a := range alphabet {
		for _, b := range alphabet {
			try(string(a) + string(b))
		}
	}
	for _, a := range alphabet {
		for _, b := range alphabet {
			for _, c := range alphabet {
				if left == 0 {
					return &t
				}
				try(string(a) + string(b) + string(c))
			}
		}
	}
	if left > 0 {
		panic("store: a Cluster slot without a tag of three characters")
	}
	return &t
})

// crc16 is CRC-16/XMODEM, Redis Cluster's key hash, a byte at a time
// from crc16Table (bit by bit it was a third of an order key's cost).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

// crc16Table[b] is the CRC of the byte b alone (polynomial 0x1021).
var crc16Table = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

// digest16 is 96 bits of SHA-256 of s, base64url.
func digest16(s string) string {
	d := digest16Of(s)
	return string(d[:])
}

// digest16Of is digest16 held in an array, for a caller that builds a
// longer string of it.
func digest16Of(s string) (d [16]byte) {
	sum := sha256.Sum256([]byte(s))
	base64.RawURLEncoding.Encode(d[:], sum[:12])
	return d
}

// orderKey is the Redis key of an order's state (see above).
func (s *Redis) orderKey(order string) string {
	d := digest16Of(order) // the name is the one string allocated
	return s.prefix + ":{" + slotTags()[crc16(escapeKey(order))%16384] + "}o" + string(d[:])
}

// dayKey is the day index's list of scope's merchant's events filed
// under day (yyyymmdd).
func (s *Redis) dayKey(scope, merchant, day string) string {
	return s.prefix + ":rx:{" + escapeKey(scope) + ":" + escapeKey(merchant) + ":" + day + "}"
}

// refKey is the ref index's entry of an object of scope, for the events
// that settle as settles.
func (s *Redis) refKey(scope string, settles keying.Settlement, ref string) string {
	return s.prefix + ":rf:" + digest16(scope+"\x00"+string(settles)+"\x00"+ref)
}

// orderIx is what a completion files in the indexes: the day list and
// the ref keys (keys), the day list's entry, and the event for the refs.
type orderIx struct {
	keys  []string
	entry []byte
	event string
	ttl   time.Duration
}

// orderIndexOf is key's index writes for r, run at ran; nil for an event
// that is not filed.
func (s *Redis) orderIndexOf(key string, ran time.Time, r *OrderRun) *orderIx {
	scope, merchant, id, ok := filedAs(key, r)
	if !ok {
		return nil
	}
	ix := &orderIx{keys: []string{s.dayKey(scope, merchant, filedDay(ran, r))}, entry: packID(id), ttl: r.TTL}
	if len(r.Refs) > 0 {
		_, within, _ := strings.Cut(key, ":")
		ix.event = "," + within
		for _, ref := range r.Refs {
			ix.keys = append(ix.keys, s.refKey(scope, r.Settles, ref))
		}
	}
	return ix
}

// write queues ix's writes on p (Cluster: beside the completion script).
// The index keys live on other nodes than the order state, written in
// parallel with the script: either may land first, by a millisecond or
// so. They are kept indexSlack longer, so that an entry never expires
// before the order state it points to (readers check entries against
// the state: outliving it is harmless, the reverse would lose an event's
// ref while its order still remembers it).
func (ix *orderIx) write(ctx context.Context, p redis.Pipeliner) {
	ttl := ix.ttl + indexSlack
	p.RPush(ctx, ix.keys[0], ix.entry)
	p.PExpire(ctx, ix.keys[0], ttl)
	for _, k := range ix.keys[1:] {
		p.Append(ctx, k, ix.event)
		p.PExpire(ctx, k, ttl)
	}
}

// indexSlack is how much longer the order indexes written beside a
// completion (Cluster) are kept than its order state.
const indexSlack = time.Second

// Order reads an order's state: one HGETALL and its PTTL, in one round
// trip.
func (s *Redis) Order(ctx context.Context, order string) (*Order, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	k := s.orderKey(order)
	var all *redis.MapStringStringCmd
	var pttl *redis.DurationCmd
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, k)
		pttl = p.PTTL(ctx, k)
		return nil
	})
	if err != nil {
		return nil, s.wrap("order", err)
	}
	if len(all.Val()) == 0 {
		return nil, ErrNotFound
	}
	out, err := orderOfHash(order, all.Val())
	if err != nil {
		return nil, s.wrap("order", err)
	}
	if d := pttl.Val(); d > 0 {
		out.ExpiresAt = time.Now().Add(d)
	}
	return out, nil
}

// orderOfHash is an order's state read from its hash.
func orderOfHash(order string, h map[string]string) (*Order, error) {
	out := &Order{Key: order}
	for ev, v := range h {
		e, err := decodeOrderEvent(order, ev, v)
		if err != nil {
			return nil, err
		}
		out.Events = append(out.Events, e)
	}
	sortOrderEvents(out.Events)
	return out, nil
}

// Orders reads the states of names in one pipeline.
func (s *Redis) Orders(ctx context.Context, names []string) ([]*Order, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	cmds := make([]*redis.MapStringStringCmd, len(names))
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.HGetAll(ctx, s.orderKey(n))
		}
		return nil
	})
	if err != nil {
		return nil, s.wrap("orders", err)
	}
	out := make([]*Order, len(names))
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		if out[i], err = orderOfHash(names[i], c.Val()); err != nil {
			return nil, s.wrap("orders", err)
		}
	}
	return out, nil
}

// EventsByRef reads the ref index in one pipeline.
func (s *Redis) EventsByRef(ctx context.Context, scope string, settles keying.Settlement, refs []string) ([][]string, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	cmds := make([]*redis.StringCmd, len(refs))
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, ref := range refs {
			cmds[i] = p.Get(ctx, s.refKey(scope, settles, ref))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, s.wrap("refs", err)
	}
	out := make([][]string, len(refs))
	for i, c := range cmds {
		out[i] = refEvents(scope, c.Val())
	}
	return out, nil
}

// refEvents reads a ref index value: ","-prefixed keys within scope, once
// each (a retried completion may have filed one twice).
func refEvents(scope, v string) []string {
	var out []string
	for _, id := range strings.Split(v, ",") {
		if k := scope + ":" + id; id != "" && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// RanOn reads a page of a day list.
func (s *Redis) RanOn(ctx context.Context, q RanQuery) (RanPage, error) {
	if s.closed.Load() {
		return RanPage{}, ErrClosed
	}
	start := int64(0)
	if q.Cursor != "" {
		n, err := strconv.ParseInt(q.Cursor, 10, 64)
		if err != nil || n < 0 {
			return RanPage{}, ErrBadQuery
		}
		start = n
	}
	limit := int64(q.limit())
	v, err := s.c.LRange(ctx, s.dayKey(q.Scope, q.Merchant, dayName(q.Day)), start, start+limit-1).Result()
	if err != nil {
		return RanPage{}, s.wrap("day index", err)
	}
	page := RanPage{Orders: make([]string, 0, len(v))}
	for _, e := range v {
		if id, ok := unpackID([]byte(e)); ok {
			page.Orders = append(page.Orders, OrderName(q.Scope, q.Merchant, id))
		}
	}
	if int64(len(v)) == limit {
		page.Next = strconv.FormatInt(start+limit, 10)
	}
	return page, nil
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
