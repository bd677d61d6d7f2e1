package caddymodule

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestAlert: each event reaches the alert endpoint as exactly one JSON
// POST (a failed notification, a fingerprint conflict), and only the
// events asked for.
func TestAlert(t *testing.T) {
	var mu sync.Mutex
	var got []alertEvent
	ops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e alertEvent
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &e); err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("alert request: %s %q %v", r.Method, b, err)
		}
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	}))
	t.Cleanup(ops.Close)
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "bad" {
			return 500, "no", 0
		}
		return 200, "ok", 0
	})
	base := startCaddy(t, notifyRoute, "{store}", "store memory", "{backend}", be.addr(),
		"{extra}", "alert "+ops.URL+" failed conflict")
	if r := notify(t, base, "bad"); r.status != 500 {
		t.Fatalf("failing copy: %+v", r)
	}
	notify(t, base, "good")
	if r := notify(t, base, "good", "total_amount", "1.00"); r.status != 422 {
		t.Fatalf("conflict: %+v", r)
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	eventually(t, 10*time.Second, "two alerts", func() bool { return count() >= 2 })
	// One more event after them, so that a duplicate of the first two
	// would have arrived before it (one worker, in order).
	if r := notify(t, base, "bad"); r.status != 500 {
		t.Fatalf("failing copy: %+v", r)
	}
	eventually(t, 10*time.Second, "three alerts", func() bool { return count() >= 3 })
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[0].Event != "idempotency.failed" || got[0].Key != "demo:bad" || got[0].Status != 500 ||
		got[1].Event != "idempotency.conflict" || got[1].Key != "demo:good" || got[2].Event != "idempotency.failed" {
		t.Fatalf("alerts: %+v", got)
	}
	if got[0].Attempts != 1 || got[2].Attempts != 2 {
		t.Fatalf("attempt counts: %d then %d, want 1 then 2", got[0].Attempts, got[2].Attempts)
	}
	if got[0].Scope != "demo" || got[0].Platform != "generic" || got[0].Time.IsZero() {
		t.Fatalf("alert fields: %+v", got[0])
	}
}

// TestAlertDeadEndpoint: an alert endpoint that accepts connections and
// never answers does not slow a request, however many events queue up.
func TestAlertDeadEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	hold := make(chan struct{})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { defer conns.Done(); <-hold; c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); close(hold); conns.Wait() })
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) { return 503, "down", 0 })
	base := startCaddy(t, notifyRoute, "{store}", "store memory", "{backend}", be.addr(),
		"{extra}", "alert http://"+ln.Addr().String()+"/hook")
	var slowest time.Duration
	for i := range 30 {
		start := time.Now()
		if r := notify(t, base, "dead-"+itoa(i)); r.status != 503 {
			t.Fatalf("copy %d: %+v", i, r)
		}
		slowest = max(slowest, time.Since(start))
	}
	// The endpoint holds each POST for alertTimeout (5s): one waiting
	// request would show.
	if slowest > time.Second {
		t.Fatalf("slowest request took %v with a dead alert endpoint", slowest)
	}
	if n := be.totalHits(); n != 30 {
		t.Fatalf("backend ran %d times, want 30", n)
	}
}

// TestJournalCaddyfile: journal_body and alert in the Caddyfile.
func TestJournalCaddyfile(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"journal_body 16KiB", `{"journal_body":16384}`},
		{"journal_body off", `{"journal_body":-1}`},
		{"alert https://ops.example/hook", `{"alert":{"url":"https://ops.example/hook"}}`},
		{"alert http://127.0.0.1:9/x failed dead", `{"alert":{"url":"http://127.0.0.1:9/x","events":["failed","dead"]}}`},
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("idempotency {\n" + c.in + "\n}")); err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		b, _ := json.Marshal(h)
		if !jsonEqual(t, string(b), c.want) {
			t.Errorf("%s: %s, want %s", c.in, b, c.want)
		}
	}
	for _, in := range []string{"journal_body", "journal_body 0", "alert", "alert ftp://x", "alert http://x/ refunded"} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("idempotency {\n" + in + "\n}")); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// TestAlertDead: a failure past the platform's retry window since the key
// was first seen (the clock moved past Stripe's 3 days) sends
// idempotency.dead besides idempotency.failed.
func TestAlertDead(t *testing.T) {
	events := make(chan alertEvent, 10)
	ops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e alertEvent
		_ = json.NewDecoder(r.Body).Decode(&e)
		events <- e
	}))
	t.Cleanup(ops.Close)
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) { return 500, "down", 0 })
	g := startGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			verify off
			store memory
			alert `+ops.URL+` failed dead
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())
	send := func() {
		r := post(t, g.base+"/stripe", "application/json", `{"id":"evt_d","type":"charge.succeeded","data":{"object":{"id":"ch_1"}}}`,
			http.Header{"X-Order": {"evt_d"}})
		if r.status != 500 {
			t.Fatalf("copy: %+v", r)
		}
	}
	next := func() alertEvent {
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no alert")
		}
		return alertEvent{}
	}
	send()
	if e := next(); e.Event != "idempotency.failed" || e.Key != "stripe:evt_d" {
		t.Fatalf("first failure: %+v", e)
	}
	t.Cleanup(runningApp(t).SetClock(func() time.Time { return time.Now().Add(72*time.Hour + time.Minute) }))
	send()
	if e := next(); e.Event != "idempotency.failed" || e.Attempts != 2 {
		t.Fatalf("second failure: %+v", e)
	}
	if e := next(); e.Event != "idempotency.dead" || e.Key != "stripe:evt_d" || e.Attempts != 2 {
		t.Fatalf("dead: %+v", e)
	}
}
