package orders

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// TestPageAnsweredWithoutOrderEvent: an answered record whose order lacks
// its event (stored by a settle a store outage had deferred, before that
// settle wrote the order) is on the order's page as the event that ran:
// answered, with when it ran.
func TestPageAnsweredWithoutOrderEvent(t *testing.T) {
	for name, open := range pageStores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			const order = "alipay:2021:T7"
			key := order + ":paid"
			j := store.Journal{Notification: &store.Notification{Method: "POST", URI: "/notify"}}
			before := time.Now().Add(-time.Second)
			if err := s.Complete(ctxT(t), key, won(t, s, key), store.Answer{Status: 200, Body: []byte("success"), BodyCached: true}, time.Hour, j); err != nil {
				t.Fatal(err)
			}
			v, err := Page(ctxT(t), s, order, func(_ string, rec *store.Record) store.State { return rec.State })
			if err != nil {
				t.Fatalf("page: %v", err)
			}
			if len(v.Events) != 1 {
				t.Fatalf("events %+v, want paid", v.Events)
			}
			if ev := v.Events[0]; ev.Event != "paid" || ev.Key != key || ev.State != "answered" || ev.Status != 200 ||
				ev.Ran.Before(before) || ev.Channel != "POST /notify" {
				t.Fatalf("paid %+v, want it answered, ran when its record was", ev)
			}
		})
	}
}
