package store

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The leases' and the missing list's contracts, run on every store (see
// suites).
func init() {
	suites = append(suites,
		newSuite("lease", "leases", leaseCases),
		newSuite("missing", "missing list", missingCases))
}

var leaseCases = []storeCase[Leaser]{
	{"one_owner_at_a_time", func(t *testing.T, l Leaser) {
		ctx := ctxT(t)
		held, err := l.Lease(ctx, "catchup:stripe", "a", longTTL)
		if err != nil || !held {
			t.Fatalf("a first lease: %v, %v", held, err)
		}
		if held, err := l.Lease(ctx, "catchup:stripe", "b", longTTL); err != nil || held {
			t.Fatalf("b took a's lease: %v, %v", held, err)
		}
		if held, err := l.Lease(ctx, "catchup:alipay", "b", longTTL); err != nil || !held {
			t.Fatalf("another lease's name is free: %v, %v", held, err)
		}
		if held, err := l.Lease(ctx, "catchup:stripe", "a", longTTL); err != nil || !held {
			t.Fatalf("a renews its own: %v, %v", held, err)
		}
		// b's release of a lease a holds changes nothing.
		if err := l.ReleaseLease(ctx, "catchup:stripe", "b"); err != nil {
			t.Fatal(err)
		}
		if held, _ := l.Lease(ctx, "catchup:stripe", "b", longTTL); held {
			t.Fatal("b's release freed a's lease")
		}
		if err := l.ReleaseLease(ctx, "catchup:stripe", "a"); err != nil {
			t.Fatal(err)
		}
		if held, err := l.Lease(ctx, "catchup:stripe", "b", longTTL); err != nil || !held {
			t.Fatalf("after a's release b takes it: %v, %v", held, err)
		}
	}},
	{"runs_out", func(t *testing.T, l Leaser) {
		ctx := ctxT(t)
		if held, err := l.Lease(ctx, "k{x}%", "a", 300*time.Millisecond); err != nil || !held {
			t.Fatalf("a: %v, %v", held, err)
		}
		if held, _ := l.Lease(ctx, "k{x}%", "b", longTTL); held {
			t.Fatal("b took a live lease")
		}
		time.Sleep(600 * time.Millisecond)
		if held, err := l.Lease(ctx, "k{x}%", "b", longTTL); err != nil || !held {
			t.Fatalf("b after a's ran out: %v, %v", held, err)
		}
	}},
	{"concurrent_one_wins", func(t *testing.T, l Leaser) {
		ctx := ctxT(t)
		var won atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				held, err := l.Lease(ctx, "race", fmt.Sprint("owner", i), longTTL)
				if err != nil {
					t.Error(err)
				}
				if held {
					won.Add(1)
				}
			}()
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("%d owners hold one lease", won.Load())
		}
	}},
}

func missingItem(scope, id string, updated time.Time) Missing {
	return Missing{Scope: scope, Platform: "alipay", ID: id, Order: scope + ":2088:" + id, MerchantRef: "M-" + id, Amount: "9.90",
		Currency: "CNY", At: updated.Add(-time.Hour).UTC(), Action: MissingQueried, Outcome: "unknown",
		Reason: "the platform's API is down", Attempts: 1, NextAt: updated.Add(time.Hour).UTC(),
		Found: updated.UTC(), Updated: updated.UTC()}
}

var missingCases = []storeCase[MissingLog]{
	{"empty", func(t *testing.T, ml MissingLog) {
		ctx := ctxT(t)
		if got, err := ml.Missing(ctx, MissingQuery{}); err != nil || len(got) != 0 {
			t.Fatalf("an empty store lists %v, %v", got, err)
		}
		if _, err := ml.MissingItem(ctx, "alipay", "T1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("an unknown item: %v", err)
		}
	}},
	{"upsert_by_scope_and_id", func(t *testing.T, ml MissingLog) {
		ctx := ctxT(t)
		t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
		a := missingItem("alipay", "T1", t0)
		if err := ml.PutMissing(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := ml.PutMissing(ctx, missingItem("wechatpay", "T1", t0.Add(time.Minute))); err != nil {
			t.Fatal(err)
		}
		got, err := ml.MissingItem(ctx, "alipay", "T1")
		if err != nil || !reflect.DeepEqual(*got, a) {
			t.Fatalf("kept %+v, %v\nwant %+v", got, err, a)
		}
		// A back-off updates the same item.
		a.Attempts, a.Updated, a.Outcome, a.Reason, a.Key = 2, t0.Add(2*time.Minute), "recovered", "", "alipay:2088:T1:paid"
		if err := ml.PutMissing(ctx, a); err != nil {
			t.Fatal(err)
		}
		all, err := ml.Missing(ctx, MissingQuery{})
		if err != nil || len(all) != 2 || all[0].Scope != "alipay" || all[0].Attempts != 2 || all[0].Key != a.Key || all[1].Scope != "wechatpay" {
			t.Fatalf("listed %+v, %v", all, err)
		}
		one, err := ml.Missing(ctx, MissingQuery{Scope: "wechatpay"})
		if err != nil || len(one) != 1 || one[0].Scope != "wechatpay" {
			t.Fatalf("one scope: %+v, %v", one, err)
		}
		since, err := ml.Missing(ctx, MissingQuery{Since: t0.Add(90 * time.Second)})
		if err != nil || len(since) != 1 || since[0].Scope != "alipay" {
			t.Fatalf("since: %+v, %v", since, err)
		}
	}},
	{"capped", func(t *testing.T, ml MissingLog) {
		ctx := ctxT(t)
		t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
		for i := range MissingCap + 5 {
			if err := ml.PutMissing(ctx, missingItem("s{1}", fmt.Sprint("E", i), t0.Add(time.Duration(i)*time.Second))); err != nil {
				t.Fatal(err)
			}
		}
		all, err := ml.Missing(ctx, MissingQuery{Scope: "s{1}", Limit: 2 * MissingCap})
		if err != nil || len(all) != MissingCap {
			t.Fatalf("kept %d, %v; want %d", len(all), err, MissingCap)
		}
		if all[0].ID != fmt.Sprint("E", MissingCap+4) || all[len(all)-1].ID != "E5" {
			t.Fatalf("kept %s … %s: not the most recent", all[0].ID, all[len(all)-1].ID)
		}
		if _, err := ml.MissingItem(ctx, "s{1}", "E4"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the oldest beyond the cap is still there: %v", err)
		}
	}},
}
