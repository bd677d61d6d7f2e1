package store

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// How the Redis store reads a record: the claim script's packed reply (in
// replayFields order for a replay, claimFields order otherwise), or
// HMGET's fields, in recordFields order.

// unpackFields reads the claim script's packed record: a MessagePack
// array (cmsgpack.pack of the HMGET's reply) of strings, with false or
// nil for a missing field ("" here), in recordFields order. It reads what
// cmsgpack writes for those and nothing else; the fields share the
// reply's memory.
func unpackFields(p string) ([]string, error) {
	bad := fmt.Errorf("store: redis claim: malformed record")
	n, p, ok := msgpackArray(p)
	if !ok || n > len(p) {
		return nil, bad
	}
	fields := make([]string, 0, n)
	for range n {
		if p != "" && (p[0] == 0xc0 || p[0] == 0xc2) { // nil, false
			fields = append(fields, "")
			p = p[1:]
			continue
		}
		var l int
		if l, p, ok = msgpackString(p); !ok || l > len(p) {
			return nil, bad
		}
		fields = append(fields, p[:l])
		p = p[l:]
	}
	if p != "" {
		return nil, bad
	}
	return fields, nil
}

// msgpackArray reads a MessagePack array header: its count, and the rest.
func msgpackArray(p string) (int, string, bool) {
	switch {
	case p == "":
		return 0, p, false
	case p[0]&0xf0 == 0x90: // fixarray
		return int(p[0] & 0x0f), p[1:], true
	case p[0] == 0xdc:
		return msgpackUint(p[1:], 2)
	case p[0] == 0xdd:
		return msgpackUint(p[1:], 4)
	}
	return 0, p, false
}

// msgpackString reads a MessagePack str (or bin) header: its length, and
// the rest.
func msgpackString(p string) (int, string, bool) {
	switch {
	case p == "":
		return 0, p, false
	case p[0]&0xe0 == 0xa0: // fixstr
		return int(p[0] & 0x1f), p[1:], true
	case p[0] == 0xd9, p[0] == 0xc4:
		return msgpackUint(p[1:], 1)
	case p[0] == 0xda, p[0] == 0xc5:
		return msgpackUint(p[1:], 2)
	case p[0] == 0xdb, p[0] == 0xc6:
		return msgpackUint(p[1:], 4)
	}
	return 0, p, false
}

// msgpackUint reads a big-endian unsigned integer of size bytes.
func msgpackUint(p string, size int) (int, string, bool) {
	if len(p) < size {
		return 0, p, false
	}
	n := 0
	for i := range size {
		n = n<<8 | int(p[i])
	}
	return n, p[size:], true
}

// errOldLayout: a key's record is of the layout before records were one
// value (a hash and two journal keys beside it), which this version does
// not read: it is refused, never misread. Purging the key (Delete) drops
// it; else it expires with its ttl.
var errOldLayout = errors.New("record written by an earlier idemgate layout (a Redis hash; records are now one string): purge the key or let it expire")

// A record's value (record.lua) holds recordFields, then these.
const (
	recordToken    = 19 // the live claim's token (the scripts compare it)
	recordNotif    = 20 // the journal's notification, encoded
	recordAttempts = 21 // its attempts, each behind a 2-byte length
	recordWidth    = 22
)

// unpackRecord reads a record's value (record.lua): its recordWidth
// fields, MessagePack strings or false ("" here) one after another. They
// share p's memory.
func unpackRecord(p string) ([]string, error) {
	v := make([]string, 0, recordWidth)
	for p != "" && len(v) < recordWidth {
		if p[0] == 0xc0 || p[0] == 0xc2 { // nil, false
			v = append(v, "")
			p = p[1:]
			continue
		}
		l, rest, ok := msgpackString(p)
		if !ok || l > len(rest) {
			break
		}
		v = append(v, rest[:l])
		p = rest[l:]
	}
	if len(v) != recordWidth || p != "" {
		return nil, fmt.Errorf("store: malformed record (%d fields, want %d)", len(v), recordWidth)
	}
	return v, nil
}

// listedRecord reads a record's value (record.lua) as a listing shows it:
// without its journal.
func listedRecord(p string) (*Record, error) {
	v, err := unpackRecord(p)
	if err != nil {
		return nil, err
	}
	return recordOf(v)
}

