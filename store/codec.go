package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"time"
)

// newToken returns a random owner token: unguessable, so a stale or foreign
// request cannot complete a claim it does not hold.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

var errCorrupt = errors.New("store: corrupt record")

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

// headerLen is the length of h encoded (appendHeader), counted without
// encoding it.
func headerLen(h http.Header) int {
	n := uvarintLen(len(h))
	for k, vs := range h {
		n += uvarintLen(len(k)) + len(k) + uvarintLen(len(vs))
		for _, v := range vs {
			n += uvarintLen(len(v)) + len(v)
		}
	}
	return n
}

// uvarintLen is the length of n as a uvarint.
func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
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

// entry is a record plus what the memory and embedded stores keep beside
// it: the owner token, the retention (keep: a failed or left claim's
// journal outlives its lock) and the notification in its stored
// (compressed) form. Record.Attempts holds the attempts.
type entry struct {
	Record
	token string
	keep  time.Time
	notif []byte
}

const (
	entryVersion1 = 1 // before the journal
	entryVersion  = 2
)

// encodeEntry is the embedded store's on-disk form: a version byte, then the
// fields in a fixed order. Times are Unix milliseconds, like Redis's.
func encodeEntry(e *entry) []byte {
	b := make([]byte, 0, 96+len(e.Key)+len(e.Body)+len(e.Fingerprint)+len(e.notif))
	b = append(b, entryVersion)
	b = appendString(b, e.Key)
	var st byte
	switch e.State {
	case StateAnswered:
		st = 1
	case StateFailed:
		st = 2
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
	// Version 2: the journal.
	b = binary.AppendVarint(b, e.keep.UnixMilli())
	b = binary.AppendVarint(b, e.Changed.UnixMilli())
	b = binary.AppendVarint(b, e.CopyOutcomes.Forwarded)
	b = binary.AppendVarint(b, e.CopyOutcomes.Replayed)
	b = binary.AppendVarint(b, e.CopyOutcomes.InFlight)
	b = binary.AppendVarint(b, e.AttemptCount)
	b = appendBytes(b, e.notif)
	b = binary.AppendUvarint(b, uint64(len(e.Attempts)))
	for i := range e.Attempts {
		b = appendBytes(b, encodeAttempt(&e.Attempts[i]))
	}
	// Added later, last: flags, 1 the dead mark. A record stored before
	// it decodes unmarked.
	flags := byte(0)
	if e.Dead {
		flags |= 1
	}
	return append(b, flags)
}

// decodeEntry decodes b; the record's byte slices are copied, so b may be
// memory the caller does not own (a bbolt page).
func decodeEntry(b []byte) (*entry, error) {
	if len(b) == 0 || (b[0] != entryVersion && b[0] != entryVersion1) {
		return nil, errCorrupt
	}
	r := reader{b: b[1:]}
	e := &entry{}
	e.Key = r.string()
	switch r.byte() {
	case 1:
		e.State = StateAnswered
	case 2:
		e.State = StateFailed
	default:
		e.State = StateInFlight
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
	e.keep, e.Changed = e.ExpiresAt, e.LastSeen
	if b[0] == entryVersion {
		e.keep = time.UnixMilli(r.varint())
		e.Changed = time.UnixMilli(r.varint())
		e.CopyOutcomes.Forwarded = r.varint()
		e.CopyOutcomes.Replayed = r.varint()
		e.CopyOutcomes.InFlight = r.varint()
		e.AttemptCount = r.varint()
		if n := r.bytes(); len(n) > 0 {
			e.notif = slices.Clone(n)
		}
		na := r.uvarint()
		if na > MaxAttempts {
			return nil, errCorrupt
		}
		for range na {
			a, err := decodeAttempt(r.bytes())
			if err != nil {
				return nil, err
			}
			e.Attempts = append(e.Attempts, a)
		}
		if r.err == nil && len(r.b) > 0 {
			e.Dead = r.byte()&1 != 0
		}
	}
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

// expired reports whether the store may forget the record at t: past its
// retention, or a claim that ran out with no journal to keep.
func (e *entry) expired(t time.Time) bool {
	return !t.Before(e.keep) || (e.State == StateInFlight && !t.Before(e.ExpiresAt) && !e.hasJournal())
}

// lapse applies a claim's lock running out at t: the key is free and the
// record, kept for its journal, reads as failed.
func (e *entry) lapse(t time.Time) {
	if e.State == StateInFlight && !t.Before(e.ExpiresAt) {
		e.State, e.token, e.ExpiresAt = StateFailed, "", e.keep
	}
}

func (e *entry) keepUntil(t time.Time) {
	if t.After(e.keep) {
		e.keep = t
	}
}

// claimOn applies a Claim to an existing, live entry (memory and embedded
// share it so both count copies and conflicts the same way). A failed key
// is free: the claim wins, and the record's history stays.
func (e *entry) claimOn(fingerprint string, t time.Time, lockTTL time.Duration) ClaimResult {
	if e.State == StateFailed {
		// Live again (a redelivery): only this claim's own settle may
		// mark the key dead.
		e.State, e.token, e.Dead = StateInFlight, newToken(), false
		if fingerprint != "" {
			e.Fingerprint = fingerprint
		}
		e.Copies++
		e.CopyOutcomes.Forwarded++
		e.LastSeen, e.Changed = t, t
		e.ExpiresAt = t.Add(lockTTL)
		e.keepUntil(e.ExpiresAt)
		return ClaimResult{Outcome: Won, Token: e.token}
	}
	if fingerprint != "" && e.Fingerprint != "" && fingerprint != e.Fingerprint {
		e.Conflicts++
		return ClaimResult{Outcome: Conflict, Record: e.meta()}
	}
	e.Copies++
	e.LastSeen = t
	if e.State == StateAnswered {
		e.CopyOutcomes.Replayed++
		return ClaimResult{Outcome: Answered, Record: e.full()}
	}
	e.CopyOutcomes.InFlight++
	return ClaimResult{Outcome: InFlight, Record: e.meta()}
}

// newEntry is the record of a claim just won.
func newEntry(key, fingerprint string, t time.Time, lockTTL time.Duration) *entry {
	return &entry{
		Record: Record{
			Key: key, State: StateInFlight, Fingerprint: fingerprint,
			Copies: 1, FirstSeen: t, LastSeen: t, ExpiresAt: t.Add(lockTTL), Changed: t,
			CopyOutcomes: CopyCounts{Forwarded: 1},
		},
		token: newToken(),
		keep:  t.Add(lockTTL),
	}
}

// meta is a copy of the record without the answer and the journal.
func (e *entry) meta() *Record {
	r := e.Record
	r.Status, r.Header, r.Body, r.BodyCached = 0, nil, nil, false
	r.Attempts, r.Notification = nil, nil
	return &r
}

// listed is the record as a listing shows it: meta, and the answer's
// status (the backend's, what a list's STATUS column says).
func (e *entry) listed() *Record {
	r := e.meta()
	r.Status = e.Status
	return r
}

// full is a deep copy of the record without the journal, so callers may
// keep or change it.
func (e *entry) full() *Record {
	r := e.Record
	r.Header = e.Header.Clone()
	r.Body = slices.Clone(e.Body)
	r.Attempts, r.Notification = nil, nil
	return &r
}

// journaled is full plus the journal.
func (e *entry) journaled() (*Record, error) {
	r := e.full()
	if e.notif != nil {
		n, err := decodeNotification(e.notif)
		if err != nil {
			return nil, err
		}
		r.Notification = n
	}
	for _, a := range e.Attempts {
		r.Attempts = append(r.Attempts, cloneAttempt(&a))
	}
	return r, nil
}

// journal adds j to the entry. The dead mark follows the attempt it
// journals: a settle's attempt is the record's last.
func (e *entry) journal(j Journal) {
	e.Dead = j.Attempt != nil && j.Attempt.Dead
	if j.Notification != nil && e.notif == nil {
		e.notif = encodeNotification(j.Notification)
	}
	if j.Attempt != nil {
		e.Attempts = append(e.Attempts, cloneAttempt(j.Attempt))
		if n := len(e.Attempts); n > MaxAttempts {
			e.Attempts = slices.Delete(e.Attempts, 0, n-MaxAttempts)
		}
		e.AttemptCount++
	}
}

// answer stores a completion on an in-flight entry.
func (e *entry) answer(a Answer, t time.Time, ttl time.Duration, j Journal) {
	e.State = StateAnswered
	e.token = ""
	e.Status = a.Status
	e.Header = a.Header.Clone()
	e.BodyCached = a.BodyCached
	e.Body = nil
	if a.BodyCached {
		e.Body = slices.Clone(a.Body)
	}
	e.ExpiresAt, e.Changed = t.Add(ttl), t
	e.keep = e.ExpiresAt // the answer's ttl counts from now: the latest
	e.journal(j)
}

// fail frees an in-flight entry, kept as failed for ttl.
func (e *entry) fail(t time.Time, ttl time.Duration, j Journal) {
	e.State, e.token = StateFailed, ""
	e.ExpiresAt, e.Changed = t.Add(ttl), t
	e.keep = e.ExpiresAt // the claim's lock no longer matters
	e.journal(j)
}

// reopen turns an answered entry failed: the answer goes, the history
// stays for at least ttl.
func (e *entry) reopen(t time.Time, ttl time.Duration) {
	e.Status, e.Header, e.Body, e.BodyCached = 0, nil, nil, false
	e.fail(t, max(ttl, e.keep.Sub(t)), Journal{})
}

// leave journals an ambiguous attempt; the claim runs out at its lock.
func (e *entry) leave(t time.Time, ttl time.Duration, j Journal) {
	e.keepUntil(t.Add(ttl))
	e.journal(j)
}

// renew extends (or shortens) an in-flight claim. A record with a journal
// is kept at least as long as before; one without lives as long as its
// lock.
func (e *entry) renew(t time.Time, lockTTL time.Duration) {
	e.ExpiresAt = t.Add(lockTTL)
	if e.hasJournal() {
		e.keepUntil(e.ExpiresAt)
	} else {
		e.keep = e.ExpiresAt
	}
}

func (e *entry) hasJournal() bool { return e.AttemptCount > 0 || e.notif != nil }

// owns reports whether token holds the in-flight claim.
func (e *entry) owns(token string) bool {
	return e.State == StateInFlight && e.token != "" && e.token == token
}

// errBadCursor: an InFlight cursor this store did not hand out.
var errBadCursor = errors.New("store: bad cursor")
