package store

import (
	"bytes"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// The refused list's contract, run on every store (see suites).
func init() { suites = append(suites, newSuite("refused", "refused list", refusedCases)) }

// refusal is a test refusal of scope; n marks it (as its length).
func refusal(scope string, n int) Refusal {
	return Refusal{Scope: scope, Route: scope + "#0", Status: 401, Class: "rejected_signature",
		Reason: "signature verification failed", Length: int64(n)}
}

func addRefused(t *testing.T, rl RefusedLog, r Refusal) {
	t.Helper()
	if err := rl.AddRefused(ctxT(t), r); err != nil {
		t.Fatalf("AddRefused: %v", err)
	}
}

func listRefused(t *testing.T, rl RefusedLog, q RefusedQuery) []Refusal {
	t.Helper()
	got, err := rl.Refused(ctxT(t), q)
	if err != nil {
		t.Fatalf("Refused(%+v): %v", q, err)
	}
	return got
}

// marks are the refusals' marks (Length), in the listing's order.
func marks(rs []Refusal) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = int(r.Length)
	}
	return out
}

var refusedCases = []storeCase[RefusedLog]{
	{"empty", func(t *testing.T, rl RefusedLog) {
		if got := listRefused(t, rl, RefusedQuery{}); len(got) != 0 {
			t.Fatalf("an empty store lists %v", got)
		}
		if got := listRefused(t, rl, RefusedQuery{Scope: "none"}); len(got) != 0 {
			t.Fatalf("an unknown scope lists %v", got)
		}
	}},
	{"fields_kept_as_received", func(t *testing.T, rl RefusedLog) {
		// The body's bytes as they came: a terminal escape, a NUL, bytes
		// that are not UTF-8; only the prefix's length is bounded.
		body := append([]byte("\x1b]0;pwned\x07\x00\xff{\"a\":1}"), bytes.Repeat([]byte("x"), 500)...)
		in := Refusal{Scope: "alipay", Route: "alipay#0", Status: 422, Class: "conflict",
			Reason: "same key, different fingerprint", Key: "alipay:2088:T1", Length: int64(len(body)),
			SHA256: strings.Repeat("ab", 32), Prefix: body}
		before := time.Now().Add(-time.Second)
		addRefused(t, rl, in)
		got := listRefused(t, rl, RefusedQuery{})
		if len(got) != 1 {
			t.Fatalf("listed %d, want 1", len(got))
		}
		r := got[0]
		if r.Time.Before(before) || r.Time.After(time.Now().Add(time.Second)) {
			t.Errorf("time %v: not the store's now", r.Time)
		}
		want := in
		want.Prefix = body[:RefusedPrefixMax]
		want.Time = r.Time
		if !reflect.DeepEqual(r, want) {
			t.Fatalf("kept %+v\nwant %+v", r, want)
		}
	}},
	{"newest_first_and_limit", func(t *testing.T, rl RefusedLog) {
		for i := range 5 {
			addRefused(t, rl, refusal("s", i))
		}
		if got := marks(listRefused(t, rl, RefusedQuery{})); !reflect.DeepEqual(got, []int{4, 3, 2, 1, 0}) {
			t.Fatalf("listed %v, want newest first", got)
		}
		if got := marks(listRefused(t, rl, RefusedQuery{Limit: 2})); !reflect.DeepEqual(got, []int{4, 3}) {
			t.Fatalf("limit 2 listed %v", got)
		}
	}},
	{"cap_holds", func(t *testing.T, rl RefusedLog) {
		const extra = 7
		for i := range RefusedCap + extra {
			addRefused(t, rl, refusal("flood", i))
		}
		addRefused(t, rl, refusal("quiet", -1))
		got := listRefused(t, rl, RefusedQuery{Scope: "flood", Limit: RefusedCap + 100})
		if len(got) != RefusedCap {
			t.Fatalf("kept %d of a scope, want the cap %d", len(got), RefusedCap)
		}
		if got[0].Length != RefusedCap+extra-1 || got[len(got)-1].Length != extra {
			t.Fatalf("kept %d … %d, want the newest %d … %d", got[0].Length, got[len(got)-1].Length, RefusedCap+extra-1, extra)
		}
		// The flood of one scope leaves another's list alone.
		if got := marks(listRefused(t, rl, RefusedQuery{Scope: "quiet"})); !reflect.DeepEqual(got, []int{-1}) {
			t.Fatalf("the quiet scope lists %v", got)
		}
	}},
	{"scope_filter", func(t *testing.T, rl RefusedLog) {
		addRefused(t, rl, refusal("a", 1))
		time.Sleep(3 * time.Millisecond) // distinct milliseconds: the Redis clock's grain
		addRefused(t, rl, refusal("b", 2))
		time.Sleep(3 * time.Millisecond)
		addRefused(t, rl, refusal("a", 3))
		addRefused(t, rl, refusal("a:b", 4)) // not a prefix match
		if got := marks(listRefused(t, rl, RefusedQuery{Scope: "a"})); !reflect.DeepEqual(got, []int{3, 1}) {
			t.Fatalf("scope a lists %v", got)
		}
		all := listRefused(t, rl, RefusedQuery{})
		if got := marks(all); len(got) != 4 || !reflect.DeepEqual(got[2:], []int{2, 1}) {
			t.Fatalf("every scope lists %v, want [3 4]/[4 3] then [2 1]", got)
		}
		for _, r := range all {
			if want := map[int64]string{1: "a", 2: "b", 3: "a", 4: "a:b"}[r.Length]; r.Scope != want {
				t.Errorf("refusal %d of scope %q, want %q", r.Length, r.Scope, want)
			}
		}
	}},
	{"since_filter", func(t *testing.T, rl RefusedLog) {
		addRefused(t, rl, refusal("s", 1))
		time.Sleep(3 * time.Millisecond)
		addRefused(t, rl, refusal("s", 2))
		addRefused(t, rl, refusal("t", 3))
		all := listRefused(t, rl, RefusedQuery{})
		if len(all) != 3 {
			t.Fatalf("listed %v", marks(all))
		}
		var second time.Time
		for _, r := range all {
			if r.Length == 2 {
				second = r.Time
			}
		}
		got := marks(listRefused(t, rl, RefusedQuery{Since: second}))
		if len(got) != 2 || !(got[0]+got[1] == 5) {
			t.Fatalf("since the second lists %v, want 2 and 3", got)
		}
		if got := marks(listRefused(t, rl, RefusedQuery{Scope: "s", Since: second})); !reflect.DeepEqual(got, []int{2}) {
			t.Fatalf("scope s since the second lists %v", got)
		}
		if got := listRefused(t, rl, RefusedQuery{Since: time.Now().Add(time.Hour)}); len(got) != 0 {
			t.Fatalf("since an hour ahead lists %v", marks(got))
		}
	}},
}

