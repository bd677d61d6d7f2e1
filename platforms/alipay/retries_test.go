package alipay

import (
	"testing"
	"time"
)

func TestRetryEstimate(t *testing.T) {
	s := Preset.Schedule
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		name            string
		last            time.Time
		copies          int64
		now             time.Time
		left            int
		next, lastRetry time.Time
	}{
		{"one copy", t0, 1, t0.Add(time.Second), 7, t0.Add(4 * time.Minute), t0.Add(s.Total())},
		{"two copies", t0.Add(4 * time.Minute), 2, t0.Add(5 * time.Minute), 6, t0.Add(14 * time.Minute), t0.Add(s.Total())},
		{"a retry late within grace", t0, 1, t0.Add(4*time.Minute + 30*time.Second), 7, t0.Add(4 * time.Minute), t0.Add(s.Total())},
		{"a retry that never came", t0, 1, t0.Add(6 * time.Minute), 6, t0.Add(14 * time.Minute), t0.Add(s.Total())},
		{"all seen", t0.Add(s.Total()), 8, t0.Add(s.Total() + time.Second), 0, time.Time{}, t0.Add(s.Total())},
		{"the last overdue", t0, 1, t0.Add(s.Total() + time.Hour), 0, time.Time{}, t0.Add(s.Total())},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := s.Estimate(c.last, c.copies, c.now)
			if got.Left != c.left || !got.Next.Equal(c.next) || !got.Last.Equal(c.lastRetry) {
				t.Fatalf("Estimate = %+v, want left %d next %s last %s", got, c.left, c.next, c.lastRetry)
			}
		})
	}
}
