package gate

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/store"
)

// TestClassify: what became of an attempt at the backend decides whether
// its claim is completed, released or held; no server needed.
func TestClassify(t *testing.T) {
	broke := errors.New("broken")
	for _, c := range []struct {
		name string
		in   Sent
		want Kind
	}{
		{"success", Sent{Success: true, Answered: true, Attempted: true, Written: true}, BackendAnswered},
		{"failure answer", Sent{Answered: true, Attempted: true, Written: true}, BackendRefused},
		{"nothing written, no error, not a success", Sent{}, BackendRefused},
		{"proven unsent", Sent{Err: broke, Unsent: true}, BackendNotReached},
		{"connection taken, nothing written", Sent{Err: broke, Attempted: true}, BackendNotReached},
		{"written, then the connection broke", Sent{Err: broke, Attempted: true, Written: true}, BackendUnknown},
		{"answer started, then an error", Sent{Err: broke, Answered: true, Attempted: true, Written: true}, BackendUnknown},
		{"unsent error after a write (a refused re-send)", Sent{Err: broke, Attempted: true, Written: true, Unsent: true}, BackendUnknown},
		{"unknown error, nothing traced", Sent{Err: broke}, BackendUnknown},
		// The async delivery's own client: traced, so Unsent always.
		{"async: success", Sent{Answered: true, Written: true, Success: true, Unsent: true}, BackendAnswered},
		{"async: not a success", Sent{Answered: true, Written: true, Unsent: true}, BackendRefused},
		{"async: answer cut mid-body", Sent{Err: broke, Answered: true, Written: true, Unsent: true}, BackendUnknown},
		{"async: written, no answer", Sent{Err: broke, Written: true, Unsent: true}, BackendUnknown},
		{"async: nothing written", Sent{Err: broke, Unsent: true}, BackendNotReached},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Classify(c.in); got != c.want {
				t.Fatalf("Classify(%+v) = %v, want %v", c.in, got.Label(), c.want.Label())
			}
		})
	}
}

// TestKindAttemptOutcome: each kind is journaled under its own outcome.
func TestKindAttemptOutcome(t *testing.T) {
	for k, want := range map[Kind]string{
		BackendAnswered:   store.AttemptAnswered,
		BackendRefused:    store.AttemptFailed,
		BackendNotReached: store.AttemptUnreachable,
		BackendUnknown:    store.AttemptAmbiguous,
	} {
		if got := k.AttemptOutcome(); got != want {
			t.Errorf("%v.AttemptOutcome() = %q, want %q", k.Label(), got, want)
		}
	}
}

// TestSendTraceRefusesResend: a kept-alive connection that breaks after
// the request was written makes Go's transport re-send a replayable
// request on a new one; the trace closes that connection before a byte
// goes out, so the backend runs once and the attempt is ambiguous.
func TestSendTraceRefusesResend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	hits := 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		hits++
		n := hits
		mu.Unlock()
		if n == 1 {
			io.WriteString(w, "ok") // leaves a kept-alive connection
			return
		}
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close() // breaks it after the request was read
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	client := &http.Client{Transport: &http.Transport{}}
	url := "http://" + ln.Addr().String() + "/"

	get := func() (*SendTrace, error) {
		sent := &SendTrace{}
		req, err := http.NewRequestWithContext(sent.Context(t.Context()), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return sent, err
	}
	if sent, err := get(); err != nil || !sent.Attempted() || !sent.Written() {
		t.Fatalf("first GET: err %v, attempted %v, written %v", err, sent.Attempted(), sent.Written())
	}
	sent, err := get()
	if err == nil {
		t.Fatal("the broken GET came back answered")
	}
	mu.Lock()
	n := hits
	mu.Unlock()
	if n != 2 {
		t.Fatalf("backend ran %d times for two GETs: the transport re-sent one", n)
	}
	if got := Classify(Sent{Err: err, Attempted: sent.Attempted(), Written: sent.Written(), Unsent: true}); got != BackendUnknown {
		t.Fatalf("broken GET classified %v, want %v (%v)", got.Label(), BackendUnknown.Label(), err)
	}
}
