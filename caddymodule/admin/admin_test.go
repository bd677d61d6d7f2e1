package admin

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
)

// TestAdminInspectAndPurge: a key's record after a request, and a purge
// after which the next copy reaches the backend again.
func TestAdminInspectAndPurge(t *testing.T) {
	rs := redistest.Start(t)
	be := gatewaytest.NewBackend(t)
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.Addr(), "{extra}", "")

	// Keys with ":", "/", "{" and a "//" survive the trip through the path.
	for _, order := range []string{"ad-1", "a/b{c}", "x//y/../z"} {
		key := "demo:" + order
		gatewaytest.Notify(t, g.Base, order)
		gatewaytest.Notify(t, g.Base, order)
		gatewaytest.Notify(t, g.Base, order, "total_amount", "0.01") // a conflict

		var rec RecordView
		g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI(key), &rec)
		wantBody := "ok " + order
		if rec.Key != key || rec.State != "answered" || rec.Status != 200 || rec.Copies != 2 || rec.Conflicts != 1 ||
			rec.BodyCached == nil || !*rec.BodyCached || rec.BodySize == nil || *rec.BodySize != len(wantBody) || rec.Body != nil {
			t.Fatalf("record of %q: %+v", key, rec)
		}
		if rec.Store != "redis:"+rs.Addr() || len(rec.Fingerprint) != 64 || rec.FirstSeen.IsZero() ||
			rec.LastSeen.Before(rec.FirstSeen) || time.Until(rec.ExpiresAt) < 71*time.Hour {
			t.Errorf("record of %q: store, fingerprint or times wrong: %+v", key, rec)
		}
		if !slices.Contains(rec.HeaderNames, "X-Backend") || slices.Contains(rec.HeaderNames, "Set-Cookie") {
			t.Errorf("header names %v: want X-Backend and no Set-Cookie", rec.HeaderNames)
		}
		_, raw := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI(key))
		if strings.Contains(raw, "legacy") || strings.Contains(raw, `"body"`) {
			t.Errorf("inspect without ?body=1 shows header values or the body: %s", raw)
		}

		var withBody struct {
			Body string `json:"body"`
		}
		g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI(key)+"?body=1", &withBody)
		if b, _ := base64.StdEncoding.DecodeString(withBody.Body); string(b) != wantBody {
			t.Errorf("?body=1: body %q, want %q", b, wantBody)
		}

		var del DeletedView
		g.AdminJSON(t, http.MethodDelete, gatewaytest.KeyURI(key), &del)
		if !del.Deleted || del.State != "answered" || del.Copies != 2 {
			t.Errorf("DELETE answer: %+v", del)
		}
		if status, body := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI(key)); status != 404 || !strings.Contains(body, "no record") {
			t.Errorf("GET after purge: %d %s, want 404", status, body)
		}
		if status, _ := g.AdminDo(t, http.MethodDelete, gatewaytest.KeyURI(key)); status != 404 {
			t.Errorf("second DELETE: %d, want 404", status)
		}
		if r := gatewaytest.Notify(t, g.Base, order); r.Status != 200 || r.Replayed {
			t.Errorf("copy after purge: %d replayed=%v, want forwarded", r.Status, r.Replayed)
		}
		if got := be.Count(order); got != 2 {
			t.Errorf("backend ran %d times for %q, want 2 (before and after the purge)", got, order)
		}
	}
}

