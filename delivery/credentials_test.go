package delivery_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
)

// TestAsyncDeliveryKeepsCredentials: a backend behind Basic auth gets the
// Authorization (and Cookie) the platform's request carried on the async
// delivery, so an acked notification runs, once. The credentials are kept
// for the delivery only: the key's record, the admin API and, once the
// delivery is done, the whole Redis keyspace hold them nowhere.
func TestAsyncDeliveryKeepsCredentials(t *testing.T) {
	rs := redistest.StartAOF(t)
	const user, pass = "merchant", "s3cret-Pa55"
	var mu sync.Mutex
	runs, refused := map[string]int{}, 0
	var cookies []string
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		v, _ := url.ParseQuery(string(body))
		mu.Lock()
		defer mu.Unlock()
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			refused++
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		runs[v.Get("out_trade_no")]++
		cookies = append(cookies, r.Header.Get("Cookie"))
		io.WriteString(w, "ok")
	}))
	defer be.Close()
	g := gatewaytest.StartGateway(t, gatewaytest.AsyncRoute, "{store}", "store redis "+rs.Addr(), "{backend}", strings.TrimPrefix(be.URL, "http://"),
		"{extra}", "retry 100ms 200ms")

	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	hdr := http.Header{"Authorization": {auth}, "Cookie": {"session=s3cret-cookie"}}
	form := url.Values{"out_trade_no": {"auth-1"}, "total_amount": {"9.90"}}.Encode()
	if r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded", form, hdr); r.Status != 200 || r.Body != "success" {
		t.Fatalf("ack: %d %q", r.Status, r.Body)
	}
	gatewaytest.WaitAnswered(t, 10*time.Second, "demo:auth-1")
	mu.Lock()
	if runs["auth-1"] != 1 || refused != 0 || len(cookies) != 1 || cookies[0] != "session=s3cret-cookie" {
		t.Fatalf("backend: runs %v, refused %d, cookies %v; want one authenticated run with the cookie", runs, refused, cookies)
	}
	mu.Unlock()

	// Never shown, never journaled.
	rec := gatewaytest.Record(t, "demo:auth-1")
	if rec.Notification == nil {
		t.Fatal("no journaled notification")
	}
	for _, name := range []string{"Authorization", "Cookie"} {
		if v := rec.Notification.Header.Get(name); v != "" {
			t.Errorf("the journal kept %s: %q", name, v)
		}
	}
	status, body := g.AdminDo(t, http.MethodGet, "/idempotency/keys/demo:auth-1?body=1")
	if status != 200 || strings.Contains(body, "s3cret") || strings.Contains(body, base64.StdEncoding.EncodeToString([]byte(user+":"+pass))) {
		t.Fatalf("admin API: %d, shows the credentials: %s", status, body)
	}
	// Gone from the store with the queue entry.
	for _, secret := range []string{"s3cret-cookie", base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))} {
		if where := redisHolds(t, rs.Addr(), secret); where != "" {
			t.Errorf("after the delivery, Redis still holds %q in %s", secret, where)
		}
	}
}

// redisHolds names a key of the Redis at addr whose value contains s, or "".
func redisHolds(t *testing.T, addr, s string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		var vals []string
		switch typ, _ := c.Type(ctx, k).Result(); typ {
		case "string":
			v, _ := c.Get(ctx, k).Result()
			vals = []string{v}
		case "hash":
			m, _ := c.HGetAll(ctx, k).Result()
			for f, v := range m {
				vals = append(vals, f, v)
			}
		case "list":
			vals, _ = c.LRange(ctx, k, 0, -1).Result()
		case "set":
			vals, _ = c.SMembers(ctx, k).Result()
		case "zset":
			vals, _ = c.ZRange(ctx, k, 0, -1).Result()
		case "stream":
			msgs, _ := c.XRange(ctx, k, "-", "+").Result()
			for _, m := range msgs {
				for f, v := range m.Values {
					vals = append(vals, f, v.(string))
				}
			}
		}
		for _, v := range vals {
			if strings.Contains(v, s) {
				return k
			}
		}
	}
	return ""
}