// recordOf reads an unpacked record value v (all recordWidth fields) as
// a Record, without its journal. A claim made by a SET that no script has
// touched (its token marked "~": newClaimRecord) holds while the key is
// here, whatever the gateway's estimate of its end says.
func recordOf(v []string) (*Record, error) {
	r, err := parseRecord(v[:len(recordFields)])
	if err == nil && v[1] == string(StateInFlight) && strings.HasPrefix(v[recordToken], "~") {
		r.State = StateInFlight
	}
	return r, err
}

// parseRecord reads a record's fields in recordFields order ("" for a
// missing one).
func parseRecord(v []string) (*Record, error) {
	if len(v) != len(recordFields) {
		return nil, fmt.Errorf("record of %d fields, want %d", len(v), len(recordFields))
	}
	at := func(i int) int64 {
		if v[i] == "" {
			return 0 // missing; ParseInt's error for it is an allocation
		}
		n, _ := strconv.ParseInt(v[i], 10, 64)
		return n
	}
	r := &Record{
		Key:         v[0],
		State:       State(v[1]),
		Status:      int(at(2)),
		BodyCached:  v[5] == "1",
		Fingerprint: v[6],
		Copies:      at(7),
		Conflicts:   at(8),
		FirstSeen:   time.UnixMilli(at(9)),
		LastSeen:    time.UnixMilli(at(10)),
		ExpiresAt:   time.UnixMilli(at(11)),
		Changed:     time.UnixMilli(at(12)),
		CopyOutcomes: CopyCounts{
			Forwarded: at(13), Replayed: at(14), InFlight: at(15),
		},
		AttemptCount: at(16),
		Dead:         v[18] == "1",
	}
	if r.State == StateInFlight && !time.Now().Before(r.ExpiresAt) {
		// The claim ran out; a record still here keeps a journal and
		// reads as failed (the scripts judge by the server's clock).
		r.State = StateFailed
	}
	if h := v[3]; h != "" {
		var err error
		if r.Header, err = decodeHeader([]byte(h)); err != nil {
			return nil, err
		}
	}
	if b := v[4]; b != "" {
		r.Body = []byte(b)
	}
	return r, nil
}

// replayFields is what Claim reads of an answered key's record for a
// replay (the claim script's reply "replayed"): what the gateway
// replays, and "last", the copy's time.
var replayFields = []string{"status", "headers", "body", "body_cached", "fp",
	"copies", "first", "expires", "nr", "last"}

// claimFields is what Claim reads of the record of a copy in flight or
// in conflict: its metadata, without the answer (such a copy never gets
// it) and the key (the gateway has it).
var claimFields = []string{"state", "fp", "copies", "conflicts", "first",
	"last", "expires", "changed", "nf", "nr", "ni", "na", "nn"}

// replaySlots and claimSlots: each field's position in recordFields.
var replaySlots, claimSlots = slotsOf(replayFields), slotsOf(claimFields)

func slotsOf(fields []string) []int {
	at := make([]int, len(fields))
	for i, f := range fields {
		at[i] = slices.Index(recordFields, f)
	}
	return at
}

// pick appends to dst the fields of rec (recordFields' order) at slots.
func pick(dst, rec []string, slots []int) []string {
	for _, at := range slots {
		dst = append(dst, rec[at])
	}
	return dst
}

// parseReplay reads the claim script's "replayed" fields, in replayFields
// order, as key's answered record. What a replay does not read stays
// zero: Conflicts, Changed, CopyOutcomes but Replayed, AttemptCount
// (Lookup reads them).
func parseReplay(key string, v []string) (*Record, error) {
	r, err := parseSome(key, StateAnswered, replaySlots, v)
	if err == nil {
		r.Changed = time.Time{}
	}
	return r, err
}

// parseSome reads fields v, which go to recordFields' positions slots,
// as key's record in state (unless v has the state).
func parseSome(key string, state State, slots []int, v []string) (*Record, error) {
	if len(v) != len(slots) {
		return nil, fmt.Errorf("record of %d fields, want %d", len(v), len(slots))
	}
	var buf [24]string // on the stack: parseRecord keeps none of it
	all := buf[:len(recordFields)]
	all[0], all[1] = key, string(state)
	for i, f := range v {
		all[slots[i]] = f
	}
	return parseRecord(all)
}

// strs is an HMGET reply as strings ("" for a missing field).
func strs(v []any) []string {
	out := make([]string, len(v))
	for i := range v {
		out[i] = str(v[i])
	}
	return out
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
