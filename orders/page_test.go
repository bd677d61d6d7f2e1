package orders

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/faultystore"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
)

// pageStore is a store an order's page reads, as the admin API finds it.
type pageStore interface {
	store.Store
	Book
}

// pageStores are the real stores: memory, embedded bbolt, and Redis.
func pageStores(t *testing.T) map[string]func(t *testing.T) pageStore {
	return map[string]func(t *testing.T) pageStore{
		"memory": func(t *testing.T) pageStore { return store.NewMemory() },
		"embedded": func(t *testing.T) pageStore {
			s, err := store.NewEmbedded(filepath.Join(t.TempDir(), "idem.db"), store.EmbeddedOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T) pageStore {
			return store.NewRedis(redistest.Start(t).Client(), store.RedisOptions{})
		},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// won claims key, which must be free.
func won(t *testing.T, s store.Store, key string) string {
	t.Helper()
	r, err := s.Claim(ctxT(t), key, "", time.Minute)
	if err != nil || r.Outcome != store.Won {
		t.Fatalf("claim %s: %+v %v", key, r, err)
	}
	return r.Token
}

// ran settles key with a 200 its order remembers, its first copy come by
// method uri, its answer kept for ttl.
func ran(t *testing.T, s store.Store, key, amount, method, uri string, ttl time.Duration) {
	t.Helper()
	run := &store.OrderRun{TTL: time.Hour, Amount: amount, Currency: "CNY"}
	j := store.Journal{Notification: &store.Notification{Method: method, URI: uri}}
	if err := s.Complete(ctxT(t), key, won(t, s, key), store.Answer{Status: 200, Body: []byte("success"), BodyCached: true, Order: run}, ttl, j); err != nil {
		t.Fatal(err)
	}
}

func TestPage(t *testing.T) {
	for name, open := range pageStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits out a ttl, on a store of its own
			testPage(t, open(t))
		})
	}
}

