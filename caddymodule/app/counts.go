package app

import (
	"sync"
	"time"

	"github.com/idemgate/idemgate/gate"
)

// Outcome is what the handler decided for one request: a bounded metric
// label, the {idempotency.outcome} value and a column of the console's
// chart. The gate names them (gate.Label); the names here are its own.
type Outcome gate.Label

// The outcomes, in the console legend's order.
const (
	Forwarded          = Outcome(gate.Forwarded)
	Replayed           = Outcome(gate.Replayed)
	Waited             = Outcome(gate.Waited)
	InFlight           = Outcome(gate.InFlight)
	BackendFailed      = Outcome(gate.BackendFailed)
	BackendUnreachable = Outcome(gate.BackendUnreachable)
	Ambiguous          = Outcome(gate.Ambiguous)
	Conflict           = Outcome(gate.Conflict)
	RejectedSignature  = Outcome(gate.RejectedSignature)
	BadRequest         = Outcome(gate.BadRequest)
	TooLarge           = Outcome(gate.TooLarge)
	StoreError         = Outcome(gate.StoreError)
	Passed             = Outcome(gate.Passed)
	Canceled           = Outcome(gate.Canceled)
	// deliver async: the first copy was queued and acknowledged; a copy
	// of a queued key was acknowledged.
	Queued = Outcome(gate.Queued)
	Acked  = Outcome(gate.Acked)
	// A signed notification for a merchant the route does not accept.
	RejectedMerchant = Outcome(gate.RejectedMerchant)
)

// Outcomes indexes the chart's columns; its order is the legend's.
var Outcomes = [...]Outcome{
	Forwarded, Replayed, Waited, InFlight,
	BackendFailed, BackendUnreachable, Ambiguous,
	Conflict, RejectedSignature, BadRequest, TooLarge,
	StoreError, Passed, Canceled, Queued, Acked,
	RejectedMerchant,
}

// NumOutcomes is the number of chart columns.
const NumOutcomes = len(Outcomes)

// Index is o's column, -1 for an outcome the chart does not count. A
// switch, not a map: no hashing on the request path.
func (o Outcome) Index() int {
	switch o {
	case Forwarded:
		return 0
	case Replayed:
		return 1
	case Waited:
		return 2
	case InFlight:
		return 3
	case BackendFailed:
		return 4
	case BackendUnreachable:
		return 5
	case Ambiguous:
		return 6
	case Conflict:
		return 7
	case RejectedSignature:
		return 8
	case BadRequest:
		return 9
	case TooLarge:
		return 10
	case StoreError:
		return 11
	case Passed:
		return 12
	case Canceled:
		return 13
	case Queued:
		return 14
	case Acked:
		return 15
	case RejectedMerchant:
		return 16
	}
	return -1
}

// ChartMinutes is how far back the chart looks.
const ChartMinutes = 15

// ringMinutes holds one more slot than the chart shows, so the minute
// being counted never overwrites the oldest minute drawn.
const ringMinutes = ChartMinutes + 1

// MinuteCounts is a ring of per-minute counts per outcome: the process's
// count of decisions, minute by minute, for the console's chart (App.Counts);
// the handler adds one per request. It is the process's own view
// (Prometheus has the fleet's); it needs no store round trip and costs a
// lock and two array writes per request, no allocation.
type MinuteCounts struct {
	mu     sync.Mutex
	minute [ringMinutes]int64 // the Unix minute each slot counts
	n      [ringMinutes][NumOutcomes]uint64
	now    func() time.Time
}

func newMinuteCounts() *MinuteCounts { return &MinuteCounts{now: time.Now} }

// Destruct lets the counts go with the last app that holds them
// (countsPool); they hold nothing to close.
func (c *MinuteCounts) Destruct() error { return nil }

// Add counts one decision of outcome o now.
func (c *MinuteCounts) Add(o Outcome) {
	i := o.Index()
	if i < 0 {
		return
	}
	m := c.now().Unix() / 60
	slot := int(m % ringMinutes)
	c.mu.Lock()
	if c.minute[slot] != m {
		c.minute[slot] = m
		c.n[slot] = [NumOutcomes]uint64{}
	}
	c.n[slot][i]++
	c.mu.Unlock()
}

// Reset forgets every count (tests that read the chart).
func (c *MinuteCounts) Reset() {
	c.mu.Lock()
	c.minute = [ringMinutes]int64{}
	c.n = [ringMinutes][NumOutcomes]uint64{}
	c.mu.Unlock()
}

// SetClock replaces the clock (tests).
func (c *MinuteCounts) SetClock(now func() time.Time) {
	c.mu.Lock()
	c.now = now
	c.mu.Unlock()
}

// MinuteRow is one minute of the chart.
type MinuteRow struct {
	Start  time.Time
	Counts [NumOutcomes]uint64
}

// Last returns the last ChartMinutes minutes, oldest first, the current
// (partial) minute last; minutes without requests are zero rows.
func (c *MinuteCounts) Last() []MinuteRow {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.now().Unix() / 60
	out := make([]MinuteRow, ChartMinutes)
	for k := range ChartMinutes {
		want := m - int64(ChartMinutes-1-k)
		out[k].Start = time.Unix(want*60, 0)
		slot := int(want % ringMinutes)
		if c.minute[slot] == want {
			out[k].Counts = c.n[slot]
		}
	}
	return out
}
