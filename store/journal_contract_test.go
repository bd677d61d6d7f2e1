package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"
)

// listInFlight is List for in-flight claims, in the shape of the listing
// it replaced.
func listInFlight(ctx context.Context, s Lister, cursor string, limit int) ([]*Record, string, error) {
	p, err := s.List(ctx, ListQuery{State: StateInFlight, Cursor: cursor, Limit: limit})
	return p.Records, p.Next, err
}

// listAll follows the cursor of q to the end and returns the keys in order.
func listAll(t *testing.T, s Lister, q ListQuery) []string {
	t.Helper()
	var keys []string
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		p, err := s.List(ctxT(t), q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		if len(p.Records) > q.Limit && q.Limit > 0 {
			t.Fatalf("page of %d, limit %d", len(p.Records), q.Limit)
		}
		for _, r := range p.Records {
			if seen[r.Key] {
				t.Fatalf("List(%s): %q listed twice", q.State, r.Key)
			}
			seen[r.Key] = true
			keys = append(keys, r.Key)
		}
		if p.Next == "" {
			return keys
		}
		if pages > 10000 {
			t.Fatal("List does not end")
		}
		q.Cursor = p.Next
	}
}

var testNotification = &Notification{
	Method: "POST", URI: "/notify?x=1", Host: "gw.example",
	Header:   http.Header{"Content-Type": {"application/json"}, "Webhook-Id": {"msg_1"}},
	Body:     []byte(`{"id":"evt_1","amount":100,"bytes":"\u0000\u00ff"}`),
	BodySize: 48, Addr: "127.0.0.1:8443", TLS: true,
}

func attempt(status int, outcome, body string) *Attempt {
	return &Attempt{Start: time.UnixMilli(time.Now().UnixMilli()), Duration: 1500 * time.Microsecond,
		Status: status, Outcome: outcome, Body: []byte(body)}
}

func init() { suites = append(suites, newSuite("journal", "listings or recovery", journalCases)) }

// journalStore is what the journal suite checks: the journal is written
// by the claim contract and read back by Lookup, by listings and after a
// recovery.
type journalStore interface {
	Store
	Lister
	Recovery
}

