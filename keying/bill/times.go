package bill

import (
	"errors"
	"time"
)

var errTime = errors.New("not a time")

// ParseClock reads "2006-01-02 15:04:05" (or with '/' between the date's
// parts) in loc without allocating; a million rows spend their time on the
// bill, not on time.Parse. Anything else is left to time.ParseInLocation
// with layouts.
func ParseClock(b []byte, loc *time.Location, layouts ...string) (time.Time, error) {
	if len(b) == 19 && (b[4] == '-' || b[4] == '/') && b[7] == b[4] && b[10] == ' ' && b[13] == ':' && b[16] == ':' {
		var n [6]int
		for i, p := range [6]int{0, 5, 8, 11, 14, 17} {
			w := 2
			if i == 0 {
				w = 4
			}
			v, ok := Digits(b[p : p+w])
			if !ok {
				return time.Time{}, errTime
			}
			n[i] = v
		}
		if n[1] < 1 || n[1] > 12 || n[2] < 1 || n[2] > daysIn(n[0], n[1]) || n[3] > 23 || n[4] > 59 || n[5] > 59 {
			return time.Time{}, errTime
		}
		return time.Date(n[0], time.Month(n[1]), n[2], n[3], n[4], n[5], 0, loc), nil
	}
	for _, layout := range layouts {
		if t, err := time.ParseInLocation(layout, string(b), loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errTime
}

// Digits reads an unsigned decimal of ASCII digits, a count or a part of
// a date, without allocating; false for anything else. An empty b is 0.
func Digits(b []byte) (int, bool) {
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func daysIn(year, month int) int {
	return time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
