package cache

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// How the Redis store reads a record: the claim script's packed reply, or
// HMGET's fields, both in recordFields order.

// unpackFields reads the claim script's packed record: <length>:<bytes>
// per field, in recordFields order. The fields share the reply's memory.
func unpackFields(p string) ([]string, error) {
	fields := make([]string, 0, len(recordFields))
	for len(p) > 0 {
		i := strings.IndexByte(p, ':')
		n, err := strconv.Atoi(p[:max(i, 0)])
		if i < 0 || err != nil || n < 0 || n > len(p)-i-1 {
			return nil, fmt.Errorf("cache: redis claim: malformed record")
		}
		fields = append(fields, p[i+1:i+1+n])
		p = p[i+1+n:]
	}
	return fields, nil
}

// parseRecord reads a record's fields in recordFields order ("" for a
// missing one).
func parseRecord(v []string) (*Record, error) {
	if len(v) != len(recordFields) {
		return nil, fmt.Errorf("record of %d fields, want %d", len(v), len(recordFields))
	}
	at := func(i int) int64 {
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