// TestRefusedAcrossInstances: what one gateway instance keeps, another
// sharing the store lists — two stores on two clients of one Redis, and of
// one 3-master Cluster, the scopes on their own hash tags; the missing
// list, the other capped list, alike.
func TestRefusedAcrossInstances(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster")
	single := redistest.Start(t)
	cluster := redistest.StartCluster(t, 3)
	for _, c := range []struct {
		name   string
		client func() redis.UniversalClient
	}{
		{"redis", func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: single.Addr()}) }},
		{"redis_cluster", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stores []*Redis
			for range 2 {
				cl := c.client()
				s := NewRedis(cl, RedisOptions{Prefix: "rfx"})
				t.Cleanup(func() { s.Close(); cl.Close() })
				stores = append(stores, s)
			}
			a, b := stores[0], stores[1]
			// Many scopes: on Cluster they land on several masters.
			for i := range 12 {
				addRefused(t, a, refusal(fmt.Sprintf("scope%02d", i), i))
			}
			addRefused(t, b, refusal("scope00", 100))
			got := listRefused(t, b, RefusedQuery{})
			if len(got) != 13 || got[0].Length != 100 {
				t.Fatalf("b lists %v, want a's 12 and its own first", marks(got))
			}
			if got := marks(listRefused(t, a, RefusedQuery{Scope: "scope00"})); !reflect.DeepEqual(got, []int{100, 0}) {
				t.Fatalf("a lists scope00 as %v", got)
			}
			// Another prefix on the same server is another store.
			other := NewRedis(a.c, RedisOptions{Prefix: "rfxx"})
			defer other.Close()
			if got := listRefused(t, other, RefusedQuery{}); len(got) != 0 {
				t.Fatalf("another prefix lists %v", marks(got))
			}
			// The missing list, the other capped list, names its scopes
			// the same way.
			ctx, now := ctxT(t), time.Now()
			for i := range 12 {
				if err := a.PutMissing(ctx, missingItem(fmt.Sprintf("scope%02d", i), "m", now.Add(time.Duration(i)*time.Second))); err != nil {
					t.Fatal(err)
				}
			}
			ms, err := b.Missing(ctx, MissingQuery{})
			if err != nil || len(ms) != 12 || ms[0].Scope != "scope11" {
				t.Fatalf("b lists %d missing items (%v), want a's 12, scope11's first", len(ms), err)
			}
		})
	}
}

// TestRefusedEmbeddedReopen: the embedded store's list is in its file: a
// restarted gateway lists what it refused before, and the cap still
// counts from where it was.
func TestRefusedEmbeddedReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	open := func() *Embedded {
		s, err := NewEmbedded(path, EmbeddedOptions{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	for i := range RefusedCap {
		addRefused(t, s, refusal("s", i))
	}
	s.Close()
	s = open()
	defer s.Close()
	addRefused(t, s, refusal("s", RefusedCap))
	got := listRefused(t, s, RefusedQuery{Limit: RefusedCap})
	if len(got) != RefusedCap || got[0].Length != RefusedCap || got[len(got)-1].Length != 1 {
		t.Fatalf("after a restart: %d kept, %d … %d", len(got), got[0].Length, got[len(got)-1].Length)
	}
}
