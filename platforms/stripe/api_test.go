package stripe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/keying"
)

const (
	apiKey    = "rk_test_51ReadApiKey00000tuvw"
	apiSecret = "whsec_readapi_test_5WbX5kEWLlfzs"
)

// readAPI is the client NewReadAPI builds against base.
func readAPI(t *testing.T, base, key, endpoint string, client *http.Client) keying.EventLister {
	t.Helper()
	v, err := NewReadAPI(keying.APIConfig{BaseURL: base, Key: []byte(key), Merchant: endpoint, HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	l, ok := v.(keying.EventLister)
	if !ok {
		t.Fatalf("%T is no EventLister", v)
	}
	return l
}

// counted serves h, counting requests.
func counted(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestReadAPIEventsPagesWindow: Events pages through Stripe's list
// (starting_after while has_more, 100 a page) within [since, until),
// newest first, and stops at limit.
func TestReadAPIEventsPagesWindow(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	api := platformapi.NewStripe(apiKey, "we_1", apiSecret, "http://127.0.0.1:1/")
	for i := 0; i < 260; i++ {
		obj := fmt.Sprintf(`{"id": "pi_%d", "object": "payment_intent", "amount": %d, "currency": "usd"}`, i, 100+i)
		if err := api.Add(platformapi.StripeEvent(fmt.Sprintf("evt_%03d", i), "payment_intent.succeeded", now.Add(-time.Duration(i)*time.Minute), obj, "", 1)); err != nil {
			t.Fatal(err)
		}
	}
	srv, calls := counted(t, api)
	l := readAPI(t, srv.URL, apiKey, "", nil)

	// [now-230m, now-10m): evt_011 … evt_230, 220 events over 3 pages.
	got, err := l.Events(context.Background(), now.Add(-230*time.Minute), now.Add(-10*time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 220 || calls.Load() != 3 {
		t.Fatalf("%d events in %d calls, want 220 in 3", len(got), calls.Load())
	}
	for i, e := range got {
		if want := fmt.Sprintf("evt_%03d", i+11); e.ID != want {
			t.Fatalf("event %d is %s, want %s (newest first, no gap, no repeat)", i, e.ID, want)
		}
		if e.At.Before(now.Add(-230*time.Minute)) || !e.At.Before(now.Add(-10*time.Minute)) {
			t.Fatalf("%s at %v is outside the window", e.ID, e.At)
		}
	}
	calls.Store(0)
	got, err = l.Events(context.Background(), now.Add(-230*time.Minute), now.Add(-10*time.Minute), 150)
	if err != nil || len(got) != 150 || got[149].ID != "evt_160" || calls.Load() != 2 {
		t.Fatalf("limit 150: %d events (err %v) in %d calls", len(got), err, calls.Load())
	}
}

// TestReadAPIMoney: each event's money is what the Stripe preset reads
// from it as a notification, a charge.refunded's the refund it made (over
// previous_attributes); its object, merchant order and delivery.
func TestReadAPIMoney(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	api := platformapi.NewStripe(apiKey, "we_1", apiSecret, "http://127.0.0.1:1/")
	add := func(ev []byte) {
		if err := api.Add(ev); err != nil {
			t.Fatal(err)
		}
	}
	add(platformapi.StripeEvent("evt_pi", "payment_intent.succeeded", now.Add(-5*time.Minute),
		`{"id": "pi_1", "object": "payment_intent", "amount": 1999, "currency": "usd", "metadata": {"order_id": "order-7"}}`, "", 0))
	add(platformapi.StripeEvent("evt_jpy", "charge.succeeded", now.Add(-4*time.Minute),
		`{"id": "ch_2", "object": "charge", "amount": 500, "currency": "jpy", "payment_intent": "pi_2"}`, "", 1))
	add(platformapi.StripeEvent("evt_ref", "charge.refunded", now.Add(-3*time.Minute),
		`{"id": "ch_3", "object": "charge", "amount": 5000, "amount_refunded": 3000, "currency": "eur"}`, `{"amount_refunded": 1000}`, 1))
	add(platformapi.StripeEvent("evt_ref1", "charge.refunded", now.Add(-2*time.Minute),
		`{"id": "ch_4", "object": "charge", "amount": 5000, "amount_refunded": 1200, "currency": "eur"}`, "", 1))
	add(platformapi.StripeEvent("evt_cus", "customer.created", now.Add(-1*time.Minute), `{"id": "cus_5", "object": "customer"}`, "", 1))
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	got, err := readAPI(t, srv.URL, apiKey, "", nil).Events(context.Background(), now.Add(-time.Hour), now, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []keying.PlatformEvent{
		{ID: "evt_cus", Type: "customer.created", Object: "cus_5", At: now.Add(-time.Minute)},
		{ID: "evt_ref1", Type: "charge.refunded", Object: "ch_4", At: now.Add(-2 * time.Minute), Money: keying.Money{Amount: "12.00", Currency: "EUR"}},
		{ID: "evt_ref", Type: "charge.refunded", Object: "ch_3", At: now.Add(-3 * time.Minute), Money: keying.Money{Amount: "20.00", Currency: "EUR"}},
		{ID: "evt_jpy", Type: "charge.succeeded", Object: "ch_2", At: now.Add(-4 * time.Minute), Money: keying.Money{Amount: "500", Currency: "JPY"}},
		{ID: "evt_pi", Type: "payment_intent.succeeded", Object: "pi_1", MerchantRef: "order-7", At: now.Add(-5 * time.Minute),
			Money: keying.Money{Amount: "19.99", Currency: "USD"}, Delivered: true},
	}
	if len(got) != len(want) {
		t.Fatalf("%d events: %+v", len(got), got)
	}
	for i := range want {
		if g := got[i]; g.ID != want[i].ID || g.Type != want[i].Type || g.Object != want[i].Object || g.MerchantRef != want[i].MerchantRef ||
			!g.At.Equal(want[i].At) || g.Money != want[i].Money || g.Delivered != want[i].Delivered {
			t.Errorf("event %d:\n got  %+v\n want %+v", i, g, want[i])
		}
	}
}

// TestReadAPIResend: Resend asks Stripe's retry for the endpoint (as
// Stripe CLI's `events resend --webhook-endpoint`), and the delivery
// reaches the endpoint signed so that stripe-go's webhook.ConstructEvent
// accepts it. Without the endpoint's id nothing is asked.
func TestReadAPIResend(t *testing.T) {
	var mu sync.Mutex
	var sigs []string
	var bodies [][]byte
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		sigs, bodies = append(sigs, r.Header.Get("Stripe-Signature")), append(bodies, b)
		mu.Unlock()
	}))
	t.Cleanup(ep.Close)
	api := platformapi.NewStripe(apiKey, "we_gate", apiSecret, ep.URL)
	if err := api.Add(platformapi.StripeEvent("evt_miss", "payment_intent.succeeded", time.Now().Add(-time.Hour),
		`{"id": "pi_m", "object": "payment_intent", "amount": 4200, "currency": "usd"}`, "", 1)); err != nil {
		t.Fatal(err)
	}
	srv, calls := counted(t, api)

	if err := readAPI(t, srv.URL, apiKey, "", nil).Resend(context.Background(), "evt_miss"); err == nil || calls.Load() != 0 {
		t.Fatalf("no endpoint: %v, %d calls", err, calls.Load())
	}
	l := readAPI(t, srv.URL, apiKey, "we_gate", nil)
	if err := l.Resend(context.Background(), "evt_miss"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || api.Resends("evt_miss") != 1 {
		t.Fatalf("%d deliveries, %d resends", len(bodies), api.Resends("evt_miss"))
	}
	e, err := webhook.ConstructEvent(bodies[0], sigs[0], apiSecret)
	if err != nil {
		t.Fatalf("stripe-go refuses the resent event: %v", err)
	}
	if e.ID != "evt_miss" || e.GetObjectValue("id") != "pi_m" {
		t.Fatalf("resent %+v", e)
	}
	if err := l.Resend(context.Background(), "evt_none"); err == nil || errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("unknown event: %v", err)
	}
}

// TestReadAPIRefused: a key Stripe does not accept, or one lacking the
// permission, is keying.ErrAPIRefused naming what Stripe said (the
// permission) and never the key.
func TestReadAPIRefused(t *testing.T) {
	api := platformapi.NewStripe(apiKey, "we_1", apiSecret, "http://127.0.0.1:1/")
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	const wrong = "rk_test_51WrongKey000000abcd"
	_, err := readAPI(t, srv.URL, wrong, "we_1", nil).Events(context.Background(), time.Now().Add(-time.Hour), time.Now(), 0)
	if !errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "abcd") {
		t.Fatalf("wrong key: %v", err)
	}
	api.Lacking = []string{"rak_event_read", "rak_event_write"}
	l := readAPI(t, srv.URL, apiKey, "we_1", nil)
	_, err = l.Events(context.Background(), time.Now().Add(-time.Hour), time.Now(), 0)
	if !errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "rak_event_read") || strings.Contains(err.Error(), "tuvw") {
		t.Fatalf("no Events: Read: %v", err)
	}
	err = l.Resend(context.Background(), "evt_x")
	if !errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "rak_event_write") || strings.Contains(err.Error(), apiKey) {
		t.Fatalf("no Events: Write: %v", err)
	}
}

// TestReadAPIDownOrSlow: an API that is down is an error (not a refusal);
// a 5xx names its status; a slow one is cut by the client's timeout.
func TestReadAPIDownOrSlow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	_, err = readAPI(t, closed, apiKey, "", nil).Events(context.Background(), time.Now().Add(-time.Hour), time.Now(), 0)
	if err == nil || errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("down: %v", err)
	}

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		io.WriteString(w, `{"error": {"type": "api_error", "message": "Stripe is unavailable"}}`)
	}))
	t.Cleanup(broken.Close)
	_, err = readAPI(t, broken.URL, apiKey, "", nil).Events(context.Background(), time.Time{}, time.Time{}, 0)
	if err == nil || errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503: %v", err)
	}

	done := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(done) }) // runs first: the handler returns, Close does not wait
	start := time.Now()
	err = readAPI(t, slow.URL, apiKey, "we_1", &http.Client{Timeout: 300 * time.Millisecond}).Resend(context.Background(), "evt_x")
	if err == nil || !strings.Contains(err.Error(), "timed out") || time.Since(start) > 5*time.Second {
		t.Fatalf("slow: %v after %v", err, time.Since(start))
	}
}
