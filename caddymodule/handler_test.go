package caddymodule

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/internal/faultystore"
	"github.com/idemgate/idemgate/store"
)

// TestWaitFailureNeverForwards: when waiting on an in-flight key fails
// (the store's notifications broke), the copy is refused with 503 even
// under `on_store_error pass`: the key is known to be at the backend, and
// forwarding the copy could run the backend twice.
func TestWaitFailureNeverForwards(t *testing.T) {
	h := provisionHandler(t, &Handler{
		Key: "k:{idempotency.form.out_trade_no}", Store: &StoreConfig{Type: "memory"}, OnStoreError: "pass",
	})
	faulty := faultystore.NewFaulty(h.store)
	h.store = faulty
	faulty.SetFail(errors.New("pub/sub connection lost"), faultystore.OpWait)

	var calls atomic.Int32
	release := make(chan struct{})
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		calls.Add(1)
		<-release
		_, err := io.WriteString(w, "success")
		return err
	})
	first := make(chan error, 1)
	go func() {
		w, r := benchRequest("out_trade_no=wf-1")
		first <- h.ServeHTTP(w, r, next)
	}()
	eventually(t, 5*time.Second, "the first copy at the backend", func() bool { return calls.Load() == 1 })

	w, r := benchRequest("out_trade_no=wf-1")
	err := h.ServeHTTP(w, r, next)
	var he caddyhttp.HandlerError
	if !errors.As(err, &he) || he.StatusCode != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("copy whose wait failed: got %v (Retry-After %q), want 503 with Retry-After", err, w.Header().Get("Retry-After"))
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("backend ran %d times, want 1", n)
	}
}

// TestStoreDownPassForwards: with the store failing on claim, `pass`
// forwards unprotected and `fail_closed` refuses with 503; neither claims.
func TestStoreDownPolicies(t *testing.T) {
	for _, policy := range []string{"pass", "fail_closed"} {
		t.Run(policy, func(t *testing.T) {
			h := provisionHandler(t, &Handler{
				Key: "k:{idempotency.form.out_trade_no}", Store: &StoreConfig{Type: "memory"}, OnStoreError: policy,
			})
			faulty := faultystore.NewFaulty(h.store)
			h.store = faulty
			faulty.SetFail(errors.New("connection refused"), faultystore.OpClaim)
			var calls atomic.Int32
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				calls.Add(1)
				_, err := io.WriteString(w, "success")
				return err
			})
			w, r := benchRequest("out_trade_no=sd-1")
			err := h.ServeHTTP(w, r, next)
			if policy == "pass" {
				if err != nil || calls.Load() != 1 || w.Body.String() != "success" {
					t.Fatalf("pass: got %v, %d backend calls, body %q; want the backend's answer", err, calls.Load(), w.Body.String())
				}
			} else {
				var he caddyhttp.HandlerError
				if !errors.As(err, &he) || he.StatusCode != http.StatusServiceUnavailable || calls.Load() != 0 {
					t.Fatalf("fail_closed: got %v and %d backend calls, want 503 and none", err, calls.Load())
				}
			}
			faulty.Reset()
			if _, err := faulty.Lookup(t.Context(), "k:sd-1"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the failed claim left a record behind: %v", err)
			}
		})
	}
}
