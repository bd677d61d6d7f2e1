package store

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Lister pages through the records by state: what the operator reads (the
// admin API's and the console's lists of in-flight, answered, failed and
// dead keys). It is apart from Store because the request path never lists:
// a store keeps the indexes for it, but the gate needs none of it.
type Lister interface {
	// List pages through the records in one state (see ListQuery), at
	// most Limit of them, starting at an opaque cursor ("" for the first
	// page); Next is "" on the last page. Stores bound the work per call; a
	// page may hold fewer than Limit records even when Next is not "".
	// Records come without their journal (Lookup has it).
	List(ctx context.Context, q ListQuery) (ListPage, error)
}

// ListQuery selects records for List.
type ListQuery struct {
	// State is StateInFlight, StateAnswered, StateFailed or StateDead.
	State State
	// Scope keeps keys "<Scope>:…"; Prefix keeps keys starting with it.
	Scope, Prefix string
	// Since keeps records that entered their state at or after it.
	Since time.Time
	// Limit bounds the page (default 100).
	Limit  int
	Cursor string
	// Window is the platform's retry window of a key, for StateDead: a
	// failed record is dead once FirstSeen+Window(key) has passed at Now,
	// or at once when it is marked Dead. nil or 0 makes no key dead by
	// the window. With StateFailed, dead ones are left out.
	Window func(key string) time.Duration
	// Now is the clock of the dead test; zero means time.Now().
	Now time.Time
}

// ListPage is one page of List.
type ListPage struct {
	Records []*Record
	Next    string
}

// ErrBadQuery: a ListQuery with an unknown state or a cursor this store did
// not hand out.
var ErrBadQuery = errors.New("store: bad list query")

func (q *ListQuery) normalize() error {
	switch q.State {
	case StateInFlight, StateAnswered, StateFailed, StateDead:
	default:
		return fmt.Errorf("%w: unknown state %q", ErrBadQuery, q.State)
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	return nil
}

// keyMatches applies Scope and Prefix.
func (q *ListQuery) keyMatches(key string) bool {
	if q.Scope != "" && !strings.HasPrefix(key, q.Scope+":") {
		return false
	}
	return strings.HasPrefix(key, q.Prefix)
}

// keyPrefix is what every key Scope and Prefix keep starts with ("" for
// any key); false when they keep none.
func (q *ListQuery) keyPrefix() (string, bool) {
	if q.Scope == "" {
		return q.Prefix, true
	}
	sp := q.Scope + ":"
	switch {
	case strings.HasPrefix(q.Prefix, sp):
		return q.Prefix, true
	case strings.HasPrefix(sp, q.Prefix):
		return sp, true
	}
	return "", false
}

// matches applies every filter to a record in its stored state.
func (q *ListQuery) matches(r *Record) bool {
	if !q.keyMatches(r.Key) || r.Changed.Before(q.Since) {
		return false
	}
	want := q.State
	if want == StateDead {
		want = StateFailed
	}
	if r.State != want {
		return false
	}
	if r.State != StateFailed {
		return true
	}
	var w time.Duration
	if q.Window != nil {
		w = q.Window(r.Key)
	}
	return (r.StateAt(q.Now, w) == StateDead) == (q.State == StateDead)
}

// Listings are ordered newest first by the time a record entered its
// state (Record.Changed, in milliseconds), then by key. A position in that
// order is the pair; cursors carry the last one returned.
type listPos struct {
	Changed int64
	Key     string
}

func listOrder(a, b *Record) int {
	if c := cmp.Compare(b.Changed.UnixMilli(), a.Changed.UnixMilli()); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// listAfter reports whether (changed, key) comes after p in list order.
func listAfter(changed time.Time, key string, p listPos) bool {
	ms := changed.UnixMilli()
	return ms < p.Changed || (ms == p.Changed && key > p.Key)
}

// ixTime maps a time to a sort key that orders newest first, as bytes
// (bbolt) or a fixed-width string (Redis ZRANGE BYLEX).
func ixTime(ms int64) uint64 { return ^uint64(ms) }

// ixMember is a Redis index member: the inverted time in fixed-width hex,
// then the key, so lexical order is list order.
func ixMember(ms int64, key string) string {
	var b [16]byte
	const hex = "0123456789abcdef"
	v := ixTime(ms)
	for i := 15; i >= 0; i-- {
		b[i] = hex[v&15]
		v >>= 4
	}
	return string(b[:]) + ":" + key
}

func parseIxMember(m string) (listPos, bool) {
	if len(m) < 17 || m[16] != ':' {
		return listPos{}, false
	}
	var v uint64
	for i := 0; i < 16; i++ {
		c := m[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return listPos{}, false
		}
	}
	return listPos{Changed: int64(^v), Key: m[17:]}, true
}

// ixEntry is a Redis time bucket's entry (redis_list.go): its length (2
// bytes, big-endian), then the time in ms (8 bytes, big-endian) and the
// key. Entries are appended to their bucket's string as they come.
// A key too long for the 2-byte length is not indexed: "".
func ixEntry(ms int64, key string) string {
	n := 8 + len(key)
	if n > 0xffff {
		return ""
	}
	b := make([]byte, 10, 2+n)
	binary.BigEndian.PutUint16(b, uint16(n))
	binary.BigEndian.PutUint64(b[2:], uint64(ms))
	return string(append(b, key...))
}

// A finished bucket is written again sorted by key (sortIxBucket, when a
// process compacts it), so a listing by a key prefix reads of it only its
// head and the entries near the prefix (ixFindRange):
//
//	0x00 0x00 'S'   never an entry's start (an entry's length is ≥ 8)
//	n               the sorted entries (4 bytes, big-endian)
//	end             where they end: a late settle's APPEND adds its
//	                entry after it (the tail), in the order written
//	m               fences (4 bytes), at most ixFences
//	m fences        one every ixFenceEvery sorted entries (more in a
//	                bucket of over ixFences×ixFenceEvery) from the first,
//	                and one at the last: its offset (4 bytes), its key's
//	                length up to ixFenceKey (1 byte), and that much of its
//	                key, padded to ixFenceKey bytes
//	the entries     sorted by key, then time
//
// A listing reads the head (ixFindHead bytes: the fences within it),
// then, unless the prefix is past the last key or before the first, the
// entries between the last fence before the prefix and the first after
// it (what matches, and at most two fences' spans besides), and the tail:
// a few small reads a bucket, whatever it holds. The fences cost under 2
// bytes an entry (~44 bytes for a 34-byte key). A gateway of an earlier
// version reads a sorted bucket as one whose first entry is malformed: it
// lists nothing from it, never misreads it.
const (
	ixSortedMagic = "\x00\x00S"
	ixSortedHead  = len(ixSortedMagic) + 12
	ixFenceEvery  = 16
	ixFences      = 64 + 1
	ixFenceKey    = 24
	ixFenceSize   = 4 + 1 + ixFenceKey
	ixFindHead    = ixSortedHead + ixFences*ixFenceSize
)

// sortIxBucket is bucket b written sorted, its tail (if sorted already)
// sorted in; false when it is sorted already without a tail, or holds no
// entry. A listing that read a head before the bucket was written again
// finds the head changed (a tail sorted in adds entries: n grows), and
// reads the bucket whole (readBuckets).
func sortIxBucket(b string) (string, bool) {
	if end, _, ok := sortedHead(b); ok && end == len(b) {
		return "", false
	}
	var es []listPos
	eachIxEntry(b, func(ms int64, key string) { es = append(es, listPos{Changed: ms, Key: key}) })
	if len(es) == 0 {
		return "", false
	}
	slices.SortFunc(es, func(a, b listPos) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Changed, b.Changed)
	})
	es = slices.Compact(es) // an entry appended twice
	step := max(ixFenceEvery, (len(es)+ixFences-2)/(ixFences-1))
	m := (len(es)+step-1)/step + 1
	start := ixSortedHead + m*ixFenceSize
	size := start
	for _, e := range es {
		size += 10 + len(e.Key)
	}
	out := make([]byte, start, size)
	copy(out, ixSortedMagic)
	binary.BigEndian.PutUint32(out[3:], uint32(len(es)))
	binary.BigEndian.PutUint32(out[7:], uint32(size))
	binary.BigEndian.PutUint32(out[11:], uint32(m))
	fence := func(j int, key string, at int) {
		f := out[ixSortedHead+j*ixFenceSize:]
		binary.BigEndian.PutUint32(f, uint32(at))
		k := key[:min(len(key), ixFenceKey)]
		f[4] = byte(len(k))
		copy(f[5:], k)
	}
	for i, e := range es {
		if i%step == 0 {
			fence(i/step, e.Key, len(out))
		}
		if i == len(es)-1 {
			fence(m-1, e.Key, len(out))
		}
		out = binary.BigEndian.AppendUint16(out, uint16(8+len(e.Key)))
		out = binary.BigEndian.AppendUint64(out, uint64(e.Changed))
		out = append(out, e.Key...)
	}
	return string(out), true
}

// ixFindRange reads a sorted bucket's head (its first ixFindHead bytes,
// or all of a shorter bucket) for a listing by prefix p (not ""): the
// entries that may start with p are at [from, to) (none when from == to),
// the tail from end on. ok is false when head is not a sorted bucket's
// whole head: the bucket is to be read whole.
func ixFindRange(head, p string) (from, to, end int, ok bool) {
	end, m, sorted := sortedHead(head)
	if !sorted {
		return 0, 0, 0, false
	}
	fences := head[ixSortedHead:]
	if m == 0 || m > ixFences || len(fences) < m*ixFenceSize || end < ixSortedHead+m*ixFenceSize {
		return 0, 0, 0, false
	}
	// A damaged head (its fences out of order, past the entries, or a
	// key longer than a fence holds) is not searched: read whole.
	for j, prev := 0, ixSortedHead+m*ixFenceSize; j < m; j++ {
		o := be32(fences, j*ixFenceSize)
		if fences[j*ixFenceSize+4] > ixFenceKey || o < prev || o > end {
			return 0, 0, 0, false
		}
		prev = o
	}
	// order: fence j's key against p: -1 before it, 1 after it, 0 when it
	// starts with p, or may (a fence holds ixFenceKey bytes of a key).
	order := func(j int) int {
		f := fences[j*ixFenceSize:]
		kl := int(f[4])
		k := f[5 : 5+kl]
		n := min(kl, len(p))
		if c := strings.Compare(k[:n], p[:n]); c != 0 {
			return c
		}
		if kl < len(p) && kl < ixFenceKey {
			return -1 // the key is shorter than p
		}
		return 0
	}
	off := func(j int) int { return be32(fences, j*ixFenceSize) }
	a := sort.Search(m, func(j int) bool { return order(j) >= 0 })
	b := a + sort.Search(m-a, func(j int) bool { return order(a+j) > 0 })
	if a == m || b == 0 {
		return 0, 0, end, true // every key before p, or after it
	}
	from, to = off(max(a-1, 0)), end
	if b < m {
		to = off(b)
	}
	return from, to, end, true
}

// eachIxEntry calls f on each entry of a bucket, sorted (its sorted
// entries, then its tail) or as written; it stops at the first malformed
// one (never misreads past it).
func eachIxEntry(b string, f func(ms int64, key string)) {
	if strings.HasPrefix(b, ixSortedMagic) {
		end, m, ok := sortedHead(b)
		if !ok || m > len(b) || ixSortedHead+m*ixFenceSize > end || end > len(b) {
			return
		}
		parseIxEntries(b[ixSortedHead+m*ixFenceSize:end], f)
		b = b[end:]
	}
	parseIxEntries(b, f)
}

// sortedHead reads the head of a sorted bucket (or of its first bytes):
// where its sorted entries end, and its fences; false when b does not
// start as a sorted bucket does. Callers check the figures against what
// they hold.
func sortedHead(b string) (end, m int, ok bool) {
	if !strings.HasPrefix(b, ixSortedMagic) || len(b) < ixSortedHead {
		return 0, 0, false
	}
	return be32(b, 7), be32(b, 11), true
}

// be32 is the big-endian uint32 at b[i:].
func be32(b string, i int) int {
	return int(b[i])<<24 | int(b[i+1])<<16 | int(b[i+2])<<8 | int(b[i+3])
}

// parseIxEntries calls f on each entry of a string of entries, in the
// order written; it stops at the first malformed one (never misreads past
// it).
func parseIxEntries(b string, f func(ms int64, key string)) {
	for len(b) >= 2 {
		n := int(b[0])<<8 | int(b[1])
		if n < 8 || len(b) < 2+n {
			return
		}
		var ms uint64
		for i := 2; i < 10; i++ {
			ms = ms<<8 | uint64(b[i])
		}
		f(int64(ms), b[10:2+n])
		b = b[2+n:]
	}
}

// ixBolt is an embedded index entry's key: inverted time, then the key.
func ixBolt(ms int64, key string) []byte {
	b := make([]byte, 8, 9+len(key))
	binary.BigEndian.PutUint64(b, ixTime(ms))
	b = append(b, 'k')
	return append(b, key...)
}

func parseIxBolt(b []byte) (listPos, bool) {
	if len(b) < 9 {
		return listPos{}, false
	}
	return listPos{Changed: int64(^binary.BigEndian.Uint64(b[:8])), Key: string(b[9:])}, true
}

func encodeListCursor(p listPos) string {
	b := binary.AppendVarint(nil, p.Changed)
	b = append(b, p.Key...)
	return "l" + base64.RawURLEncoding.EncodeToString(b)
}

func decodeListCursor(c string) (listPos, error) {
	if c == "" {
		return listPos{Changed: 1<<63 - 1}, nil
	}
	if c[0] != 'l' {
		return listPos{}, ErrBadQuery
	}
	b, err := base64.RawURLEncoding.DecodeString(c[1:])
	if err != nil {
		return listPos{}, ErrBadQuery
	}
	v, n := binary.Varint(b)
	if n <= 0 {
		return listPos{}, ErrBadQuery
	}
	return listPos{Changed: v, Key: string(b[n:])}, nil
}

// Interface guards
var (
	_ Lister = (*Memory)(nil)
	_ Lister = (*Embedded)(nil)
	_ Lister = (*Redis)(nil)
)
