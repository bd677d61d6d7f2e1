package app

import (
	"testing"
	"time"
)

// TestCounts: counts land in their minute, old minutes roll off,
// and adding allocates nothing.
func TestCounts(t *testing.T) {
	c := newMinuteCounts()
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c.now = func() time.Time { return clock }
	c.Add(Forwarded)
	c.Add(Forwarded)
	c.Add(BackendFailed)
	c.Add("not an outcome")
	clock = clock.Add(3 * time.Minute)
	c.Add(Replayed)
	rows := c.Last()
	if len(rows) != ChartMinutes {
		t.Fatalf("%d rows", len(rows))
	}
	first, last := rows[ChartMinutes-4], rows[ChartMinutes-1]
	if first.Counts[0] != 2 || first.Counts[BackendFailed.Index()] != 1 || last.Counts[1] != 1 {
		t.Errorf("rows: %+v / %+v", first, last)
	}
	if !last.Start.Equal(clock.Truncate(time.Minute)) {
		t.Errorf("last minute starts %v", last.Start)
	}
	// 15 minutes on, the first minute is gone, even though its ring slot
	// was never written again.
	clock = clock.Add(13 * time.Minute)
	for _, r := range c.Last() {
		for _, n := range r.Counts {
			if n != 0 && !r.Start.Equal(time.Date(2026, 1, 2, 3, 7, 0, 0, time.UTC)) {
				t.Errorf("stale count %d at %v", n, r.Start)
			}
		}
	}
	for i, o := range Outcomes {
		if o.Index() != i {
			t.Errorf("outcomeIndex(%s) = %d, want %d", o, o.Index(), i)
		}
	}
	if n := testing.AllocsPerRun(1000, func() { c.Add(Replayed) }); n != 0 {
		t.Errorf("add allocates %v times", n)
	}
}

// BenchmarkCountsAdd: the cost the handler pays per request for the
// console's chart.
func BenchmarkCountsAdd(b *testing.B) {
	c := newMinuteCounts()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(Replayed)
		}
	})
}
