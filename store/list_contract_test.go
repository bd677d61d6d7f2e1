package store

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// listStore is what the listing suites check: the claim contract, which
// makes the records, and Lister, which pages through them.
type listStore interface {
	Store
	Lister
}

func init() { suites = append(suites, newSuite("list", "listings", listCases)) }

var listCases = []storeCase[listStore]{
	{"in_flight_paging", func(t *testing.T, s listStore) {
		ctx := ctxT(t)
		want := map[string]bool{}
		for i := range 40 {
			key := fmt.Sprintf("page:%02d", i)
			won := claim(t, s, key, "", longTTL, Won)
			switch {
			case i%4 == 0: // answered: not listed
				if err := s.Complete(ctx, key, won.Token, answer, longTTL, Journal{}); err != nil {
					t.Fatal(err)
				}
			case i%4 == 1: // released: failed, not listed
				if err := s.Release(ctx, key, won.Token, time.Hour, Journal{}); err != nil {
					t.Fatal(err)
				}
			default:
				want[key] = true
			}
		}
		for _, key := range []string{"br{ace}", "}", "{", "%7B", "bin\x00\xff"} {
			claim(t, s, key, "", longTTL, Won)
			want[key] = true
		}
		for _, limit := range []int{1, 7, 1000} {
			got := map[string]bool{}
			cursor, pages := "", 0
			for {
				recs, next, err := listInFlight(ctx, s, cursor, limit)
				if err != nil {
					t.Fatalf("InFlight(%q, %d): %v", cursor, limit, err)
				}
				if len(recs) > limit {
					t.Fatalf("page of %d, limit %d", len(recs), limit)
				}
				for _, r := range recs {
					if r.State != StateInFlight || r.Copies != 1 {
						t.Fatalf("listed record: %+v", r)
					}
					if got[r.Key] {
						t.Fatalf("limit %d: %q listed twice", limit, r.Key)
					}
					got[r.Key] = true
				}
				if next == "" {
					break
				}
				if pages++; pages > 1000 {
					t.Fatal("InFlight does not end")
				}
				cursor = next
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("limit %d: listed %v\nwant %v", limit, got, want)
			}
		}
		if _, _, err := listInFlight(ctx, s, "garbage", 10); err == nil {
			t.Fatal("bad cursor accepted")
		}
	}},
}
