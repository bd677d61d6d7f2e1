package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/reconcile"
)

// The reconciliation scenario, the same on every platform: rcOrders
// orders paid on one day, every third refunded in part (order 0 twice,
// which Alipay notifies as a cumulative refund_fee); the gateway really
// received the notifications (signed as the platform signs them), the
// backend answering most, failing some (every attempt), some never sent,
// one notified with another amount, one run but absent from the bill.
// The bill is written in the platform's documented layout. Each category
// must come out exact — counts, amounts, items and their states — on the
// embedded store and on Redis, before the answers' ttl and after it (the
// order state outlives it).

const rcOrders = 150

// rcDay is the bill's day: 3 October 2026 in Beijing (for PayPal the
// section of that day in its clock); notifications say their events
// happened then.
var rcDay = time.Date(2026, 10, 3, 0, 0, 0, 0, time.FixedZone("CST", 8*3600))

// scenario is what was sent and what the bill says, and what the report
// must therefore say.
type scenario struct {
	events []rcEvent // every business event, in bill order
	inBill map[int]bool
	// fate of each event by label: "answered", "failed", "unsent".
	fate map[string]string
	// the extra order, run but not in the bill
	extra rcEvent
	// the order whose notification named another amount
	odd rcEvent
}

func newScenario(from time.Time) *scenario {
	sc := &scenario{inBill: map[int]bool{}, fate: map[string]string{}}
	at := func(i int) time.Time { return from.Add(time.Duration(2+i*7) * time.Minute) }
	for i := range rcOrders {
		fen := int64(100*(i+1) + i%100)
		pay := rcEvent{order: i, amount: rcCents(fen), notified: rcCents(fen), at: at(i)}
		fate := "answered"
		switch {
		case i%10 == 3:
			fate = "failed"
		case i%10 == 7:
			fate = "unsent"
		}
		if i == 5 {
			pay.notified = rcCents(fen + 100) // another amount, signed
			sc.odd = pay
		}
		sc.events = append(sc.events, pay)
		sc.fate[rcLabel(pay)] = fate
		if i%3 != 0 || fate != "answered" {
			continue
		}
		part := fen / 4
		r1 := rcEvent{order: i, refund: fmt.Sprintf("re_%dA", i), amount: rcCents(part), notified: rcCents(part), at: at(i).Add(3 * time.Minute)}
		sc.events = append(sc.events, r1)
		sc.fate[rcLabel(r1)] = "answered"
		if i == 0 {
			// A second partial refund: Alipay notifies refund_fee as the
			// trade's refunded total.
			r2 := rcEvent{order: i, refund: "re_0B", amount: rcCents(part * 2), notified: rcCents(part * 2), at: at(i).Add(5 * time.Minute)}
			sc.events = append(sc.events, r2)
			sc.fate[rcLabel(r2)] = "answered"
		}
		if i == 30 {
			sc.fate[rcLabel(r1)] = "unsent" // a refund the platform settled, never notified
		}
	}
	sc.extra = rcEvent{order: rcOrders + 1, amount: "42.00", notified: "42.00", at: from.Add(23 * time.Hour)}
	sc.fate[rcLabel(sc.extra)] = "answered"
	return sc
}

// notified is what a platform's notification of ev says: Alipay's refund
// carries the trade's cumulative refund_fee.
func (sc *scenario) notified(p *rcPlatform, ev rcEvent) string {
	if p.name != "alipay" || ev.refund == "" {
		return ev.notified
	}
	total := int64(0)
	for _, e := range sc.events {
		if e.order == ev.order && e.refund != "" && !e.at.After(ev.at) {
			total += rcFen(e.amount)
		}
	}
	return rcCents(total)
}

// want is the report the scenario must give.
type want struct {
	counts  map[string]int
	amounts map[string]int64 // hundredths; payments'
	refunds map[string]int64 // refunds', totalled apart
	states  map[string]string
}

func (sc *scenario) want(p *rcPlatform, afterTTL bool) want {
	w := want{counts: map[string]int{}, amounts: map[string]int64{}, refunds: map[string]int64{}, states: map[string]string{}}
	add := func(cat string, ev rcEvent) {
		w.counts[cat]++
		switch {
		case cat == "amount_differs": // the difference, bill minus notified
			w.amounts[cat] += rcFen(ev.amount) - rcFen(ev.notified)
		case ev.refund != "":
			w.refunds[cat] += rcFen(ev.amount)
		default:
			w.amounts[cat] += rcFen(ev.amount)
		}
	}
	for _, ev := range sc.events {
		switch fate := sc.fate[rcLabel(ev)]; {
		case fate != "answered":
			add("settled_never_run", ev)
			state, key := "none", p.key(ev)
			if fate == "failed" && !afterTTL {
				state = "failed"
			} else if p.others {
				key = "" // Stripe, PayPal: an object's event is known once it ran, or from its record
			}
			w.states[p.order(ev)+" "+rcEventName(ev)] = state + " " + key
		case ev.order == sc.odd.order && ev.refund == "":
			add("amount_differs", ev)
		default:
			add("matched", ev)
		}
	}
	w.counts["run_not_settled"] = 1
	w.amounts["run_not_settled"] = rcFen(sc.extra.notified)
	return w
}

