package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/stripe"
)

// replayWatch is a transport that keeps each answer's Idempotent-Replayed.
type replayWatch struct {
	mu       sync.Mutex
	replayed []string
}

func (w *replayWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		w.mu.Lock()
		w.replayed = append(w.replayed, resp.Header.Get("Idempotent-Replayed"))
		w.mu.Unlock()
	}
	return resp, err
}

// TestStripeResendThroughGate: Stripe's retry, asked through the read API
// of a local Stripe stand-in, delivers the event Stripe-signed to a
// running gateway route (platform stripe, its whsec secret): the backend
// runs it once; a second resend is replayed and the backend still ran it
// once. The gateway re-signs nothing: the stand-in signs with stripe-go.
func TestStripeResendThroughGate(t *testing.T) {
	testenv.Slow(t, "real module test")
	be := newBackend(t)
	g := startGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret `+testStripeSecret+`
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())

	watch := &replayWatch{}
	api := platformapi.NewStripe("rk_test_51GateResend000000wxyz", "we_gate", testStripeSecret, g.base+"/stripe")
	api.Client = &http.Client{Timeout: 10 * time.Second, Transport: watch}
	if err := api.Add(platformapi.StripeEvent("evt_missed", "payment_intent.succeeded", time.Now().Add(-time.Hour),
		`{"id": "pi_missed", "object": "payment_intent", "amount": 2500, "currency": "usd", "metadata": {"order_id": "o-77"}}`, "", 1)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	v, err := stripe.NewReadAPI(keying.APIConfig{BaseURL: srv.URL, Key: []byte("rk_test_51GateResend000000wxyz"), Merchant: "we_gate"})
	if err != nil {
		t.Fatal(err)
	}
	l := v.(keying.EventLister)
	evs, err := l.Events(context.Background(), time.Now().Add(-2*time.Hour), time.Now(), 0)
	if err != nil || len(evs) != 1 || evs[0].Delivered || evs[0].MerchantRef != "o-77" {
		t.Fatalf("listed %+v (err %v)", evs, err)
	}

	if err := l.Resend(context.Background(), "evt_missed"); err != nil {
		t.Fatal(err)
	}
	if st := api.LastStatus("evt_missed"); st != 200 || be.totalHits() != 1 {
		t.Fatalf("first resend: the gate answered %d, the backend ran %d times", st, be.totalHits())
	}
	if err := l.Resend(context.Background(), "evt_missed"); err != nil {
		t.Fatal(err)
	}
	watch.mu.Lock()
	replayed := append([]string(nil), watch.replayed...)
	watch.mu.Unlock()
	if st := api.LastStatus("evt_missed"); st != 200 || be.totalHits() != 1 || len(replayed) != 2 || replayed[0] != "" || replayed[1] != "true" {
		t.Fatalf("second resend: the gate answered %d (replayed %q), the backend ran %d times", st, replayed, be.totalHits())
	}
	if api.Resends("evt_missed") != 2 {
		t.Fatalf("%d resends", api.Resends("evt_missed"))
	}
	evs, err = l.Events(context.Background(), time.Now().Add(-2*time.Hour), time.Now(), 0)
	if err != nil || len(evs) != 1 || !evs[0].Delivered {
		t.Fatalf("after the delivery: %+v (err %v)", evs, err)
	}
}
