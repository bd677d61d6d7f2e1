package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/examples/legacy"
)

// TestExitStatus: storm exits 0 only when every copy got a 2xx and the
// backend ran at most once; one error status among the answers is a failure.
func TestExitStatus(t *testing.T) {
	var hits atomic.Int64
	// failNth answers 500 to the n-th request (0: never).
	target := func(failNth int64) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if n := hits.Add(1); n == failNth {
				http.Error(w, "fail", http.StatusInternalServerError)
				return
			}
			io.WriteString(w, "success")
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	for _, tc := range []struct {
		name    string
		failNth int64
		want    int
	}{
		{"all 2xx", 0, 0},
		{"one 500", 7, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			srv := target(tc.failNth)
			code, err := run(srv.URL, 20, "o-test", "", 10*time.Second)
			if err != nil || code != tc.want {
				t.Fatalf("run: exit %d (%v), want %d", code, err, tc.want)
			}
			if hits.Load() != 20 {
				t.Fatalf("the target got %d copies, want 20", hits.Load())
			}
		})
	}

	// Straight to a backend without idempotency: it renews 20 times.
	b := legacy.New(legacy.Config{Log: io.Discard})
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	code, err := run(srv.URL+"/notify", 20, "o-direct", srv.URL, 10*time.Second)
	if err != nil || code != 1 || b.Renewals("o-direct") != 20 {
		t.Fatalf("storm straight at the backend: exit %d (%v), %d renewals; want exit 1 after 20", code, err, b.Renewals("o-direct"))
	}
}

// TestNoAnswer: a target that is not there is a failure, not a success.
func TestNoAnswer(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	code, err := run(url, 3, "o-none", "", 5*time.Second)
	if err != nil || code != 1 {
		t.Fatalf("run against a closed port: exit %d (%v), want 1", code, err)
	}
}
