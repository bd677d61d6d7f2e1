package caddymodule

import (
	"sync"
	"time"
)

// consoleCounts is this process's count of decisions by outcome, minute by
// minute, for the console's chart: record adds one per request. It is the
// process's own view (Prometheus has the fleet's); it needs no store round
// trip and costs a lock and two array writes per request, no allocation.
var consoleCounts = newMinuteCounts()

// chartMinutes is how far back the chart looks.
const chartMinutes = 15

// ringMinutes holds one more slot than the chart shows, so the minute
// being counted never overwrites the oldest minute drawn.
const ringMinutes = chartMinutes + 1

// consoleOutcomes indexes the ring's columns; its order is the legend's.
var consoleOutcomes = [...]outcome{
	outcomeForwarded, outcomeReplayed, outcomeWaited, outcomeInFlight,
	outcomeBackendFailed, outcomeBackendUnreachable, outcomeAmbiguous,
	outcomeConflict, outcomeRejectedSignature, outcomeBadRequest, outcomeTooLarge,
	outcomeStoreError, outcomePassed, outcomeCanceled, outcomeQueued, outcomeAcked,
}

const numOutcomes = len(consoleOutcomes)

// outcomeIndex is a switch, not a map: no hashing on the request path.
func outcomeIndex(o outcome) int {
	switch o {
	case outcomeForwarded:
		return 0
	case outcomeReplayed:
		return 1
	case outcomeWaited:
		return 2
	case outcomeInFlight:
		return 3
	case outcomeBackendFailed:
		return 4
	case outcomeBackendUnreachable:
		return 5
	case outcomeAmbiguous:
		return 6
	case outcomeConflict:
		return 7
	case outcomeRejectedSignature:
		return 8
	case outcomeBadRequest:
		return 9
	case outcomeTooLarge:
		return 10
	case outcomeStoreError:
		return 11
	case outcomePassed:
		return 12
	case outcomeCanceled:
		return 13
	case outcomeQueued:
		return 14
	case outcomeAcked:
		return 15
	}
	return -1
}

// minuteCounts is a ring of per-minute counts per outcome.
type minuteCounts struct {
	mu     sync.Mutex
	minute [ringMinutes]int64 // the Unix minute each slot counts
	n      [ringMinutes][numOutcomes]uint64
	now    func() time.Time
}

func newMinuteCounts() *minuteCounts { return &minuteCounts{now: time.Now} }

func (c *minuteCounts) add(o outcome) {
	i := outcomeIndex(o)
	if i < 0 {
		return
	}
	m := c.now().Unix() / 60
	slot := int(m % ringMinutes)
	c.mu.Lock()
	if c.minute[slot] != m {
		c.minute[slot] = m
		c.n[slot] = [numOutcomes]uint64{}
	}
	c.n[slot][i]++
	c.mu.Unlock()
}

// reset forgets every count (tests that read the chart).
func (c *minuteCounts) reset() {
	c.mu.Lock()
	c.minute = [ringMinutes]int64{}
	c.n = [ringMinutes][numOutcomes]uint64{}
	c.mu.Unlock()
}

// minuteRow is one minute of the chart.
type minuteRow struct {
	Start  time.Time
	Counts [numOutcomes]uint64
}

// last returns the last chartMinutes minutes, oldest first, the current
// (partial) minute last; minutes without requests are zero rows.
func (c *minuteCounts) last() []minuteRow {
	m := c.now().Unix() / 60
	out := make([]minuteRow, chartMinutes)
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range chartMinutes {
		want := m - int64(chartMinutes-1-k)
		out[k].Start = time.Unix(want*60, 0)
		slot := int(want % ringMinutes)
		if c.minute[slot] == want {
			out[k].Counts = c.n[slot]
		}
	}
	return out
}
