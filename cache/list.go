package cache

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"time"
)

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
