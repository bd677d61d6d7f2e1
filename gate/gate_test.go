package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// The gate alone, on the real memory store: no Caddy, no HTTP server. The
// Caddy-level behaviour (answers written, metrics, logs) is the
// caddymodule tests'.

// testPlatform takes a body "<key>" or "<key>;<fingerprint>" as a
// notification; a request with an X-Forged header fails its signature.
type testPlatform struct{}

func (testPlatform) Name() string { return "test" }
func (testPlatform) Verify(r *keying.Request) (*keying.Notification, error) {
	if r.Header.Get("X-Forged") != "" {
		return nil, fmt.Errorf("%w: bad signature", keying.ErrSignature)
	}
	if len(r.Body) == 0 {
		return nil, fmt.Errorf("%w: empty body", keying.ErrMalformed)
	}
	return &keying.Notification{Key: string(r.Body), MerchantRefs: []string{"m-" + string(r.Body)}}, nil
}
func (testPlatform) Success(int, http.Header, []byte) bool { return true }
func (testPlatform) RetryWindow() time.Duration            { return time.Hour }

// testRoute is a Route on a store, counting its claim troubles.
type testRoute struct {
	store   store.Store
	settler *store.Settler

	mu       sync.Mutex
	troubles []string
}

func (t *testRoute) Store() store.Store                          { return t.store }
func (t *testRoute) Settler() *store.Settler                     { return t.settler }
func (t *testRoute) VerifyTime(*http.Request) time.Time          { return time.Now() }
func (t *testRoute) VerifiedBy(*keying.Request) (string, string) { return "k1", "key" }
func (t *testRoute) Keys(_ *http.Request, n *keying.Notification, _ []byte) (string, string, error) {
	key, fp, _ := strings.Cut(n.Key, ";")
	if key == "" {
		return "", "", errors.New("no idempotency key in this request")
	}
	return "test:" + key, fp, nil
}
func (t *testRoute) OrderRun(string, *keying.Notification) *store.OrderRun { return nil }
func (t *testRoute) ClaimTrouble(key, op string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.troubles = append(t.troubles, op+" "+key+": "+err.Error())
}
func (t *testRoute) Kept(string)    {}
func (t *testRoute) Settled(string) {}

func newTestGate(t *testing.T, conf Config) (*Gate, *testRoute) {
	t.Helper()
	st := store.NewMemory()
	t.Cleanup(func() { _ = st.Close() })
	rt := &testRoute{store: st, settler: store.NewSettler(st, store.SettlerOptions{})}
	if conf.LockTTL == 0 {
		conf.LockTTL = 30 * time.Second
	}
	if conf.TTL == 0 {
		conf.TTL = time.Hour
	}
	if conf.InFlightWait == 0 {
		conf.InFlightWait = time.Second
	}
	if conf.StoreTimeout == 0 {
		conf.StoreTimeout = 2 * time.Second
	}
	if conf.MaxBody == 0 {
		conf.MaxBody = 64
	}
	return &Gate{Config: conf, Platform: testPlatform{}, Route: rt}, rt
}

func post(body string) *http.Request {
	return httptest.NewRequest(http.MethodPost, "/notify", strings.NewReader(body))
}

// answering is a backend that answers kind with body "ok".
func answering(kind Kind) Backend {
	return func(_ context.Context, start time.Time) Answer {
		return Answer{Kind: kind, Status: 200, Header: http.Header{"X-A": {"1"}}, Body: []byte("ok"), BodyCached: true,
			Attempt: &store.Attempt{Start: start, Outcome: store.AttemptAnswered}}
	}
}

// TestDecideRefusesBeforeClaim: what parse and verify refuse gets its
// status, label and sender's line, and no key is claimed.
func TestDecideRefusesBeforeClaim(t *testing.T) {
	g, rt := newTestGate(t, Config{})
	forged := post("r-1")
	forged.Header.Set("X-Forged", "1")
	for _, c := range []struct {
		name   string
		r      *http.Request
		label  Label
		status int
		msg    string
	}{
		{"too large", post(strings.Repeat("x", 65)), TooLarge, 413, "body larger than max_body (64 bytes)"},
		{"forged", forged, RejectedSignature, 401, MsgSignature},
		{"malformed", post(""), BadRequest, 400, "malformed notification: empty body"},
		{"no key", post(";fp"), BadRequest, 400, "no idempotency key in this request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := g.Decide(c.r)
			if o.Action != Refuse || o.Label != c.label || o.Status != c.status || o.Msg != c.msg {
				t.Fatalf("got %v %s %d %q, want a refusal %s %d %q", o.Action, o.Label, o.Status, o.Msg, c.label, c.status, c.msg)
			}
		})
	}
	if _, err := rt.store.Lookup(t.Context(), "test:r-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused request left a record: %v", err)
	}
}

