package store

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedListPrefixBoundedByWhatItFinds: a prefix is listed from the
// records in key order (a bbolt Seek), so one that matches two keys among
// thousands takes one page, where the time index gave one page per
// 4×Limit keys of the whole store; a prefix that matches more pages
// through its own keys newest first; Scope and Prefix combine.
func TestEmbeddedListPrefixBoundedByWhatItFinds(t *testing.T) {
	s, err := NewEmbedded(filepath.Join(t.TempDir(), "idem.db"), EmbeddedOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var keys []string
	for i := range 3000 {
		keys = append(keys, fmt.Sprintf("bulk:%04d", i))
		if i == 1000 || i == 2000 {
			keys = append(keys, fmt.Sprintf("rare:%d", i))
		}
	}
	all := settleKeys(t, s, keys, time.Minute, 0, nil)
	pagesOf := func(q ListQuery) ([]string, int) {
		t.Helper()
		var got []string
		for pages := 1; ; pages++ {
			p, err := s.List(ctxT(t), q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Records {
				got = append(got, r.Key)
			}
			if q.Cursor = p.Next; q.Cursor == "" || pages > 10000 {
				return got, pages
			}
		}
	}
	if got, pages := pagesOf(ListQuery{State: StateAnswered, Prefix: "rare:", Limit: 5}); !slices.Equal(got, []string{"rare:2000", "rare:1000"}) || pages != 1 {
		t.Fatalf("prefix rare: listed %v in %d pages, want [rare:2000 rare:1000] in 1", got, pages)
	}
	// Newest first as the unfiltered listing orders them (keys settled in
	// the same millisecond by key).
	byList := listAll(t, s, ListQuery{State: StateAnswered, Limit: 1000})
	if len(byList) != len(all) {
		t.Fatalf("listed %d of %d keys", len(byList), len(all))
	}
	want := slices.DeleteFunc(slices.Clone(byList), func(k string) bool { return !strings.HasPrefix(k, "bulk:00") })
	if got, pages := pagesOf(ListQuery{State: StateAnswered, Prefix: "bulk:00", Limit: 7}); !slices.Equal(got, want) || pages != 15 {
		t.Fatalf("prefix bulk:00 listed %v in %d pages\nwant %v in 15", got, pages, want)
	}
	if got, _ := pagesOf(ListQuery{State: StateAnswered, Scope: "rare", Limit: 5}); len(got) != 2 {
		t.Fatalf("scope rare listed %v", got)
	}
	if got, _ := pagesOf(ListQuery{State: StateAnswered, Scope: "bulk", Prefix: "rare:", Limit: 5}); len(got) != 0 {
		t.Fatalf("scope bulk with prefix rare: listed %v", got)
	}
	if got, _ := pagesOf(ListQuery{State: StateFailed, Prefix: "rare:", Limit: 5}); len(got) != 0 {
		t.Fatalf("failed with prefix rare: listed %v", got)
	}
}