func testPage(t *testing.T, s pageStore) {
	ctx := ctxT(t)
	const order = "alipay:2021:T1"
	// paid ran, and its answer's ttl passed: only the order remembers.
	ran(t, s, order+":paid", "88.88", "POST", "/notify", time.Second)
	deadline := time.Now().Add(5 * time.Second) // ttl, on 2 shared cores under -race
	for {
		if _, err := s.Lookup(ctx, order+":paid"); errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("paid's record outlived its ttl")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A refund ran and is kept; another failed; the close is at the
	// backend now.
	ran(t, s, order+":refund:RF-1", "8.88", "POST", "/notify?charset=utf-8", time.Hour)
	j := store.Journal{Notification: &store.Notification{Method: "GET", URI: "/return?sign=x"}}
	if err := s.Release(ctx, order+":refund:RF-2", won(t, s, order+":refund:RF-2"), time.Hour, j); err != nil {
		t.Fatal(err)
	}
	won(t, s, order+":closed")
	// Not of this order: another trade whose number starts alike, and a
	// key under the order's prefix that names another order.
	ran(t, s, "alipay:2021:T10:paid", "1.00", "POST", "/notify", time.Hour)
	ran(t, s, order+":sub:paid", "2.00", "POST", "/notify", time.Hour)

	var judged []string
	v, err := Page(ctx, s, order, func(key string, rec *store.Record) store.State {
		if rec.Key != key {
			t.Errorf("stateOf(%q) with the record of %q", key, rec.Key)
		}
		judged = append(judged, key)
		return rec.StateAt(time.Now(), 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	if v.Order != order || v.Store != "" || time.Until(v.ExpiresAt) < 50*time.Minute || time.Until(v.ExpiresAt) > time.Hour+time.Minute {
		t.Errorf("page %q store %q expires %v, want the order, no store (the caller names it), about 1h", v.Order, v.Store, v.ExpiresAt)
	}
	byEvent := map[string]EventView{}
	for _, ev := range v.Events {
		byEvent[ev.Event] = ev
	}
	if len(byEvent) != 4 || len(v.Events) != 4 {
		t.Fatalf("events %+v, want paid, refund:RF-1, refund:RF-2 and closed", v.Events)
	}
	if ev := byEvent["paid"]; ev.State != StateRan || ev.Key != order+":paid" || ev.Ran.IsZero() || ev.Amount != "88.88" ||
		ev.Currency != "CNY" || ev.Channel != "" || !ev.FirstSeen.IsZero() || ev.Status != 0 {
		t.Errorf("paid, remembered only by its order: %+v", ev)
	}
	if ev := byEvent["refund:RF-1"]; ev.State != string(store.StateAnswered) || ev.Status != 200 || ev.Ran.IsZero() ||
		ev.Amount != "8.88" || ev.Channel != "POST /notify" || ev.FirstSeen.IsZero() || ev.Copies != 1 {
		t.Errorf("refund:RF-1, kept: %+v", ev)
	}
	if ev := byEvent["refund:RF-2"]; ev.State != string(store.StateFailed) || ev.Status != 0 || !ev.Ran.IsZero() ||
		ev.Amount != "" || ev.Channel != "GET /return" {
		t.Errorf("refund:RF-2, failed: %+v", ev)
	}
	if ev := byEvent["closed"]; ev.State != string(store.StateInFlight) || !ev.Ran.IsZero() || ev.Channel != "" {
		t.Errorf("closed, in flight: %+v", ev)
	}
	// One timeline: by first copy, or by when it ran once its record is
	// gone; paid came first.
	if v.Events[0].Event != "paid" || !slices.IsSortedFunc(v.Events, func(a, b EventView) int { return eventTime(a).Compare(eventTime(b)) }) {
		t.Errorf("events out of time order: %+v", v.Events)
	}
	slices.Sort(judged)
	if want := []string{order + ":closed", order + ":refund:RF-1", order + ":refund:RF-2"}; !slices.Equal(judged, want) {
		t.Errorf("states judged for %v, want %v (the records of the order's events)", judged, want)
	}

	// A key that is its own business event (a Stripe event id) is its
	// own order.
	ran(t, s, "stripe:evt_1", "9.90", "POST", "/stripe", time.Hour)
	v, err = Page(ctx, s, "stripe:evt_1", func(_ string, rec *store.Record) store.State { return rec.State })
	if err != nil || len(v.Events) != 1 || v.Events[0].Event != "" || v.Events[0].Key != "stripe:evt_1" ||
		v.Events[0].State != string(store.StateAnswered) || v.Events[0].Amount != "9.90" {
		t.Fatalf("an event of its own: %+v %v", v, err)
	}

	// An order the store has nothing of.
	v, err = Page(ctx, s, "alipay:2021:T9", func(_ string, rec *store.Record) store.State { return rec.State })
	if !errors.Is(err, ErrNoEvents) || len(v.Events) != 0 {
		t.Fatalf("an unknown order: %+v %v, want ErrNoEvents", v, err)
	}
}

// TestPageStoreFails: a store's error ends the page, as it is, whichever
// read fails.
func TestPageStoreFails(t *testing.T) {
	mem := store.NewMemory()
	ran(t, mem, "alipay:2021:T1:paid", "1.00", "POST", "/notify", time.Hour)
	boom := errors.New("store down")
	for _, op := range []faultystore.Op{faultystore.OpList, faultystore.OpLookup} {
		f := faultystore.NewFaulty(mem)
		f.SetFail(boom, op)
		_, err := Page(ctxT(t), f, "alipay:2021:T1", func(_ string, rec *store.Record) store.State { return rec.State })
		if !errors.Is(err, boom) {
			t.Errorf("%s fails: %v, want the store's error", op, err)
		}
		f.Reset()
		if v, err := Page(ctxT(t), f, "alipay:2021:T1", func(_ string, rec *store.Record) store.State { return rec.State }); err != nil || len(v.Events) != 1 {
			t.Errorf("after %s heals: %+v %v", op, v, err)
		}
	}
}
