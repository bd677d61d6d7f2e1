package caddymodule

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// faultBackend is a raw backend for the fault suite: it counts how often
// each key ran (the work is done when the request is read) and, per hit,
// answers or breaks as a real backend does: it hangs up without answering,
// or aborts in the middle of its answer.
type faultBackend struct {
	t   testing.TB
	ln  net.Listener
	srv *http.Server

	mu   sync.Mutex
	hits map[string]int
	// served counts requests per client connection (remote address), so a
	// test can tell that a request came on a kept-alive, reused connection.
	served map[string]int
	reused map[string][]bool // per key, per hit: was the connection reused
	act    func(key string, n int) faultAction
	// arrived gets each hit's key (never blocks: tests that wait on it
	// size it).
	arrived chan string
}

// faultKind is how the backend answers one hit.
type faultKind int

const (
	faultAnswer faultKind = iota // a normal answer
	faultHangUp                  // read the request, do the work, close the connection: no answer at all
	faultAbort                   // headers and part of the body, then close
)

// faultAction is what the backend does for one hit.
type faultAction struct {
	kind   faultKind
	delay  time.Duration // work time before answering (or breaking)
	status int           // default 200
	body   string        // default "ok <key>"
	before func()        // runs after the work, just before the answer (or the break)
	after  func()        // runs once the whole answer is on the wire
}

func newFaultBackend(t testing.TB) *faultBackend {
	b := &faultBackend{t: t, hits: map[string]int{}, served: map[string]int{},
		reused: map[string][]bool{}, arrived: make(chan string, 1024)}
	b.act = func(string, int) faultAction { return faultAction{} }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.ln = ln
	b.srv = &http.Server{Handler: b}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

func (b *faultBackend) addr() string { return b.ln.Addr().String() }

// faultKey finds the key in any of the shapes the fault tests send: a
// query's order (a signed GET), an Idempotency-Key header, X-Order, or a
// form's out_trade_no.
func faultKey(r *http.Request, body []byte) string {
	if k := r.URL.Query().Get("order"); k != "" {
		return k
	}
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		return k
	}
	if k := r.Header.Get("X-Order"); k != "" {
		return k
	}
	v, _ := url.ParseQuery(string(body))
	return v.Get("out_trade_no")
}

func (b *faultBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	key := faultKey(r, body)
	b.mu.Lock()
	b.served[r.RemoteAddr]++
	reused := b.served[r.RemoteAddr] > 1
	b.hits[key]++
	n := b.hits[key]
	b.reused[key] = append(b.reused[key], reused)
	act := b.act
	b.mu.Unlock()
	select {
	case b.arrived <- key:
	default:
	}

	a := act(key, n)
	if a.delay > 0 {
		time.Sleep(a.delay) // the work goes on even if the gateway hangs up, as a real backend's does
	}
	if a.before != nil {
		a.before()
	}
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if a.body == "" {
		a.body = "ok " + key
	}
	switch a.kind {
	case faultHangUp:
		b.closeConn(w)
	case faultAbort:
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body[:len(a.body)/2])
		w.(http.Flusher).Flush()
		b.closeConn(w) // 1000 bytes promised, a few sent
	default:
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Backend", "fault")
		w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
		w.(http.Flusher).Flush()
		if a.after != nil {
			a.after()
		}
	}
}

// closeConn takes the connection from the server and closes it.
func (b *faultBackend) closeConn(w http.ResponseWriter) {
	c, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		b.t.Errorf("backend: hijack: %v", err)
		return
	}
	c.Close()
}

func (b *faultBackend) setAct(f func(key string, n int) faultAction) {
	b.mu.Lock()
	b.act = f
	b.mu.Unlock()
}

// count is how many times key ran.
func (b *faultBackend) count(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[key]
}

// reusedConn says whether the n-th (1-based) hit of key came on a
// connection that had served an earlier request.
func (b *faultBackend) reusedConn(key string, n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.reused[key]
	return n >= 1 && n <= len(r) && r[n-1]
}

// waitArrived waits until key reaches the backend.
func (b *faultBackend) waitArrived(t testing.TB, key string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case k := <-b.arrived:
			if k == key {
				return
			}
		case <-deadline:
			t.Fatalf("%s never reached the backend within %v", key, within)
		}
	}
}
