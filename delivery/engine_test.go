package delivery

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/store"
)

// testRoute is a route as the engine sees it, over a real store, and its
// observer: it records what the engine reports.
type testRoute struct {
	store   store.Store
	settler *store.Settler

	mu       sync.Mutex
	events   []string
	outcomes []string
	dead     int
}

func (r *testRoute) Store() store.Store      { return r.store }
func (r *testRoute) Settler() *store.Settler { return r.settler }
func (r *testRoute) Ackable() error          { return nil }

func (r *testRoute) Received(req *http.Request, c gate.Claim) (*store.Notification, http.Header) {
	body := c.Body
	return &store.Notification{Method: req.Method, URI: req.RequestURI, Header: req.Header.Clone(), Body: body,
		BodySize: int64(len(body))}, http.Header{"Authorization": {"Bearer backend"}}
}

func (r *testRoute) Journaled(n *store.Notification) *store.Notification { return n }

func (r *testRoute) Success(_ string, status int, _ http.Header, _ []byte) bool {
	return status >= 200 && status < 300
}

func (r *testRoute) ReplayHeader(h http.Header) http.Header { return h.Clone() }
func (r *testRoute) Resign(http.Header, []byte) (bool, error) {
	return false, nil
}

func (r *testRoute) RefusedAfter(http.Header, time.Time) time.Time { return time.Time{} }
func (r *testRoute) ClaimTrouble(key, op string, err error)        { r.Emit("trouble."+op, key, 0, 0) }

func (r *testRoute) Emit(event, _ string, _ int, _ int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event)
}

func (r *testRoute) Delivered(outcome string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, outcome)
}

func (r *testRoute) Dead() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead++
}

func (r *testRoute) StoreError(string)        {}
func (r *testRoute) LogKey(key string) string { return key }

// TestEngineDeliversAfterFailure: a queued notification is acked at
// receipt, then delivered by the engine alone (the memory store's queue,
// a real backend): a failed first attempt is retried after its back-off,
// the second is remembered as the key's answer with both attempts in its
// journal, and the backend got the path, the body and the credentials
// each time, with the attempt number.
func TestEngineDeliversAfterFailure(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	var bodies []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, string(b))
		n := len(got)
		mu.Unlock()
		if n == 1 {
			http.Error(w, "not yet", http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Backend", "ran")
		io.WriteString(w, "ok")
	}))
	defer backend.Close()
	to, err := url.Parse(backend.URL + "/base")
	if err != nil {
		t.Fatal(err)
	}

	m := store.NewMemory()
	rt := &testRoute{store: m, settler: store.NewSettler(m, store.SettlerOptions{})}
	e := New(Config{Scope: "t", Platform: "generic", To: to, Concurrency: 1, RetryInitial: 10 * time.Millisecond,
		RetryMax: 20 * time.Millisecond, GiveUp: time.Hour, LockTTL: 3 * time.Second, TTL: time.Hour,
		StoreTimeout: time.Second, MaxAnswer: 1 << 10, Ceiling: 5 * time.Second, Observer: rt}, rt, m.Queue())
	e.Start()
	defer e.Stop()

	ctx := context.Background()
	c, err := m.Claim(ctx, "t:1", "", 3*time.Second)
	if err != nil || c.Outcome != store.Won {
		t.Fatalf("claim: %+v %v", c, err)
	}
	req := httptest.NewRequest(http.MethodPost, "/notify?id=1", strings.NewReader("id=1"))
	if o := e.Enqueue(ctx, req, gate.Claim{Key: "t:1", Token: c.Token, Body: []byte("id=1")}); o.Action != gate.Ack || o.Label != gate.Queued {
		t.Fatalf("receipt: %+v, want the ack", o)
	}

	deadline := time.Now().Add(10 * time.Second)
	var rec *store.Record
	for {
		rec, err = m.Lookup(ctx, "t:1")
		if err == nil && rec.State == store.StateAnswered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered in 10s: %+v %v", rec, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rec.Status != 200 || string(rec.Body) != "ok" || rec.Header.Get("X-Backend") != "ran" {
		t.Errorf("remembered answer: %d %q %v", rec.Status, rec.Body, rec.Header)
	}
	if rec.AttemptCount != 2 || len(rec.Attempts) != 2 || rec.Attempts[0].Outcome != store.AttemptFailed ||
		rec.Attempts[0].Status != 500 || rec.Attempts[1].Outcome != store.AttemptAnswered {
		t.Errorf("journal: %d attempts %+v", rec.AttemptCount, rec.Attempts)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("backend ran %d times, want 2", len(got))
	}
	for i, r := range got {
		if r.URL.RequestURI() != "/base/notify?id=1" || bodies[i] != "id=1" || r.Header.Get("Authorization") != "Bearer backend" ||
			r.Header.Get("Idemgate-Delivery-Attempt") != []string{"1", "2"}[i] {
			t.Errorf("attempt %d: %s %q %v", i+1, r.URL.RequestURI(), bodies[i], r.Header)
		}
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if strings.Join(rt.events, ",") != "idempotency.failed" || strings.Join(rt.outcomes, ",") != "failed,answered" || rt.dead != 0 {
		t.Errorf("events %v, outcomes %v, dead %d", rt.events, rt.outcomes, rt.dead)
	}
	if o, again := e.Copy(ctx, "t:1", "", 2); again || o.Action != gate.Replay || o.Record == nil {
		t.Errorf("a copy after delivery: %+v again=%v, want the replay", o, again)
	}
	if st, ok := e.KeyState("t:1"); ok {
		t.Errorf("a settled key's state is kept: %+v", st)
	}
}
