package keying

import "time"

// Schedule is a platform's retry schedule: the waits between its copies of
// one notification that was not answered with success, the first wait
// counted from the first copy, each next one from the copy before.
type Schedule []time.Duration

// ExpBackoff doubles from first, each wait at most ceil, until the waits
// add up to span (the last one shortened to end there).
func ExpBackoff(first, ceil, span time.Duration) Schedule {
	var s Schedule
	total, w := time.Duration(0), first
	for total < span {
		w = min(w, ceil, span-total)
		s = append(s, w)
		total += w
		w *= 2
	}
	return s
}

// ExpCount is n waits doubling from first, each at most ceil.
func ExpCount(first, ceil time.Duration, n int) Schedule {
	s := make(Schedule, n)
	w := first
	for i := range s {
		s[i] = min(w, ceil)
		w *= 2
	}
	return s
}

// Total is how long after the first copy the last retry comes.
func (s Schedule) Total() time.Duration {
	var t time.Duration
	for _, w := range s {
		t += w
	}
	return t
}

// Retries is what a schedule leaves of a failed notification's retries,
// estimated from the copies seen: how many are left, when the next and the
// last are due.
type Retries struct {
	Left int
	Next time.Time // zero when none is left
	Last time.Time // when the last retry is (or was) due
}

// RetryGrace is how late a platform's retry may arrive and still count as
// the one expected: a retry is sent after the previous copy failed, and the
// backend's time and the network's come on top of the wait.
const RetryGrace = time.Minute

// Estimate reads the schedule from the last copy seen: copies (the first
// included) tell which wait comes next. A retry that was due but never
// came (the platform's clock, a lost connection) is counted as spent, so
// the estimate never promises a retry whose time has passed.
func (s Schedule) Estimate(last time.Time, copies int64, now time.Time) Retries {
	i := int(max(copies, 1)) - 1 // waits already spent
	if i >= len(s) {
		return Retries{Last: last}
	}
	next := last.Add(s[i])
	for now.After(next.Add(RetryGrace)) && i < len(s)-1 {
		i++
		next = next.Add(s[i])
	}
	end := next
	for _, w := range s[i+1:] {
		end = end.Add(w)
	}
	if now.After(next.Add(RetryGrace)) {
		// Even the last one is overdue.
		return Retries{Last: next}
	}
	return Retries{Left: len(s) - i, Next: next, Last: end}
}