// TestAdminInFlight: a claim held by a slow backend is listed, paged, and
// gone once answered.
func TestAdminInFlight(t *testing.T) {
	rs := redistest.Start(t)
	be := gatewaytest.NewBackend(t)
	release := make(chan struct{})
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if strings.HasPrefix(order, "slow") {
			<-release
		}
		return 200, "ok " + order, 0
	})
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.Addr(), "{extra}", "")
	gatewaytest.Notify(t, g.Base, "done-1") // answered: never listed

	var wg sync.WaitGroup
	var once sync.Once
	defer once.Do(func() { close(release) })
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); gatewaytest.Notify(t, g.Base, fmt.Sprintf("slow-%d", i)) }()
	}
	want := []string{"demo:slow-0", "demo:slow-1", "demo:slow-2"}

	listAll := func(limit int) []string {
		var keys []string
		cursor := ""
		for range 100 {
			var page PageView
			g.AdminJSON(t, http.MethodGet, fmt.Sprintf("/idempotency/keys?state=in_flight&limit=%d&cursor=%s", limit, url.QueryEscape(cursor)), &page)
			if len(page.Keys) > limit {
				t.Fatalf("page of %d keys, limit %d", len(page.Keys), limit)
			}
			for _, k := range page.Keys {
				if k.State != "in_flight" || k.Copies != 1 || k.ExpiresAt.IsZero() || k.BodyCached != nil {
					t.Errorf("in-flight entry %+v", k)
				}
				keys = append(keys, k.Key)
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		slices.Sort(keys)
		return slices.Compact(keys)
	}
	gatewaytest.Eventually(t, 5*time.Second, "three claims in flight", func() bool { return slices.Equal(listAll(100), want) })
	if got := listAll(1); !slices.Equal(got, want) {
		t.Errorf("paged by 1: %v, want %v", got, want)
	}
	once.Do(func() { close(release) })
	wg.Wait()
	if got := listAll(100); len(got) != 0 {
		t.Errorf("in flight after the answers: %v, want none", got)
	}

	for _, c := range []struct{ uri, want string }{
		{"/idempotency/keys", "state must be"},
		{"/idempotency/keys?state=gone", "state must be"},
		{"/idempotency/keys?state=failed&since=yesterday", "RFC 3339"},
		{"/idempotency/keys?state=in_flight&limit=0", "limit must be"},
	} {
		if status, body := g.AdminDo(t, http.MethodGet, c.uri); status != 400 || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %s, want 400 %q", c.uri, status, body, c.want)
		}
	}
	if status, _ := g.AdminDo(t, http.MethodPost, "/idempotency/keys/demo:x"); status != 405 {
		t.Errorf("POST a key: %d, want 405", status)
	}
	if status, _ := g.AdminDo(t, http.MethodGet, "/idempotency/nope"); status != 404 {
		t.Errorf("GET an unknown route: %d, want 404", status)
	}
}

// TestAdminSeveralStores: with two stores loaded, ?store= picks one and
// its absence is a 400 naming them.
func TestAdminSeveralStores(t *testing.T) {
	rs := redistest.Start(t)
	be := gatewaytest.NewBackend(t)
	g := gatewaytest.StartGateway(t, `
	handle /a {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope a
			store memory
		}
		reverse_proxy {backend}
	}
	handle /b {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope b
			store redis {redis}
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr(), "{redis}", rs.Addr())
	gatewaytest.Post(t, g.Base+"/a", "application/x-www-form-urlencoded", "out_trade_no=1", nil)
	gatewaytest.Post(t, g.Base+"/b", "application/x-www-form-urlencoded", "out_trade_no=1", nil)

	var stores StoresView
	g.AdminJSON(t, http.MethodGet, "/idempotency/stores", &stores)
	redisID := "redis:" + rs.Addr()
	if !slices.Equal(stores.Stores, []string{"memory", redisID}) {
		t.Fatalf("stores: %v", stores.Stores)
	}
	status, body := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI("a:1"))
	if status != 400 || !strings.Contains(body, "memory") || !strings.Contains(body, redisID) {
		t.Errorf("no ?store with two stores: %d %s, want 400 listing both", status, body)
	}
	var rec RecordView
	g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("a:1")+"?store=memory", &rec)
	if rec.Store != "memory" || rec.State != "answered" {
		t.Errorf("a:1 in memory: %+v", rec)
	}
	g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("b:1")+"?store="+url.QueryEscape(redisID), &rec)
	if rec.Store != redisID || rec.State != "answered" {
		t.Errorf("b:1 in redis: %+v", rec)
	}
	if status, _ := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI("b:1")+"?store=memory"); status != 404 {
		t.Errorf("b:1 in memory: %d, want 404", status)
	}
	if status, body := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI("a:1")+"?store=nope"); status != 404 || !strings.Contains(body, "loaded: ") {
		t.Errorf("unknown store: %d %s, want 404 listing the loaded ones", status, body)
	}
}
