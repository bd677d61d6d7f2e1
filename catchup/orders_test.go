package catchup

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

func alipayEngine(t *testing.T, s store.Store, q *querier, c *clock, route string, obs Observer) *Engine {
	rec := RecoverAlert
	if route != "" {
		rec = RecoverQueryRoute
	}
	return mustEngine(t, Config{Scope: "alipay", Platform: "alipay", API: q, Store: s, Recover: rec, QueryRoute: route,
		Every: time.Minute, Grace: 15 * time.Minute, Window: 72 * time.Hour, Now: c.Now, Observer: obs})
}

// TestPaidRecoveredThroughQueryRouteOnce: an Alipay order with a created
// event and no paid one, which the platform's verified answer says is
// paid, is recovered through the merchant's query route once, however
// many passes follow.
func TestPaidRecoveredThroughQueryRouteOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		c := newClock()
		ran(t, s, "alipay:2088:T1:created", "O1")
		q := &querier{answers: map[string]keying.TradeAnswer{"T1": paid("2088", "T1", "O1")}}
		route := newQueryRoute(t, s, "alipay", "2088")
		e := alipayEngine(t, s, q, c, route.srv.URL, nil)
		tick(t, e) // inside grace: not asked
		if len(q.asked) != 0 || route.calls.Load() != 0 {
			t.Fatalf("inside grace: asked %v, route %d", q.asked, route.calls.Load())
		}
		for _, d := range []time.Duration{16 * time.Minute, time.Minute, 2 * time.Hour, 30 * time.Hour} {
			c.Add(d)
			tick(t, e)
		}
		if n := route.calls.Load(); n != 1 {
			t.Fatalf("the query route was called %d times, want 1", n)
		}
		if f := route.forms[0]; f["out_trade_no"] != "O1" || f["trade_no"] != "T1" || f["app_id"] != "2088" || f["total_amount"] != "9.90" {
			t.Fatalf("the route got %v", f)
		}
		if len(q.asked) != 1 || q.asked[0] != (keying.OrderQuery{OutTradeNo: "O1", TradeNo: "T1"}) {
			t.Fatalf("the platform was asked %v", q.asked)
		}
		m := item(t, s, "alipay", "T1")
		if m.Outcome != OutcomeRecovered || m.Key != "alipay:2088:T1:paid" || m.Action != store.MissingQueryRoute ||
			m.MerchantRef != "O1" || m.Amount != "9.90" || !m.NextAt.IsZero() || m.Attempts != 1 {
			t.Fatalf("item %+v", m)
		}
	})
}

// TestOrderCandidates: what is queried is what the gateway has reason to
// expect: a created order and a display return with no paid event, and a
// failed payment key; not an order that was paid, nor one inside grace.
func TestOrderCandidates(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		// The records' times are the store's clock: grace is real time here.
		ran(t, s, "alipay:2088:T1:created")
		ran(t, s, "alipay:2088:T2:return")
		failed(t, s, "alipay:2088:T3:paid")
		ran(t, s, "alipay:2088:T5:created")
		ran(t, s, "alipay:2088:T5:paid")
		ran(t, s, "wechatpay:1900:T6:created") // another scope
		time.Sleep(1500 * time.Millisecond)
		ran(t, s, "alipay:2088:T4:created") // inside grace at the pass
		c := newClock()
		q := &querier{}
		e := mustEngine(t, Config{Scope: "alipay", Platform: "alipay", API: q, Store: s, Recover: RecoverAlert,
			Every: time.Minute, Grace: time.Second, Now: c.Now})
		tick(t, e)
		if got := q.tradeNos(); !slices.Equal(got, []string{"T1", "T2", "T3"}) {
			t.Fatalf("asked about %v", got)
		}
	})
}

