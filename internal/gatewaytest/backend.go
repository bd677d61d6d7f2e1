package gatewaytest

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Backend is a stand-in legacy backend: it counts how often each order
// (the X-Order header, else the form's out_trade_no) reached it and
// answers as the test tells it to.
type Backend struct {
	t   testing.TB
	srv *http.Server
	ln  net.Listener

	mu   sync.Mutex
	hits map[string]int
	// Total counts every request.
	Total atomic.Int64
	// answer decides the answer for the n-th (1-based) hit of an order.
	answer func(order string, n int, r *http.Request) (status int, body string, delay time.Duration)
}

// NewBackend starts a backend on a free loopback port.
func NewBackend(t testing.TB) *Backend { return NewBackendAt(t, "127.0.0.1:0") }

// NewBackendAt starts the backend on addr.
func NewBackendAt(t testing.TB, addr string) *Backend {
	b := &Backend{t: t, hits: map[string]int{}}
	b.answer = func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 200, "ok " + order, 0
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b.ln = ln
	b.srv = &http.Server{Handler: b}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

// Addr is the backend's host:port.
func (b *Backend) Addr() string { return b.ln.Addr().String() }

func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	order := r.Header.Get("X-Order")
	if order == "" {
		v, _ := url.ParseQuery(string(body))
		order = v.Get("out_trade_no")
	}
	b.mu.Lock()
	b.hits[order]++
	n := b.hits[order]
	answer := b.answer
	b.mu.Unlock()
	b.Total.Add(1)
	status, text, delay := answer(order, n, r)
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Backend", "legacy")
	w.Header().Set("Set-Cookie", "session=secret")
	w.WriteHeader(status)
	io.WriteString(w, text)
}

// Count is how often order reached the backend.
func (b *Backend) Count(order string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[order]
}

// SetAnswer replaces the answer: f decides the n-th (1-based) hit of an
// order's status, body and delay.
func (b *Backend) SetAnswer(f func(order string, n int, r *http.Request) (int, string, time.Duration)) {
	b.mu.Lock()
	b.answer = f
	b.mu.Unlock()
}