// TestDecideThenSettle: the first copy is forwarded and completed, a
// later copy replays it, a copy with another fingerprint is a conflict;
// a failed forward releases the key for the next copy, an ambiguous one
// holds it.
func TestDecideThenSettle(t *testing.T) {
	g, rt := newTestGate(t, Config{RejectInFlight: true, Verified: true})

	o := g.Decide(post("a;fp1"))
	if o.Action != Forward || o.Label != Forwarded || o.Claim.Key != "test:a" || o.Claim.Token == "" || o.KeyID != "k1" || o.Verified != "key" {
		t.Fatalf("first copy: got %+v, want a forward of test:a, verified by k1", o)
	}
	s := g.Forward(t.Context(), o.Claim, nil, answering(BackendAnswered))
	if s.Label != Forwarded || s.Err != nil || s.Status != 200 {
		t.Fatalf("settled: got %+v, want forwarded", s)
	}
	o = g.Decide(post("a;fp1"))
	if o.Action != Replay || o.Label != Replayed || o.Record == nil || string(o.Record.Body) != "ok" || o.Copies != 2 {
		t.Fatalf("second copy: got %+v, want the replay of ok, 2 copies", o)
	}
	o = g.Decide(post("a;fp2"))
	if o.Action != Refuse || o.Label != Conflict || o.Status != 422 || o.Msg != MsgConflict {
		t.Fatalf("other fingerprint: got %+v, want a 422 conflict", o)
	}

	o = g.Decide(post("b"))
	if s := g.Forward(t.Context(), o.Claim, nil, answering(BackendRefused)); s.Label != BackendFailed {
		t.Fatalf("failed forward: got %s", s.Label)
	}
	if o = g.Decide(post("b")); o.Action != Forward {
		t.Fatalf("copy after a failure: got %v %s, want a forward (the key was released)", o.Action, o.Label)
	}
	if s := g.Forward(t.Context(), o.Claim, nil, answering(BackendUnknown)); s.Label != Ambiguous {
		t.Fatalf("ambiguous forward: got %s", s.Label)
	}
	o = g.Decide(post("b"))
	if o.Action != Refuse || o.Label != InFlight || o.Status != 409 || !o.RetryAfter || o.Err != nil {
		t.Fatalf("copy after an ambiguous forward: got %+v, want 409 with Retry-After (the claim is held)", o)
	}
	if len(rt.troubles) > 0 {
		t.Errorf("claim troubles: %v", rt.troubles)
	}
}

// TestClaimCarriesJournal: a won claim hands the journal the body as the
// gate read it and the notification's merchant references, while the
// backend still reads the same bytes from the request.
func TestClaimCarriesJournal(t *testing.T) {
	g, _ := newTestGate(t, Config{})
	r := post("c;fp")
	o := g.Decide(r)
	if o.Action != Forward || string(o.Claim.Body) != "c;fp" || len(o.Claim.MerchantRefs) != 1 || o.Claim.MerchantRefs[0] != "m-c;fp" {
		t.Fatalf("got %+v, want a forward whose claim carries the body and its references", o)
	}
	if b, err := io.ReadAll(r.Body); err != nil || string(b) != "c;fp" {
		t.Fatalf("the backend reads %q, %v", b, err)
	}
}

// TestForwardPanicLeavesClaim: a backend that panics (reverse_proxy's
// http.ErrAbortHandler) leaves the claim held, journaled ambiguous.
func TestForwardPanicLeavesClaim(t *testing.T) {
	g, rt := newTestGate(t, Config{RejectInFlight: true})
	o := g.Decide(post("p"))
	func() {
		defer func() {
			if recover() != http.ErrAbortHandler {
				t.Fatal("the panic did not go through")
			}
		}()
		g.Forward(t.Context(), o.Claim, nil, func(context.Context, time.Time) Answer { panic(http.ErrAbortHandler) })
	}()
	rec, err := rt.store.Lookup(t.Context(), "test:p")
	if err != nil || rec.AttemptCount != 1 {
		t.Fatalf("after the panic: %+v %v, want one attempt journaled", rec, err)
	}
	if o := g.Decide(post("p")); o.Label != InFlight {
		t.Fatalf("copy after the panic: got %s, want in_flight (the claim is held)", o.Label)
	}
}

