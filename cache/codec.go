package cache

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"time"
)

// now is the clock of the memory and embedded stores; tests replace it
// before constructing a store (each store copies it, so swapping it never
// races with a running store). Redis uses the server's clock instead.
var now = time.Now

// newToken returns a random owner token: unguessable, so a stale or foreign
// request cannot complete a claim it does not hold.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

var errCorrupt = errors.New("cache: corrupt record")

// appendHeader encodes h compactly: count, then per name (sorted, so equal
// headers encode equally) the name and its values, all length-prefixed.
func appendHeader(b []byte, h http.Header) []byte {
	b = binary.AppendUvarint(b, uint64(len(h)))
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = appendString(b, k)
		vs := h[k]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes what the append helpers wrote; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if uint64(len(r.b)) < n {
		r.err = errCorrupt
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return string(r.bytes()) }

func (r *reader) header() http.Header {
	n := r.uvarint()
	if r.err != nil || n == 0 {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errCorrupt
		return nil
	}
	h := make(http.Header, n)
	for range n {
		k := r.string()
		nv := r.uvarint()
		if r.err != nil || nv > uint64(len(r.b)) {
			r.err = errCorrupt
			return nil
		}
		vs := make([]string, nv)
		for j := range vs {
			vs[j] = r.string()
		}
		h[k] = vs
	}
	return h
}

func decodeHeader(b []byte) (http.Header, error) {
	r := reader{b: b}
	h := r.header()
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	return h, r.err
}

// entry is a record plus the owner token, as the memory and embedded stores
// keep it.
type entry struct {
	Record
	token string
}

const entryVersion = 1

// encodeEntry is the embedded store's on-disk form: a version byte, then the
// fields in a fixed order. Times are Unix milliseconds, like Redis's.
func encodeEntry(e *entry) []byte {
	b := make([]byte, 0, 64+len(e.Key)+len(e.Body)+len(e.Fingerprint))
	b = append(b, entryVersion)
	b = appendString(b, e.Key)
	var st byte
	if e.State == StateAnswered {
		st = 1
	}
	b = append(b, st)
	b = appendString(b, e.token)
	b = binary.AppendVarint(b, int64(e.Status))
	b = appendHeader(b, e.Header)
	b = appendBytes(b, e.Body)
	cached := byte(0)
	if e.BodyCached {
		cached = 1
	}
	b = append(b, cached)
	b = appendString(b, e.Fingerprint)
	b = binary.AppendVarint(b, e.Copies)
	b = binary.AppendVarint(b, e.Conflicts)
	b = binary.AppendVarint(b, e.FirstSeen.UnixMilli())
	b = binary.AppendVarint(b, e.LastSeen.UnixMilli())
	b = binary.AppendVarint(b, e.ExpiresAt.UnixMilli())
	return b
}

// decodeEntry decodes b; the record's byte slices are copied, so b may be
// memory the caller does not own (a bbolt page).
func decodeEntry(b []byte) (*entry, error) {
	if len(b) == 0 || b[0] != entryVersion {
		return nil, errCorrupt
	}
	r := reader{b: b[1:]}
	e := &entry{}
	e.Key = r.string()
	st := r.byte()
	e.State = StateInFlight
	if st == 1 {
		e.State = StateAnswered
	}
	e.token = r.string()
	e.Status = int(r.varint())
	e.Header = r.header()
	if body := r.bytes(); len(body) > 0 {
		e.Body = slices.Clone(body)
	}
	e.BodyCached = r.byte() == 1
	e.Fingerprint = r.string()
	e.Copies = r.varint()
	e.Conflicts = r.varint()
	e.FirstSeen = time.UnixMilli(r.varint())
	e.LastSeen = time.UnixMilli(r.varint())
	e.ExpiresAt = time.UnixMilli(r.varint())
	if r.err != nil {
		return nil, r.err
	}
	return e, nil
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errCorrupt
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// expired reports whether a record is past its expiry at t.
func (e *entry) expired(t time.Time) bool { return !t.Before(e.ExpiresAt) }

// claimOn applies a Claim to an existing, unexpired entry (memory and
// embedded share it so both count copies and conflicts the same way).
func (e *entry) claimOn(fingerprint string, t time.Time) ClaimResult {
	if fingerprint != "" && e.Fingerprint != "" && fingerprint != e.Fingerprint {
		e.Conflicts++
		return ClaimResult{Outcome: Conflict, Record: e.meta()}
	}
	e.Copies++
	e.LastSeen = t
	if e.State == StateAnswered {
		return ClaimResult{Outcome: Answered, Record: e.full()}
	}
	return ClaimResult{Outcome: InFlight, Record: e.meta()}
}

// newEntry is the record of a claim just won.
func newEntry(key, fingerprint string, t time.Time, lockTTL time.Duration) *entry {
	return &entry{
		Record: Record{
			Key: key, State: StateInFlight, Fingerprint: fingerprint,
			Copies: 1, FirstSeen: t, LastSeen: t, ExpiresAt: t.Add(lockTTL),
		},
		token: newToken(),
	}
}

// meta is a copy of the record without the answer.
func (e *entry) meta() *Record {
	r := e.Record
	r.Status, r.Header, r.Body, r.BodyCached = 0, nil, nil, false
	return &r
}

// full is a deep copy of the record, so callers may keep or change it.
func (e *entry) full() *Record {
	r := e.Record
	r.Header = e.Header.Clone()
	r.Body = slices.Clone(e.Body)
	return &r
}

// answer stores a completion on an in-flight entry.
func (e *entry) answer(a Answer, t time.Time, ttl time.Duration) {
	e.State = StateAnswered
	e.token = ""
	e.Status = a.Status
	e.Header = a.Header.Clone()
	e.BodyCached = a.BodyCached
	e.Body = nil
	if a.BodyCached {
		e.Body = slices.Clone(a.Body)
	}
	e.ExpiresAt = t.Add(ttl)
}

// owns reports whether token holds the in-flight claim.
func (e *entry) owns(token string) bool {
	return e.State == StateInFlight && e.token != "" && e.token == token
}

// errBadCursor: an InFlight cursor this store did not hand out.
var errBadCursor = errors.New("cache: bad cursor")