// TestNothingConcludedChangesNothing: a NOT_EXIST, an answer that fails
// verification, an API that is down and one that refuses the key each
// change nothing — no query route call, no record, the order as it was —
// and the missing item says why, backing off to ask again.
func TestNothingConcludedChangesNothing(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		reason string
		alert  bool
	}{
		{"not_exist", nil, "NOT_EXIST", false},
		{"unverified", fmt.Errorf("alipay: sign: %w", keying.ErrUnverified), "response failed verification", false},
		{"api_down", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "the platform's API is down", true},
		{"refused", fmt.Errorf("alipay: isv.invalid-app-id: %w", keying.ErrAPIRefused), "the platform's API refused the call", true},
	}
	eachStore(t, func(t *testing.T, s store.Store) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				c := newClock()
				scope := "alipay"
				id := "T_" + tc.name
				key := "alipay:2088:" + id + ":created"
				ran(t, s, key, "O_"+tc.name)
				before, err := s.Lookup(ctxT(t), key)
				if err != nil {
					t.Fatal(err)
				}
				q := &querier{errs: map[string]error{id: tc.err}}
				route := newQueryRoute(t, s, scope, "2088")
				obs := &observer{}
				e := mustEngine(t, Config{Scope: scope, Platform: "alipay", API: q, Store: s, Recover: RecoverQueryRoute,
					QueryRoute: route.srv.URL, Every: time.Minute, Now: c.Now, Observer: obs,
					Owner: "o-" + tc.name})
				c.Add(16 * time.Minute)
				tick(t, e)
				if route.calls.Load() != 0 {
					t.Fatal("the query route was called")
				}
				after, err := s.Lookup(ctxT(t), key)
				if err != nil || after.State != before.State || after.Copies != before.Copies || !after.Changed.Equal(before.Changed) {
					t.Fatalf("the record changed: %+v → %+v, %v", before, after, err)
				}
				o, err := s.(store.OrderBook).Order(ctxT(t), "alipay:2088:"+id)
				if err != nil || len(o.Events) != 1 || o.Events[0].Event != keying.EventCreated {
					t.Fatalf("the order changed: %+v, %v", o, err)
				}
				m := item(t, s, scope, id)
				if m.Outcome != OutcomeUnknown || !strings.Contains(m.Reason, tc.reason) || m.Attempts != 1 ||
					!m.NextAt.Equal(c.Now().Add(time.Hour)) || m.MerchantRef != "O_"+tc.name {
					t.Fatalf("item %+v", m)
				}
				if (len(obs.apiErrs) == 1) != tc.alert {
					t.Fatalf("the observer heard of the API: %v", obs.apiErrs)
				}
				// The back-off asks again, an hour on, and concludes no more.
				c.Add(time.Hour)
				tick(t, e)
				if m := item(t, s, scope, id); m.Attempts != 2 || m.Outcome != OutcomeUnknown || route.calls.Load() != 0 {
					t.Fatalf("second ask: %+v", m)
				}
				// Release the lease for the next case's engine.
				if err := s.(store.Leaser).ReleaseLease(ctxT(t), "catchup:"+scope, "o-"+tc.name); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// TestOperatorQuery: the operator's query runs at once (no grace), names
// the order from the platform's answer, recovers a paid one through the
// query route, and is bounded by the per-minute cap.
func TestOperatorQuery(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		c := newClock()
		q := &querier{answers: map[string]keying.TradeAnswer{"O9": paid("2088", "T9", "O9")}}
		route := newQueryRoute(t, s, "alipay", "2088")
		e := mustEngine(t, Config{Scope: "alipay", Platform: "alipay", API: q, Store: s, Recover: RecoverQueryRoute,
			QueryRoute: route.srv.URL, CallsPerMinute: 2, Now: c.Now})
		m, err := e.Query(ctxT(t), keying.OrderQuery{OutTradeNo: "O9"})
		if err != nil || m.Outcome != OutcomeRecovered || m.ID != "T9" || m.Key != "alipay:2088:T9:paid" || route.calls.Load() != 1 {
			t.Fatalf("query: %+v, %v; route %d", m, err, route.calls.Load())
		}
		// Asked again: the paid event ran; the route is not called again.
		m, err = e.Query(ctxT(t), keying.OrderQuery{OutTradeNo: "O9"})
		if err != nil || m.Outcome != OutcomeRecovered || route.calls.Load() != 1 {
			t.Fatalf("again: %+v, %v; route %d", m, err, route.calls.Load())
		}
		if _, err := e.Query(ctxT(t), keying.OrderQuery{OutTradeNo: "O9"}); !errors.Is(err, ErrCapped) {
			t.Fatalf("a third call in the minute: %v", err)
		}
		c.Add(time.Minute)
		if _, err := e.Query(ctxT(t), keying.OrderQuery{TradeNo: "T404"}); err != nil {
			t.Fatalf("after a minute: %v", err)
		}
		if m := item(t, s, "alipay", "T404"); m.Outcome != OutcomeUnknown || !strings.Contains(m.Reason, "NOT_EXIST") {
			t.Fatalf("not exist: %+v", m)
		}
	})
}

// TestConfigRefused: resend where the platform has no resend API, a
// query route with no URL, no read API at all.
func TestConfigRefused(t *testing.T) {
	s := store.NewMemory()
	defer s.Close()
	for name, cfg := range map[string]Config{
		"resend_on_querier":   {Scope: "alipay", API: &querier{}, Store: s, Recover: RecoverResend},
		"query_route_no_url":  {Scope: "alipay", API: &querier{}, Store: s, Recover: RecoverQueryRoute},
		"query_route_lister":  {Scope: "stripe", API: &lister{}, Store: s, Recover: RecoverQueryRoute, QueryRoute: "http://127.0.0.1:1/q"},
		"no_api":              {Scope: "generic", Store: s, Recover: RecoverAlert},
		"unknown_recover":     {Scope: "stripe", API: &lister{}, Store: s, Recover: "refund"},
		"bare_store_no_lease": {Scope: "stripe", API: &lister{}, Store: struct{ store.Store }{s}, Recover: RecoverAlert},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestAlertOnly: with recover alert, a verified paid order whose paid
// event never ran is recorded and alerted, once; no route is called and
// the platform is not asked again; when the paid event runs after all,
// the item reads recovered.
func TestAlertOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		c := newClock()
		failed(t, s, "alipay:2088:T7:paid")
		q := &querier{answers: map[string]keying.TradeAnswer{"T7": paid("2088", "T7", "O7")}}
		obs := &observer{}
		e := alipayEngine(t, s, q, c, "", obs)
		c.Add(16 * time.Minute)
		tick(t, e)
		c.Add(25 * time.Hour)
		tick(t, e)
		m := item(t, s, "alipay", "T7")
		if m.Outcome != OutcomeAlertOnly || m.Action != store.MissingAlerted || m.MerchantRef != "O7" || len(q.asked) != 1 {
			t.Fatalf("item %+v, asked %v", m, q.asked)
		}
		if len(obs.alerts) != 1 || obs.alerts[0].ID != "T7" || obs.counted["alipay/alert only"] != 1 {
			t.Fatalf("alerts %v, counted %v", obs.alerts, obs.counted)
		}
		ran(t, s, "alipay:2088:T7:paid")
		c.Add(time.Minute)
		tick(t, e)
		if m := item(t, s, "alipay", "T7"); m.Outcome != OutcomeRecovered || m.Key != "alipay:2088:T7:paid" {
			t.Fatalf("after the paid event ran: %+v", m)
		}
	})
}