// rcBackend answers the platform's success, and fails the events the
// scenario fails, every time.
func rcBackend(t *testing.T, sc *scenario) *gatewaytest.Backend {
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(label string, n int, r *http.Request) (int, string, time.Duration) {
		if sc.fate[label] == "failed" {
			return 500, "db down", 0
		}
		return 200, "success", 0
	})
	return be
}

func TestReconcile(t *testing.T) {
	testenv.Slow(t, "runs for seconds: waits out a 6s ttl per platform and store")
	rs := redistest.Start(t)
	for _, p := range rcPlatforms() {
		for _, st := range []struct{ name, line string }{
			{"embedded", "store embedded {dir}/keys.db"},
			{"redis", "store redis " + rs.Addr()},
		} {
			t.Run(p.name+"/"+st.name, func(t *testing.T) {
				reconcileScenario(t, p, strings.Replace(st.line, "{dir}", t.TempDir(), 1))
			})
		}
	}
}

func reconcileScenario(t *testing.T, p *rcPlatform, store string) {
	// The failed events' records must still be there for the first
	// report (they are sent last, just before it) and gone for the
	// second: ttl is long enough for one reconciliation on a loaded
	// machine.
	const ttl = 6 * time.Second
	from, to := rcDay, rcDay.Add(24*time.Hour)
	switch p.name {
	case "paypal": // a section of PayPal's day, in its clock
		from = time.Date(2026, 10, 3, 0, 0, 0, 0, time.FixedZone("", -7*3600))
		to = from.Add(24 * time.Hour)
	case "stripe": // no period in the export: the UTC days of its rows
		from = time.Date(2026, 10, 3, 0, 0, 0, 0, time.UTC)
		to = from.Add(24 * time.Hour)
	}
	sc := newScenario(from)
	be := rcBackend(t, sc)
	repl := append([]string{"{store}", store, "{backend}", be.Addr(), "{ttl}", ttl.String(), "{extra}", ""}, p.setup(t)...)
	g := gatewaytest.StartGateway(t, p.route, repl...)

	// The notifications, four at a time, as a platform sends them.
	sent := append(append([]rcEvent(nil), sc.events...), sc.extra)
	var wg sync.WaitGroup
	work := make(chan rcEvent)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range work {
				fate := sc.fate[rcLabel(ev)]
				ev.notified = sc.notified(p, ev)
				r := p.send(t, g.Base, rcLabel(ev), ev)
				if ok := r.Status == 200; ok != (fate == "answered") {
					t.Errorf("%s (%s): %d %q", rcLabel(ev), fate, r.Status, r.Body)
				}
			}
		}()
	}
	for _, pass := range []string{"answered", "failed"} {
		for _, ev := range sent {
			if sc.fate[rcLabel(ev)] == pass {
				work <- ev
			}
		}
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	var bill bytes.Buffer
	w := p.bill(&bill, from, to)
	for i, ev := range sc.events {
		if err := w.Row(p.row(ev)); err != nil {
			t.Fatal(err)
		}
		if p.others && i%40 == 0 {
			_ = w.Row(billtest.Row{Kind: billtest.Payout, Order: fmt.Sprintf("po_%d", i), Amount: "10.00", Currency: p.currency, Time: ev.at})
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if rows := len(sc.events); rows < 150 {
		t.Fatalf("only %d rows", rows)
	}

	check := func(afterTTL bool) {
		t.Helper()
		// An event that ran has its record's state while the record is
		// kept, "ran" once only its order remembers it (on a loaded
		// machine the short ttl may pass for some during the check).
		ranState := func(it reconcile.Item) bool {
			if afterTTL {
				return it.State == "ran"
			}
			return it.State == "answered" || it.State == "ran" && gatewaytest.Record(t, it.Key) == nil
		}
		rep := postBill(t, g, p.query, bill.Bytes())
		exp := sc.want(p, afterTTL)
		for _, c := range []struct {
			name string
			got  reconcile.Category
		}{{"settled_never_run", rep.SettledNeverRun}, {"run_not_settled", rep.RunNotSettled},
			{"amount_differs", rep.AmountDiffers}, {"matched", rep.Matched}} {
			if c.got.Count != exp.counts[c.name] || c.got.Amounts[p.currency] != rcSigned(exp.amounts[c.name]) || len(c.got.Amounts) != 1 {
				t.Errorf("after ttl %v: %s = %d %v, want %d %s", afterTTL, c.name, c.got.Count, c.got.Amounts, exp.counts[c.name], rcSigned(exp.amounts[c.name]))
			}
			if r := exp.refunds[c.name]; r != 0 && (c.got.RefundAmounts[p.currency] != rcCents(r) || len(c.got.RefundAmounts) != 1) || r == 0 && len(c.got.RefundAmounts) != 0 {
				t.Errorf("after ttl %v: %s refund_amounts %v, want %s apart", afterTTL, c.name, c.got.RefundAmounts, rcCents(r))
			}
		}
		if len(rep.Matched.Items) != 0 {
			t.Errorf("matched items listed without items=1: %d", len(rep.Matched.Items))
		}
		for _, it := range rep.SettledNeverRun.Items {
			want, ok := exp.states[it.Order+" "+it.Event]
			if !ok || it.State+" "+it.Key != want || it.BillAmount == "" || it.Line == 0 {
				t.Errorf("settled, never run %+v: want state and key %q", it, want)
			}
			if (it.State == "failed") != (it.Redeliver != "") || it.State == "failed" && !strings.Contains(it.Redeliver, "idempotency redeliver '"+it.Key+"'") {
				t.Errorf("%s (%s): redeliver %q", it.Key, it.State, it.Redeliver)
			}
			if it.State == "failed" && it.Attempts != 1 {
				t.Errorf("%s: %d attempts", it.Key, it.Attempts)
			}
		}
		if len(rep.SettledNeverRun.Items) != exp.counts["settled_never_run"] {
			t.Errorf("%d settled-never-run items for %d", len(rep.SettledNeverRun.Items), exp.counts["settled_never_run"])
		}
		if d := rep.AmountDiffers.Items; len(d) != 1 || d[0].Key != p.key(sc.odd) || d[0].BillAmount != sc.odd.amount ||
			d[0].NotifiedAmount != sc.odd.notified || d[0].Order != p.order(sc.odd) || d[0].Difference != rcSigned(rcFen(sc.odd.amount)-rcFen(sc.odd.notified)) {
			t.Errorf("amount differs: %+v, want %s: bill %s, notified %s", d, p.key(sc.odd), sc.odd.amount, sc.odd.notified)
		}
		if u := rep.RunNotSettled.Items; len(u) != 1 || u[0].Key != p.key(sc.extra) || u[0].NotifiedAmount != "42.00" ||
			u[0].Event != "paid" || !ranState(u[0]) || u[0].Ran.IsZero() {
			t.Errorf("run, not settled: %+v, want %s", u, p.key(sc.extra))
		}
		if rep.Period == nil || !rep.Period.From.Equal(from) || !rep.Period.To.Equal(to) {
			t.Errorf("period %+v, want [%v, %v)", rep.Period, from, to)
		}
		if p.others && rep.Skipped == 0 {
			t.Errorf("the payouts were not skipped: %+v", rep.Bill)
		}
		// With items=1 every matched event is listed, each once.
		all := postBill(t, g, p.query+"&items=1&limit=1000", bill.Bytes())
		keys := map[string]bool{}
		for _, it := range all.Matched.Items {
			if keys[it.Key] || !ranState(it) || it.NotifiedAmount == "" && p.name != "alipay" {
				t.Errorf("matched item %+v (listed before: %v)", it, keys[it.Key])
			}
			keys[it.Key] = true
		}
		if len(keys) != exp.counts["matched"] {
			t.Errorf("%d matched items listed, want %d", len(keys), exp.counts["matched"])
		}
	}
	check(false)
	gatewaytest.Eventually(t, ttl+20*time.Second, "the records to expire", func() bool {
		for _, ev := range sent {
			if sc.fate[rcLabel(ev)] != "unsent" && gatewaytest.Record(t, p.key(ev)) != nil {
				return false
			}
		}
		return true
	})
	check(true)
	// Every event that ran did once.
	for _, ev := range sent {
		if n, fate := be.Count(rcLabel(ev)), sc.fate[rcLabel(ev)]; fate == "answered" && n != 1 {
			t.Errorf("%s ran %d times", rcLabel(ev), n)
		}
	}
}

// postBill reconciles bill through the admin API.
func postBill(t *testing.T, g gatewaytest.Gateway, query string, bill []byte) reconcile.Report {
	t.Helper()
	status, body := postRaw(t, g, "/idempotency/reconcile?"+query, bill)
	if status != http.StatusOK {
		t.Fatalf("reconcile: %d %s", status, body)
	}
	var rep reconcile.Report
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return rep
}

func postRaw(t *testing.T, g gatewaytest.Gateway, uri string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+g.Admin+uri, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/csv")
	resp, err := gatewaytest.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
