package catchup

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

func stripeEngine(t *testing.T, s store.Store, l *lister, c *clock, obs Observer) *Engine {
	l.now = c.Now
	return mustEngine(t, Config{Scope: "stripe", Platform: "stripe", API: l, Store: s, Recover: RecoverResend,
		Every: time.Minute, Grace: 15 * time.Minute, Window: 72 * time.Hour, Now: c.Now, Observer: obs})
}

func event(id string, at time.Time) keying.PlatformEvent {
	return keying.PlatformEvent{ID: id, Type: "payment_intent.succeeded", At: at, Object: "pi_" + id,
		MerchantRef: "order-" + id, Money: keying.Money{Amount: "12.00", Currency: "EUR"}}
}

// TestMissingEventResentOnce: an event older than grace with no record is
// resent once, and again only on the back-off schedule; once it arrived
// through the gate (its key has a record) it is recovered and never
// resent. An event already recorded is never resent; one inside grace is
// left alone.
func TestMissingEventResentOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		c := newClock()
		now := c.Now()
		l := &lister{events: []keying.PlatformEvent{
			event("evt_missing", now.Add(-time.Hour)),
			event("evt_done", now.Add(-time.Hour)),
			event("evt_fresh", now.Add(-5*time.Minute)),
		}}
		ran(t, s, "stripe:evt_done")
		obs := &observer{}
		e := stripeEngine(t, s, l, c, obs)
		tick(t, e)
		if l.resends("evt_missing") != 1 || l.resends("evt_done") != 0 || l.resends("evt_fresh") != 0 {
			t.Fatalf("resent %v", l.resent)
		}
		m := item(t, s, "stripe", "evt_missing")
		if m.Action != store.MissingResent || m.Outcome != OutcomeMissing || m.Attempts != 1 ||
			!m.NextAt.Equal(now.Add(time.Hour)) || m.MerchantRef != "order-evt_missing" || m.Amount != "12.00" ||
			!m.At.Equal(now.Add(-time.Hour)) || m.Platform != "stripe" {
			t.Fatalf("item %+v", m)
		}
		for _, id := range []string{"evt_done", "evt_fresh"} {
			if _, err := s.(store.MissingLog).MissingItem(ctxT(t), "stripe", id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s has an item: %v", id, err)
			}
		}
		c.Add(11 * time.Minute) // evt_fresh is now past grace, and missing
		tick(t, e)
		if l.resends("evt_missing") != 1 || l.resends("evt_fresh") != 1 {
			t.Fatalf("second tick resent %v", l.resent)
		}
		// The resent event arrives, Stripe-signed, through the gate.
		ran(t, s, "stripe:evt_missing")
		c.Add(2 * time.Hour)
		tick(t, e)
		if l.resends("evt_missing") != 1 || l.resends("evt_done") != 0 {
			t.Fatalf("after arrival resent %v", l.resent)
		}
		m = item(t, s, "stripe", "evt_missing")
		if m.Outcome != OutcomeRecovered || m.Key != "stripe:evt_missing" || !m.NextAt.IsZero() {
			t.Fatalf("after arrival %+v", m)
		}
		if obs.counted["stripe/missing"] != 2 || obs.counted["stripe/recovered"] != 1 {
			t.Fatalf("counted %v", obs.counted)
		}
	})
}

// TestBackoffSchedule: an event that never arrives is resent at grace,
// then 1h, 6h and 24h after the one before, 24h from then on, and no more
// once the window passed.
func TestBackoffSchedule(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		c := newClock()
		t0 := c.Now()
		at := t0.Add(-20 * time.Minute)
		l := &lister{events: []keying.PlatformEvent{event("evt_lost", at)}}
		e := stripeEngine(t, s, l, c, nil)
		for c.Now().Before(t0.Add(80 * time.Hour)) {
			tick(t, e)
			c.Add(30 * time.Minute)
		}
		want := []time.Time{t0, t0.Add(time.Hour), t0.Add(7 * time.Hour), t0.Add(31 * time.Hour), t0.Add(55 * time.Hour)}
		got := l.resent["evt_lost"]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("resent at\n%v\nwant\n%v", got, want)
		}
		m := item(t, s, "stripe", "evt_lost")
		if m.Attempts != 5 || !m.NextAt.IsZero() || m.Outcome != OutcomeMissing {
			t.Fatalf("after the window %+v", m)
		}
	})
}

// TestEventListerFailuresChangeNothing: a list that fails (the API down,
// the key refused) records nothing and tells the Observer; a resend that
// fails is recorded with why, and retried on the schedule.
func TestEventListerFailuresChangeNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		c := newClock()
		l := &lister{events: []keying.PlatformEvent{event("evt_1", c.Now().Add(-time.Hour))},
			listErr: fmt.Errorf("dial: %w", syscall.ECONNREFUSED)}
		obs := &observer{}
		e := stripeEngine(t, s, l, c, obs)
		if _, err := e.Tick(ctxT(t)); err == nil {
			t.Fatal("a failed list is no error")
		}
		if got, _ := s.(store.MissingLog).Missing(ctxT(t), store.MissingQuery{}); len(got) != 0 || l.resends("evt_1") != 0 {
			t.Fatalf("an API down changed %v, resent %v", got, l.resent)
		}
		if len(obs.apiErrs) != 1 {
			t.Fatalf("the observer heard %v", obs.apiErrs)
		}
		l.listErr, l.sendErr = nil, fmt.Errorf("stripe: 401: %w", keying.ErrAPIRefused)
		tick(t, e)
		m := item(t, s, "stripe", "evt_1")
		if m.Reason != "the platform's API refused the call" || m.Outcome != OutcomeMissing || m.Attempts != 1 || len(obs.apiErrs) != 2 {
			t.Fatalf("a refused resend: %+v, %v", m, obs.apiErrs)
		}
	})
}

// TestCapHolds: the engine's calls to the platform in any minute stay
// within CallsPerMinute; the rest wait, unchanged, for a later pass.
func TestCapHolds(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		c := newClock()
		l := &lister{now: c.Now}
		for i := range 5 {
			l.events = append(l.events, event(fmt.Sprint("evt_", i), c.Now().Add(-time.Hour)))
		}
		e := mustEngine(t, Config{Scope: "stripe", Platform: "stripe", API: l, Store: s, Recover: RecoverResend,
			Every: time.Minute, CallsPerMinute: 3, Now: c.Now})
		perMinute := []int{3, 3, 3} // a list, then resends while the cap lasts
		for i, want := range perMinute {
			before := l.calls()
			tick(t, e)
			c.Add(20 * time.Second)
			tick(t, e) // the same minute: nothing more
			c.Add(20 * time.Second)
			tick(t, e)
			if got := l.calls() - before; got != want {
				t.Fatalf("minute %d: %d calls, want %d", i, got, want)
			}
			c.Add(21 * time.Second)
		}
		for i := range 5 {
			if n := l.resends(fmt.Sprint("evt_", i)); n != 1 {
				t.Fatalf("evt_%d resent %d times", i, n)
			}
		}
	})
}
