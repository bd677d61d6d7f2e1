package keying

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Helpers shared by the presets.

// DefaultTolerance is how far a signed timestamp may be from Request.Now when
// the route sets no tolerance (TimeTolerance).
const DefaultTolerance = 5 * time.Minute

// maxHeaderLen bounds every signature-related header a preset reads; real
// ones are far shorter, and a longer one is rejected before any work.
const maxHeaderLen = 8 << 10

// Material joins fingerprint field values so that different value lists
// never give the same material: it is the JSON array of the values, e.g.
// ["100.00",""]. The handler hashes it.
func Material(values ...string) string {
	if values == nil {
		values = []string{}
	}
	b, _ := json.Marshal(values) // []string always marshals
	return string(b)
}

// TimeTolerance is a route's tolerance for signed timestamps: d, or
// DefaultTolerance when d is not positive.
func TimeTolerance(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return DefaultTolerance
}

// NeedsSecret is the error a preset's constructor returns when what it
// needs is missing and NoVerify is off.
func NeedsSecret(preset, what string) error {
	return fmt.Errorf("%s: %w: configure %s", preset, ErrNeedsSecret, what)
}

// SigErr, Malformed and MerchantErr build errors that wrap the sentinels. Messages
// carry no secret and no attacker-controlled bytes beyond what is quoted
// and truncated by Clip.
func SigErr(preset, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", preset, ErrSignature, fmt.Sprintf(format, args...))
}

func Malformed(preset, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", preset, ErrMalformed, fmt.Sprintf(format, args...))
}

func MerchantErr(preset, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", preset, ErrMerchant, fmt.Sprintf(format, args...))
}

// Clip quotes s for an error message, cut to a few dozen bytes.
func Clip(s string) string {
	const max = 40
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strconv.Quote(s)
}

// SignatureHeader returns the single value of a signature header, rejecting
// oversized ones.
func SignatureHeader(preset string, r *Request, name string) (string, error) {
	v := strings.TrimSpace(r.Header.Get(name))
	if v == "" {
		return "", SigErr(preset, "missing %s header", name)
	}
	if len(v) > maxHeaderLen {
		return "", SigErr(preset, "%s header too long", name)
	}
	return v, nil
}

// UnixTimestamp parses a decimal Unix-seconds header and checks it against
// now. olderOnly accepts timestamps from the future (Stripe's rule).
func UnixTimestamp(preset, name, v string, now time.Time, tol time.Duration, olderOnly bool) (time.Time, error) {
	// 12 digits reach the year 33658; anything longer is not a timestamp
	// (and could overflow the arithmetic below).
	if len(v) == 0 || len(v) > 12 {
		return time.Time{}, SigErr(preset, "bad %s", name)
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, SigErr(preset, "bad %s", name)
	}
	ts := time.Unix(sec, 0)
	if now.IsZero() {
		now = time.Now()
	}
	if ts.Before(now.Add(-tol)) {
		return ts, SigErr(preset, "%s is %s old, beyond the tolerance of %s", name, now.Sub(ts).Truncate(time.Second), tol)
	}
	if !olderOnly && ts.After(now.Add(tol)) {
		return ts, SigErr(preset, "%s is %s in the future, beyond the tolerance of %s", name, ts.Sub(now).Truncate(time.Second), tol)
	}
	return ts, nil
}

// JSONFields returns the values at the given dot paths of a verified JSON
// body (absent paths give ""), or ErrMalformed.
func JSONFields(preset string, f *Fields, paths ...string) ([]string, error) {
	out := make([]string, len(paths))
	for i, p := range paths {
		v, _, err := f.JSON(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", preset, err)
		}
		out[i] = v
	}
	return out, nil
}

// RequireJSON returns the value at path, or ErrMalformed when it is absent
// or empty.
func RequireJSON(preset string, f *Fields, path string) (string, error) {
	v, ok, err := f.JSON(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", preset, err)
	}
	if !ok || v == "" {
		return "", Malformed(preset, "no %s in the body", path)
	}
	return v, nil
}

// SortedPairs is the string Alipay and WeChat Pay v2 sign: the fields with
// a non-empty value, sorted by name, as name=value joined by "&", nothing
// escaped.
func SortedPairs(fields map[string]string) []byte {
	names := make([]string, 0, len(fields))
	size := 0
	for k, v := range fields {
		if v != "" {
			names = append(names, k)
			size += len(k) + len(v) + 2
		}
	}
	sort.Strings(names)
	b := make([]byte, 0, size)
	for i, k := range names {
		if i > 0 {
			b = append(b, '&')
		}
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, fields[k]...)
	}
	return b
}

// Pinned reports whether v is one of ids (an empty list pins nothing).
func Pinned(ids []string, v string) bool {
	if len(ids) == 0 {
		return true
	}
	for _, id := range ids {
		if id == v {
			return true
		}
	}
	return false
}
