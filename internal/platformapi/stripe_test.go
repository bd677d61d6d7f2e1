package platformapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemgate/idemgate/internal/platformapi"
)

const (
	stripeKey    = "rk_test_51StandInKey0000wxyz"
	stripeSecret = "whsec_standin_5WbX5kEWLlfzsGNjH64I8lOO"
)

// endpoint is a webhook listener that keeps what reached it.
type endpoint struct {
	mu   sync.Mutex
	got  []*http.Request
	body [][]byte
	srv  *httptest.Server
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.got = append(e.got, r)
		e.body = append(e.body, b)
		e.mu.Unlock()
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) deliveries() ([]*http.Request, [][]byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*http.Request(nil), e.got...), append([][]byte(nil), e.body...)
}

func getJSON(t *testing.T, u, key string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v\n%s", u, err, data)
	}
	return resp.StatusCode
}

// TestStripeStandInListShape: the stand-in's pages decode as stripe-go's
// EventList and Event, newest first, paged by starting_after while
// has_more, within created[gte]/created[lt], nothing older than 30 days.
func TestStripeStandInListShape(t *testing.T) {
	now := time.Now()
	api := platformapi.NewStripe(stripeKey, "we_1", stripeSecret, "http://127.0.0.1:1/")
	for i := 0; i < 25; i++ {
		obj := fmt.Sprintf(`{"id": "pi_%d", "object": "payment_intent", "amount": %d, "currency": "usd", "metadata": {"order_id": "o-%d"}}`, i, 100+i, i)
		if err := api.Add(platformapi.StripeEvent(fmt.Sprintf("evt_%02d", i), "payment_intent.succeeded", now.Add(-time.Duration(i)*time.Minute), obj, "", 1)); err != nil {
			t.Fatal(err)
		}
	}
	old := platformapi.StripeEvent("evt_old", "payment_intent.succeeded", now.Add(-31*24*time.Hour), `{"id": "pi_old", "object": "payment_intent"}`, "", 1)
	if err := api.Add(old); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	// The window [now-20m, now-2m): evt_03 … evt_20, 18 events, in pages of 7.
	q := url.Values{"limit": {"7"}, "created[gte]": {fmt.Sprint(now.Add(-20 * time.Minute).Unix())},
		"created[lt]": {fmt.Sprint(now.Add(-2 * time.Minute).Unix())}}
	var ids []string
	pages := 0
	for {
		var list stripe.EventList
		if st := getJSON(t, srv.URL+"/v1/events?"+q.Encode(), stripeKey, &list); st != 200 {
			t.Fatalf("status %d", st)
		}
		pages++
		for _, e := range list.Data {
			if e.Object != "event" || e.Data == nil || e.Data.Object["id"] == nil || e.APIVersion != stripe.APIVersion {
				t.Fatalf("event shape: %+v", e)
			}
			if e.GetObjectValue("metadata", "order_id") == "" {
				t.Fatalf("%s: no metadata.order_id", e.ID)
			}
			ids = append(ids, e.ID)
		}
		if !list.HasMore {
			break
		}
		q.Set("starting_after", list.Data[len(list.Data)-1].ID)
	}
	var want []string
	for i := 3; i <= 20; i++ {
		want = append(want, fmt.Sprintf("evt_%02d", i))
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") || pages != 3 {
		t.Fatalf("%d pages: %v, want %v", pages, ids, want)
	}
	var all stripe.EventList
	getJSON(t, srv.URL+"/v1/events?limit=100", stripeKey, &all)
	if len(all.Data) != 25 || all.HasMore {
		t.Fatalf("everything: %d events, has_more %v (the 31-day-old one must be gone)", len(all.Data), all.HasMore)
	}
	var refused struct {
		Error struct{ Type, Message string }
	}
	if st := getJSON(t, srv.URL+"/v1/events", "rk_test_wrong0000abcd", &refused); st != 401 || !strings.Contains(refused.Error.Message, "Invalid API Key") {
		t.Fatalf("wrong key: %d %+v", st, refused)
	}
}

// TestStripeStandInRetry: a retry delivers the event to the endpoint
// signed as Stripe signs, accepted by stripe-go's webhook.ConstructEvent,
// counted, and its pending_webhooks is 0 afterwards.
func TestStripeStandInRetry(t *testing.T) {
	ep := newEndpoint(t)
	api := platformapi.NewStripe(stripeKey, "we_1", stripeSecret, ep.srv.URL)
	ev := platformapi.StripeEvent("evt_r", "payment_intent.succeeded", time.Now(), `{"id": "pi_r", "object": "payment_intent", "amount": 2000, "currency": "usd"}`, "", 1)
	if err := api.Add(ev); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	retry := func(endpoint string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/events/evt_r/retry", strings.NewReader(url.Values{"webhook_endpoint": {endpoint}}.Encode()))
		req.Header.Set("Authorization", "Bearer "+stripeKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := retry("we_other"); st != 400 {
		t.Fatalf("another endpoint: %d", st)
	}
	if st := retry("we_1"); st != 200 {
		t.Fatalf("retry: %d", st)
	}
	got, bodies := ep.deliveries()
	if len(got) != 1 || api.Resends("evt_r") != 1 || api.LastStatus("evt_r") != 200 {
		t.Fatalf("%d deliveries, %d resends", len(got), api.Resends("evt_r"))
	}
	e, err := webhook.ConstructEvent(bodies[0], got[0].Header.Get("Stripe-Signature"), stripeSecret)
	if err != nil {
		t.Fatalf("stripe-go refuses the delivery: %v", err)
	}
	if e.ID != "evt_r" || e.Type != "payment_intent.succeeded" || e.GetObjectValue("amount") != "2000" {
		t.Fatalf("delivered %+v", e)
	}
	if _, err := webhook.ConstructEvent(bodies[0], got[0].Header.Get("Stripe-Signature"), "whsec_other"); err == nil {
		t.Fatal("the delivery verifies with another secret")
	}
	var list stripe.EventList
	getJSON(t, srv.URL+"/v1/events", stripeKey, &list)
	if len(list.Data) != 1 || list.Data[0].PendingWebhooks != 0 {
		t.Fatalf("after a delivered retry: %+v", list.Data[0])
	}
}
