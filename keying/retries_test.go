package keying

import (
	"testing"
	"time"
)

func TestRetrySchedules(t *testing.T) {
	cases := []struct {
		platform string
		n        int
		min, max time.Duration
	}{
		{"alipay", 7, 24 * time.Hour, 25 * time.Hour},
		{"wechatpay", 15, 24 * time.Hour, 24*time.Hour + 5*time.Minute},
		{"wechatpay_v2", 15, 24 * time.Hour, 24*time.Hour + 5*time.Minute},
		{"stripe", 0, 71 * time.Hour, 72 * time.Hour},
		{"paypal", 25, 66 * time.Hour, 78 * time.Hour},
		{"standard_webhooks", 7, 27 * time.Hour, 28 * time.Hour},
	}
	for _, c := range cases {
		t.Run(c.platform, func(t *testing.T) {
			s := presets[c.platform].Schedule
			if c.n > 0 && len(s) != c.n {
				t.Fatalf("%d retries, want %d", len(s), c.n)
			}
			if tot := s.Total(); tot < c.min || tot > c.max {
				t.Fatalf("schedule spans %s, want %s..%s", tot, c.min, c.max)
			}
		})
	}
	if GenericPreset.Schedule != nil {
		t.Fatal("generic has a schedule")
	}
}

func TestRetryEstimate(t *testing.T) {
	s := AlipayPreset.Schedule
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