var journalCases = []storeCase[journalStore]{
	{"journal_failures_then_answer", func(t *testing.T, s journalStore) {
		ctx := ctxT(t)
		other := *testNotification
		other.Body = []byte("a later copy")
		for i := range 3 {
			won := claim(t, s, "j", "fp", longTTL, Won)
			n := testNotification
			if i > 0 {
				n = &other // the first copy's bytes stay
			}
			if err := s.Release(ctx, "j", won.Token, longTTL, Journal{Notification: n, Attempt: attempt(500+i, AttemptFailed, fmt.Sprintf("boom %d", i))}); err != nil {
				t.Fatalf("Release %d: %v", i, err)
			}
			rec := lookup(t, s, "j")
			if rec.State != StateFailed || rec.AttemptCount != int64(i+1) || len(rec.Attempts) != i+1 {
				t.Fatalf("after failure %d: %+v", i, rec)
			}
			if !rec.ExpiresAt.After(time.Now().Add(longTTL / 2)) {
				t.Fatalf("failed record expires at %v, want about ttl from now", rec.ExpiresAt)
			}
		}
		won := claim(t, s, "j", "fp", longTTL, Won)
		if rec := lookup(t, s, "j"); rec.State != StateInFlight || rec.Copies != 4 {
			t.Fatalf("re-claimed: %+v", rec)
		}
		if err := s.Complete(ctx, "j", won.Token, answer, longTTL, Journal{Notification: &other, Attempt: attempt(201, AttemptAnswered, "")}); err != nil {
			t.Fatal(err)
		}
		r := claim(t, s, "j", "fp", longTTL, Answered)
		if r.Record.Notification != nil || r.Record.Attempts != nil {
			t.Fatal("a replay carries the journal")
		}
		rec := lookup(t, s, "j")
		if rec.State != StateAnswered || rec.Copies != 5 || rec.AttemptCount != 4 || len(rec.Attempts) != 4 ||
			rec.CopyOutcomes != (CopyCounts{Forwarded: 4, Replayed: 1}) {
			t.Fatalf("answered record: %+v", rec)
		}
		for i, a := range rec.Attempts[:3] {
			if a.Status != 500+i || a.Outcome != AttemptFailed || string(a.Body) != fmt.Sprintf("boom %d", i) ||
				a.Duration != 1500*time.Microsecond || a.Start.IsZero() {
				t.Fatalf("attempt %d: %+v", i, a)
			}
		}
		if a := rec.Attempts[3]; a.Status != 201 || a.Outcome != AttemptAnswered {
			t.Fatalf("last attempt: %+v", a)
		}
		if !reflect.DeepEqual(rec.Notification, testNotification) {
			t.Fatalf("notification: %+v\nwant %+v", rec.Notification, testNotification)
		}
		if !bytes.Equal(rec.Body, answer.Body) {
			t.Fatal("answer lost")
		}
	}},
	{"journal_release_wakes_and_frees", func(t *testing.T, s journalStore) {
		ctx := ctxT(t)
		won := claim(t, s, "w", "", longTTL, Won)
		got := make(chan error, 1)
		go func() {
			rec, err := WaitAnswer(ctx, s, "w", WaitOptions{Deadline: time.Now().Add(10 * time.Second), OpTimeout: 2 * time.Second, Recheck: time.Second})
			if err == nil && rec != nil {
				err = fmt.Errorf("got a record: %+v", rec)
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond) // let the waiter subscribe (not required: it re-checks)
		if err := s.Release(ctx, "w", won.Token, longTTL, Journal{Attempt: attempt(502, AttemptUnreachable, "")}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		case <-time.After(deadline):
			t.Fatal("waiter not released")
		}
		claim(t, s, "w", "", longTTL, Won)
	}},
	{"journal_leave_keeps_history", func(t *testing.T, s journalStore) {
		ctx := ctxT(t)
		won := claim(t, s, "amb", "", time.Second, Won)
		if err := s.Leave(ctx, "amb", won.Token, longTTL, Journal{Notification: testNotification, Attempt: attempt(0, AttemptAmbiguous, "")}); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "amb", "", longTTL, InFlight) // held until the lock runs out
		eventually(t, "ambiguous claim runs out, record stays failed", func() bool {
			rec, err := s.Lookup(ctx, "amb")
			return err == nil && rec.State == StateFailed
		})
		if err := s.Leave(ctx, "amb", won.Token, longTTL, Journal{}); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Leave after the lock ran out: %v", err)
		}
		won2 := claim(t, s, "amb", "", longTTL, Won)
		rec := lookup(t, s, "amb")
		if rec.AttemptCount != 1 || rec.Attempts[0].Outcome != AttemptAmbiguous || rec.Notification == nil || rec.Copies != 3 {
			t.Fatalf("history after the re-claim: %+v", rec)
		}
		if err := s.Complete(ctx, "amb", won2.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
	}},
	{"journal_reopen_keeps_history", func(t *testing.T, s journalStore) {
		// A forced redelivery reopens an answered key: free for the next
		// claim, its history kept.
		ctx := ctxT(t)
		if err := s.Reopen(ctx, "ro", longTTL); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Reopen of nothing: %v", err)
		}
		won := claim(t, s, "ro", "", longTTL, Won)
		if err := s.Reopen(ctx, "ro", longTTL); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Reopen of an in-flight key: %v, want ErrNotFound", err)
		}
		if err := s.Complete(ctx, "ro", won.Token, answer, longTTL, Journal{Notification: testNotification, Attempt: attempt(200, AttemptAnswered, "")}); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "ro", "", longTTL, Answered)
		if err := s.Reopen(ctx, "ro", longTTL); err != nil {
			t.Fatal(err)
		}
		rec := lookup(t, s, "ro")
		if rec.State != StateFailed || rec.Status != 0 || len(rec.Body) != 0 || rec.Notification == nil || rec.AttemptCount != 1 || rec.Copies != 2 {
			t.Fatalf("reopened record: %+v", rec)
		}
		if got := listAll(t, s, ListQuery{State: StateFailed, Limit: 10}); len(got) != 1 || got[0] != "ro" {
			t.Fatalf("failed listing after Reopen: %v", got)
		}
		again := claim(t, s, "ro", "", longTTL, Won)
		if err := s.Complete(ctx, "ro", again.Token, answer, longTTL, Journal{Attempt: attempt(200, AttemptAnswered, "")}); err != nil {
			t.Fatal(err)
		}
		if rec := lookup(t, s, "ro"); rec.State != StateAnswered || rec.AttemptCount != 2 || rec.Copies != 3 || rec.CopyOutcomes.Forwarded != 2 {
			t.Fatalf("after the redelivery: %+v", rec)
		}
	}},
	{"journal_attempts_bounded", func(t *testing.T, s journalStore) {
		ctx := ctxT(t)
		for i := range MaxAttempts + 3 {
			won := claim(t, s, "many", "", longTTL, Won)
			if err := s.Release(ctx, "many", won.Token, longTTL, Journal{Attempt: attempt(500+i, AttemptFailed, string(make([]byte, 2*MaxAttemptBody)))}); err != nil {
				t.Fatal(err)
			}
		}
		rec := lookup(t, s, "many")
		if rec.AttemptCount != MaxAttempts+3 || len(rec.Attempts) != MaxAttempts ||
			rec.Attempts[0].Status != 503 || len(rec.Attempts[0].Body) != MaxAttemptBody {
			t.Fatalf("attempts: count %d kept %d first %+v", rec.AttemptCount, len(rec.Attempts), rec.Attempts[0].Status)
		}
	}},
	{"journal_delete_forgets", func(t *testing.T, s journalStore) {
		ctx := ctxT(t)
		won := claim(t, s, "del", "", longTTL, Won)
		if err := s.Release(ctx, "del", won.Token, longTTL, Journal{Notification: testNotification, Attempt: attempt(500, AttemptFailed, "")}); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "del"); err != nil {
			t.Fatal(err)
		}
		won = claim(t, s, "del", "", longTTL, Won)
		if rec := lookup(t, s, "del"); rec.Notification != nil || rec.AttemptCount != 0 || len(rec.Attempts) != 0 || rec.Copies != 1 {
			t.Fatalf("a deleted key's journal came back: %+v", rec)
		}
		if err := s.Complete(ctx, "del", won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
	}},
	{"journal_list", func(t *testing.T, s journalStore) {
		ctx := ctxT(t)
		var answered, failed []string // in settle order
		for i := range 23 {
			scope := "alipay"
			if i%3 == 0 {
				scope = "stripe"
			}
			key := fmt.Sprintf("%s:k%02d", scope, i)
			won := claim(t, s, key, "", longTTL, Won)
			var err error
			switch i % 4 {
			case 0, 1:
				err = s.Complete(ctx, key, won.Token, answer, longTTL, Journal{})
				answered = append(answered, key)
			case 2:
				err = s.Release(ctx, key, won.Token, longTTL, Journal{Attempt: attempt(500, AttemptFailed, "")})
				failed = append(failed, key)
			}
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond) // distinct times: the order below is by time
		}
		slices.Reverse(answered)
		slices.Reverse(failed)
		// A listing carries the answer's status (a list's STATUS column).
		p, err := s.List(ctx, ListQuery{State: StateAnswered, Limit: 1000})
		if err != nil || len(p.Records) != len(answered) {
			t.Fatalf("answered: %d records, %v", len(p.Records), err)
		}
		for _, r := range p.Records {
			if r.Status != answer.Status {
				t.Fatalf("listed answered record %s: status %d, want %d", r.Key, r.Status, answer.Status)
			}
		}
		for _, limit := range []int{1, 4, 1000} {
			if got := listAll(t, s, ListQuery{State: StateAnswered, Limit: limit}); !slices.Equal(got, answered) {
				t.Fatalf("answered, limit %d: %v\nwant %v", limit, got, answered)
			}
			if got := listAll(t, s, ListQuery{State: StateFailed, Limit: limit}); !slices.Equal(got, failed) {
				t.Fatalf("failed, limit %d: %v\nwant %v", limit, got, failed)
			}
		}
		stripe := slices.DeleteFunc(slices.Clone(answered), func(k string) bool { return k[:6] != "stripe" })
		if got := listAll(t, s, ListQuery{State: StateAnswered, Scope: "stripe", Limit: 2}); !slices.Equal(got, stripe) {
			t.Fatalf("scope stripe: %v, want %v", got, stripe)
		}
		if got := listAll(t, s, ListQuery{State: StateAnswered, Prefix: "alipay:k0", Limit: 2}); len(got) == 0 || !slices.IsSortedFunc(got, func(a, b string) int { return 0 }) {
			t.Fatalf("prefix: %v", got)
		} else {
			for _, k := range got {
				if k[:9] != "alipay:k0" {
					t.Fatalf("prefix alipay:k0 listed %q", k)
				}
			}
		}
		inflight := listAll(t, s, ListQuery{State: StateInFlight, Limit: 3})
		if len(inflight) != 23-len(answered)-len(failed) {
			t.Fatalf("in flight: %v", inflight)
		}
		// Dead: failed past the window. All failed keys were first seen
		// within the last seconds: a window of 1h makes none dead, unless
		// the clock reads two hours later.
		window := func(string) time.Duration { return time.Hour }
		if got := listAll(t, s, ListQuery{State: StateDead, Window: window, Limit: 5}); len(got) != 0 {
			t.Fatalf("dead now: %v", got)
		}
		later := time.Now().Add(2 * time.Hour)
		if got := listAll(t, s, ListQuery{State: StateDead, Window: window, Now: later, Limit: 5}); !slices.Equal(got, failed) {
			t.Fatalf("dead later: %v, want %v", got, failed)
		}
		if got := listAll(t, s, ListQuery{State: StateFailed, Window: window, Now: later, Limit: 5}); len(got) != 0 {
			t.Fatalf("failed (not dead) later: %v", got)
		}
		// Since: only what changed at or after the newest failed key.
		newest := lookup(t, s, failed[0]).Changed
		if got := listAll(t, s, ListQuery{State: StateFailed, Since: newest, Limit: 5}); !slices.Equal(got, failed[:1]) {
			t.Fatalf("since: %v, want %v", got, failed[:1])
		}
		// A failed key answered later leaves the failed listing.
		won := claim(t, s, failed[0], "", longTTL, Won)
		if err := s.Complete(ctx, failed[0], won.Token, answer, longTTL, Journal{}); err != nil {
			t.Fatal(err)
		}
		if got := listAll(t, s, ListQuery{State: StateFailed, Limit: 2}); !slices.Equal(got, failed[1:]) {
			t.Fatalf("failed after one was answered: %v, want %v", got, failed[1:])
		}
		if got := listAll(t, s, ListQuery{State: StateAnswered, Limit: 1000}); got[0] != failed[0] {
			t.Fatalf("answered newest first: %v", got)
		}
		if _, err := s.List(ctx, ListQuery{State: "bogus"}); !errors.Is(err, ErrBadQuery) {
			t.Fatalf("unknown state: %v", err)
		}
		if _, err := s.List(ctx, ListQuery{State: StateAnswered, Cursor: "garbage"}); err == nil {
			t.Fatal("bad cursor accepted")
		}
	}},
}
