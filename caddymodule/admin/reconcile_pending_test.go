package admin

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestReconcilePendingNextBill: a payment at 23:59:59 Beijing time may be
// in the next day's bill. What ran in the bill day's last 15 minutes and
// its bill does not show is pending the next bill, with the reason — not
// run, not settled; the next day's reconciliation matches what its bill
// shows and calls run, not settled only what neither bill showed, leaving
// alone the previous day's tail that its own bill settled. Reconciled
// before the previous day's bill, the next day's says so and judges none.
func TestReconcilePendingNextBill(t *testing.T) {
	p := rcPlatforms()[0] // alipay: Beijing days
	sc := &scenario{fate: map[string]string{}}
	repl := append([]string{"{store}", "store memory", "{backend}", rcBackend(t, sc).Addr(), "{ttl}", "1h", "{extra}", ""}, p.setup(t)...)
	g := gatewaytest.StartGateway(t, p.route, repl...)
	day2 := rcDay.Add(24 * time.Hour)
	ev := func(order int, at time.Time) rcEvent {
		return rcEvent{order: order, amount: "10.00", notified: "10.00", at: at}
	}
	var (
		noon      = ev(1, rcDay.Add(10*time.Hour))
		lastSec   = ev(2, day2.Add(-time.Second))    // settled in day 2's bill
		lost      = ev(3, day2.Add(-5*time.Minute))  // settled in neither
		inDay1    = ev(4, day2.Add(-2*time.Minute))  // in day 1's bill
		earlier   = ev(5, day2.Add(-20*time.Minute)) // before the window: judged at once
		day2Noon  = ev(6, day2.Add(12*time.Hour))    // day 2's own
		lastRow   = p.row(lastSec)
		billOfDay = func(from time.Time, evs ...rcEvent) []byte {
			rows := make([]billtest.Row, len(evs))
			for i, e := range evs {
				rows[i] = p.row(e)
			}
			return billOf(func(w io.Writer) billtest.Writer { return p.bill(w, from, from.Add(24*time.Hour)) }, rows...)
		}
	)
	for _, e := range []rcEvent{noon, lastSec, lost, inDay1, earlier, day2Noon} {
		if r := p.send(t, g.Base, rcLabel(e), e); r.Status != 200 {
			t.Fatalf("notify %s: %d %s", rcLabel(e), r.Status, r.Body)
		}
	}
	// Day 2's bill dates lastSec one second after midnight.
	lastRow.Time = day2.Add(time.Second)
	bill2 := billOf(func(w io.Writer) billtest.Writer { return p.bill(w, day2, day2.Add(24*time.Hour)) }, lastRow, p.row(day2Noon))

	// Day 2 before day 1: day 1's tail is day 1's to judge.
	rep := postBill(t, g, "platform=alipay", bill2)
	if rep.Matched.Count != 2 || rep.RunNotSettled.Count != 0 || !strings.Contains(strings.Join(rep.Notes, "\n"), "2 events ran in the last 15 minutes before 2026-10-04 00:00") {
		t.Errorf("day 2 first: %+v", rep)
	}

	rep = postBill(t, g, "platform=alipay", billOfDay(rcDay, noon, inDay1))
	if rep.Matched.Count != 2 || rep.RunNotSettled.Count != 1 || rep.RunNotSettled.Items[0].Key != p.key(earlier) {
		t.Errorf("day 1: run, not settled %+v, want only %s", rep.RunNotSettled, p.key(earlier))
	}
	pend := rep.PendingNextBill
	if pend.Count != 2 || pend.Amounts["CNY"] != "20.00" || !strings.Contains(pend.Reason, "last 15 minutes before the bill's end (2026-10-04 00:00 +08:00)") || len(pend.Items) != 2 {
		t.Fatalf("day 1: pending %+v", pend)
	}
	for _, it := range pend.Items {
		if it.Key != p.key(lastSec) && it.Key != p.key(lost) || it.State != "answered" || !strings.Contains(it.Note, "next day's bill") {
			t.Errorf("pending item %+v", it)
		}
	}

	rep = postBill(t, g, "platform=alipay", bill2)
	if rep.Matched.Count != 2 || rep.PendingNextBill.Count != 0 {
		t.Errorf("day 2: %+v", rep)
	}
	if u := rep.RunNotSettled.Items; rep.RunNotSettled.Count != 1 || u[0].Key != p.key(lost) || !strings.Contains(u[0].Note, "pending since the bill that ended 2026-10-04 00:00: in neither") {
		t.Errorf("day 2: run, not settled %+v, want %s still missing", rep.RunNotSettled, p.key(lost))
	}
	if notes := strings.Join(rep.Notes, "\n"); !strings.Contains(notes, "2 pending from the bill that ended 2026-10-04 00:00: 1 settled in this bill, 1 in neither") {
		t.Errorf("day 2 notes: %s", notes)
	}
}
