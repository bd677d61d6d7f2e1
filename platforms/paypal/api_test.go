package paypal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

const (
	apiClientID = "AZreadapiClientId"
	apiSecret   = "EHreadapiSecretValue"
	apiWebhook  = "WH-READAPI-1"
)

func readAPI(t *testing.T, base, key, webhookID string, client *http.Client, now func() time.Time) keying.EventLister {
	t.Helper()
	v, err := NewReadAPI(keying.APIConfig{BaseURL: base, Key: []byte(key), Merchant: webhookID, HTTPClient: client, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	l, ok := v.(keying.EventLister)
	if !ok {
		t.Fatalf("%T is no EventLister", v)
	}
	return l
}

// standIn is a PayPal stand-in delivering to deliverTo, served and
// counting requests.
func standIn(t *testing.T, deliverTo string) (*platformapi.PayPal, *httptest.Server, *atomic.Int64) {
	key, _ := platformtest.Keys(t)
	api := &platformapi.PayPal{ClientID: apiClientID, Secret: apiSecret, URL: deliverTo,
		Signer: signer.PayPal{Key: key, WebhookID: apiWebhook}}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return api, srv, &n
}

func capture(id, typ string, at time.Time, resource string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"event_version":"1.0","create_time":%q,"resource_type":"capture","event_type":%q,"resource":%s}`,
		id, at.UTC().Format(time.RFC3339), typ, resource))
}

// TestReadAPIEventsPagesWindow: Events takes a token once, pages through
// PayPal's list by its next link (on the configured API, whatever host
// the link names) within [since, until), and stops at limit.
func TestReadAPIEventsPagesWindow(t *testing.T) {
	api, srv, calls := standIn(t, "http://127.0.0.1:1/")
	now := time.Now().UTC().Truncate(time.Second)
	for i := 0; i < 700; i++ {
		res := fmt.Sprintf(`{"id":"CAP%d","amount":{"currency_code":"USD","value":"1.00"}}`, i)
		if err := api.Add(capture(fmt.Sprintf("WH-%03d", i), "PAYMENT.CAPTURE.COMPLETED", now.Add(-time.Duration(i)*time.Minute), res)); err != nil {
			t.Fatal(err)
		}
	}
	l := readAPI(t, srv.URL, apiClientID+":"+apiSecret, "", nil, nil)
	// [now-660m, now-10m): WH-011 … WH-660, 650 events over 3 pages.
	got, err := l.Events(context.Background(), now.Add(-660*time.Minute), now.Add(-10*time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 650 || calls.Load() != 1+3 {
		t.Fatalf("%d events in %d calls, want 650 in a token and 3 pages", len(got), calls.Load())
	}
	for i, e := range got {
		if want := fmt.Sprintf("WH-%03d", i+11); e.ID != want {
			t.Fatalf("event %d is %s, want %s", i, e.ID, want)
		}
	}
	got, err = l.Events(context.Background(), now.Add(-660*time.Minute), now.Add(-10*time.Minute), 320)
	if err != nil || len(got) != 320 || got[319].ID != "WH-330" || api.Tokens() != 1 {
		t.Fatalf("limit 320: %d events (err %v), %d tokens", len(got), err, api.Tokens())
	}
}

// TestReadAPIToken: the token is kept until shortly before it expires,
// then asked for anew.
func TestReadAPIToken(t *testing.T) {
	api, srv, _ := standIn(t, "http://127.0.0.1:1/")
	api.TokenTTL = 2 * time.Hour
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	api.Now = now
	l := readAPI(t, srv.URL, apiClientID+":"+apiSecret, "", nil, now)
	for i := 0; i < 3; i++ {
		if _, err := l.Events(context.Background(), time.Time{}, time.Time{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if api.Tokens() != 1 {
		t.Fatalf("%d tokens for three calls", api.Tokens())
	}
	mu.Lock()
	clock = clock.Add(2*time.Hour - 30*time.Second)
	mu.Unlock()
	if _, err := l.Events(context.Background(), time.Time{}, time.Time{}, 0); err != nil || api.Tokens() != 2 {
		t.Fatalf("near expiry: %v, %d tokens", err, api.Tokens())
	}
}

// TestReadAPIMoney: each event's money is what the PayPal preset reads
// from it as a notification; its object, merchant order and time.
func TestReadAPIMoney(t *testing.T) {
	api, srv, _ := standIn(t, "http://127.0.0.1:1/")
	now := time.Now().UTC().Truncate(time.Second)
	for _, ev := range [][]byte{
		capture("WH-CAP", "PAYMENT.CAPTURE.COMPLETED", now.Add(-3*time.Minute),
			`{"id":"CAP1","amount":{"currency_code":"USD","value":"10.50"},"invoice_id":"order-9","custom_id":"c-9"}`),
		capture("WH-REF", "PAYMENT.CAPTURE.REFUNDED", now.Add(-2*time.Minute),
			`{"id":"REF1","amount":{"currency_code":"EUR","value":"2.00"},"custom_id":"order-8"}`),
		capture("WH-JPY", "PAYMENT.CAPTURE.COMPLETED", now.Add(-1*time.Minute), `{"id":"CAP3","amount":{"currency_code":"JPY","value":"500"}}`),
		capture("WH-ORD", "CHECKOUT.ORDER.APPROVED", now, `{"id":"ORD4","status":"APPROVED"}`),
	} {
		if err := api.Add(ev); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readAPI(t, srv.URL, apiClientID+":"+apiSecret, "", nil, nil).Events(context.Background(), now.Add(-time.Hour), now.Add(time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []keying.PlatformEvent{
		{ID: "WH-ORD", Type: "CHECKOUT.ORDER.APPROVED", Object: "ORD4", At: now},
		{ID: "WH-JPY", Type: "PAYMENT.CAPTURE.COMPLETED", Object: "CAP3", At: now.Add(-time.Minute), Money: keying.Money{Amount: "500", Currency: "JPY"}},
		{ID: "WH-REF", Type: "PAYMENT.CAPTURE.REFUNDED", Object: "REF1", MerchantRef: "order-8", At: now.Add(-2 * time.Minute), Money: keying.Money{Amount: "2.00", Currency: "EUR"}},
		{ID: "WH-CAP", Type: "PAYMENT.CAPTURE.COMPLETED", Object: "CAP1", MerchantRef: "order-9", At: now.Add(-3 * time.Minute), Money: keying.Money{Amount: "10.50", Currency: "USD"}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d events: %+v", len(got), got)
	}
	for i := range want {
		if g := got[i]; g.ID != want[i].ID || g.Type != want[i].Type || g.Object != want[i].Object || g.MerchantRef != want[i].MerchantRef ||
			!g.At.Equal(want[i].At) || g.Money != want[i].Money || g.Delivered {
			t.Errorf("event %d:\n got  %+v\n want %+v", i, g, want[i])
		}
	}
}

// TestReadAPIResend: Resend names the route's webhook, and the delivery
// reaches the listener signed so that the PayPal preset, with PayPal's
// certificate, verifies it. Without the webhook id nothing is asked.
func TestReadAPIResend(t *testing.T) {
	var mu sync.Mutex
	var hdrs []http.Header
	var bodies [][]byte
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hdrs, bodies = append(hdrs, r.Header.Clone()), append(bodies, b)
		mu.Unlock()
	}))
	t.Cleanup(ep.Close)
	api, srv, calls := standIn(t, ep.URL)
	if err := api.Add(capture("WH-MISS", "PAYMENT.CAPTURE.COMPLETED", time.Now().Add(-time.Hour),
		`{"id":"CAPM","amount":{"currency_code":"USD","value":"42.00"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := readAPI(t, srv.URL, apiClientID+":"+apiSecret, "", nil, nil).Resend(context.Background(), "WH-MISS"); err == nil || calls.Load() != 0 {
		t.Fatalf("no webhook id: %v, %d calls", err, calls.Load())
	}
	l := readAPI(t, srv.URL, apiClientID+":"+apiSecret, apiWebhook, nil, nil)
	if err := l.Resend(context.Background(), "WH-MISS"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || api.Resends("WH-MISS") != 1 {
		t.Fatalf("%d deliveries, %d resends", len(bodies), api.Resends("WH-MISS"))
	}
	key, _ := platformtest.Keys(t)
	p, err := New(Config{WebhookID: apiWebhook,
		Certificates: [][]byte{platformtest.Certificate(t, key, big.NewInt(11), "messageverificationcerts.paypal.com")}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Verify(&keying.Request{Method: "POST", Header: hdrs[0], Body: bodies[0], Now: time.Now()})
	if err != nil {
		t.Fatalf("the preset refuses the resent event: %v", err)
	}
	if n.Key != "WH-MISS" || n.Money != (keying.Money{Amount: "42.00", Currency: "USD"}) {
		t.Fatalf("resent %s %+v", n.Key, n.Money)
	}
	if err := l.Resend(context.Background(), "WH-NONE"); err == nil || errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("unknown event: %v", err)
	}
}

// TestReadAPIRefused: credentials PayPal does not accept, or a call the
// app may not make, are keying.ErrAPIRefused, never naming the secret.
func TestReadAPIRefused(t *testing.T) {
	api, srv, _ := standIn(t, "http://127.0.0.1:1/")
	_, err := readAPI(t, srv.URL, apiClientID+":EHwrongSecret", apiWebhook, nil, nil).Events(context.Background(), time.Time{}, time.Time{}, 0)
	if !errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "EHwrongSecret") {
		t.Fatalf("wrong secret: %v", err)
	}
	api.Lacking = []string{"list", "resend"}
	l := readAPI(t, srv.URL, apiClientID+":"+apiSecret, apiWebhook, nil, nil)
	if _, err := l.Events(context.Background(), time.Time{}, time.Time{}, 0); !errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "NOT_AUTHORIZED") {
		t.Fatalf("list not allowed: %v", err)
	}
	if err := l.Resend(context.Background(), "WH-X"); !errors.Is(err, keying.ErrAPIRefused) || strings.Contains(err.Error(), apiSecret) {
		t.Fatalf("resend not allowed: %v", err)
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
	_, err = readAPI(t, closed, apiClientID+":"+apiSecret, "", nil, nil).Events(context.Background(), time.Time{}, time.Time{}, 0)
	if err == nil || errors.Is(err, keying.ErrAPIRefused) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("down: %v", err)
	}
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		io.WriteString(w, `{"name":"SERVICE_UNAVAILABLE","message":"Service Unavailable."}`)
	}))
	t.Cleanup(broken.Close)
	_, err = readAPI(t, broken.URL, apiClientID+":"+apiSecret, "", nil, nil).Events(context.Background(), time.Time{}, time.Time{}, 0)
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
	err = readAPI(t, slow.URL, apiClientID+":"+apiSecret, apiWebhook, &http.Client{Timeout: 300 * time.Millisecond}, nil).Resend(context.Background(), "WH-X")
	if err == nil || !strings.Contains(err.Error(), "timed out") || time.Since(start) > 5*time.Second {
		t.Fatalf("slow: %v after %v", err, time.Since(start))
	}
}