// TestHead: a HEAD claims nothing: 405 with Allow for a key not
// answered, the replay for an answered one.
func TestHead(t *testing.T) {
	g, rt := newTestGate(t, Config{})
	head := func() *http.Request { return httptest.NewRequest(http.MethodHead, "/notify", strings.NewReader("h")) }
	o := g.Decide(head())
	if o.Action != Refuse || o.Status != 405 || o.Allow != "GET, POST" || o.Key != "test:h" {
		t.Fatalf("HEAD of an unknown key: got %+v, want 405 with Allow", o)
	}
	if _, err := rt.store.Lookup(t.Context(), "test:h"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the HEAD claimed: %v", err)
	}
	o = g.Decide(post("h"))
	g.Forward(t.Context(), o.Claim, nil, answering(BackendAnswered))
	if o = g.Decide(head()); o.Action != Replay || o.Label != Replayed {
		t.Fatalf("HEAD of an answered key: got %v %s, want its replay", o.Action, o.Label)
	}
}

// TestStoreDown: on_store_error pass forwards unprotected, but never on a
// store that no longer fits; fail_closed refuses with 503 and Retry-After.
func TestStoreDown(t *testing.T) {
	down := errors.New("connection refused")
	for _, c := range []struct {
		name   string
		pass   bool
		err    error
		action Action
	}{
		{"pass", true, down, Pass},
		{"pass, unfit store", true, fmt.Errorf("evicting: %w", store.ErrUnfit), Refuse},
		{"fail closed", false, down, Refuse},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, _ := newTestGate(t, Config{PassOnStoreError: c.pass})
			o := g.StoreDown(c.err)
			if o.Action != c.action || o.StoreOp != "claim" || !errors.Is(o.Err, c.err) {
				t.Fatalf("got %+v, want %v with the claim's store error", o, c.action)
			}
			if o.Action == Refuse && (o.Status != 503 || !o.RetryAfter || o.Msg != MsgStore || o.Label != StoreError) {
				t.Fatalf("got %+v, want 503 store_error with Retry-After and no detail", o)
			}
		})
	}
}

// TestWaitReplays: a copy arriving while the first is at the backend
// waits, and gets the first copy's answer as waited.
func TestWaitReplays(t *testing.T) {
	g, _ := newTestGate(t, Config{InFlightWait: 5 * time.Second})
	o := g.Decide(post("w"))
	at := make(chan struct{})
	done := make(chan Outcome)
	go func() {
		done <- g.Forward(context.Background(), o.Claim, nil, func(ctx context.Context, start time.Time) Answer {
			<-at
			return answering(BackendAnswered)(ctx, start)
		})
	}()
	waiting := make(chan Outcome)
	go func() { waiting <- g.Decide(post("w")) }()
	time.AfterFunc(50*time.Millisecond, func() { close(at) })
	if w := <-waiting; w.Action != Replay || w.Label != Waited {
		t.Fatalf("waiting copy: got %v %s, want a replay, waited", w.Action, w.Label)
	}
	if s := <-done; s.Label != Forwarded {
		t.Fatalf("first copy: got %s", s.Label)
	}
}

// TestStoreContext: every context ends no sooner than the time-out after
// its call started and no later than the time-out after it returned; it
// is done at its deadline, and not before. (A store on which it is done
// without a timer, Redis, is store.CallContext's, tested there.)
func TestStoreContext(t *testing.T) {
	const timeout = 40 * time.Millisecond
	g, _ := newTestGate(t, Config{StoreTimeout: timeout})
	for range 2000 {
		start := time.Now()
		ctx, cancel := g.storeContext()
		end := time.Now()
		dl, ok := ctx.Deadline()
		cancel()
		if !ok {
			t.Fatal("no deadline")
		}
		if dl.Before(start.Add(timeout)) {
			t.Fatalf("deadline %v after the call's start, want at least %v", dl.Sub(start), timeout)
		}
		if dl.After(end.Add(timeout)) {
			t.Fatalf("deadline %v after the call, want at most %v", dl.Sub(end), timeout)
		}
	}
	ctx, cancel := g.storeContext()
	defer cancel()
	select {
	case <-ctx.Done():
		t.Fatal("done before its deadline")
	default:
	}
	select {
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("ended by %v, want the deadline", ctx.Err())
		}
	case <-time.After(timeout + time.Second):
		t.Fatal("never done")
	}
}
