package journal

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// TestReceivedDropsCredentials: the journal keeps the request as the
// platform sent it, never the caller's credentials nor the proxy's; an
// async delivery still gets the caller's own (CredentialsOf).
func TestReceivedDropsCredentials(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "https://pay.test/notify?x=1", strings.NewReader("ignored"))
	r.Header.Set("Authorization", "Basic c2VjcmV0")
	r.Header.Set("Cookie", "session=1")
	r.Header.Set("Proxy-Authorization", "Basic cHJveHk=")
	r.Header.Set("Wechatpay-Signature", "sig")
	r.RemoteAddr = "203.0.113.7:4711"
	r.TLS = &tls.ConnectionState{}
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8443})))
	body := []byte("the body the gate read")

	n := Received(r, body)
	for _, name := range []string{"Authorization", "Cookie", "Proxy-Authorization"} {
		if v := n.Header.Values(name); len(v) > 0 {
			t.Errorf("journaled %s: %q", name, v)
		}
	}
	if n.Header.Get("Wechatpay-Signature") != "sig" {
		t.Errorf("the platform's header was dropped: %v", n.Header)
	}
	if r.Header.Get("Authorization") == "" {
		t.Error("the request's own header was changed")
	}
	if n.Method != http.MethodPost || n.URI != "https://pay.test/notify?x=1" || n.Host != "pay.test" || !n.TLS ||
		n.Remote != "203.0.113.7:4711" || n.Addr != "127.0.0.1:8443" || string(n.Body) != string(body) || n.BodySize != int64(len(body)) {
		t.Errorf("got %+v", n)
	}
	c := CredentialsOf(r.Header)
	if len(c) != 2 || c.Get("Authorization") != "Basic c2VjcmV0" || c.Get("Cookie") != "session=1" {
		t.Errorf("credentials %v, want Authorization and Cookie only", c)
	}
	if c := CredentialsOf(http.Header{"X-A": {"1"}}); c != nil {
		t.Errorf("credentials of none: %v", c)
	}
	// A request built in process (no RequestURI): its URL's.
	r2, _ := http.NewRequest(http.MethodGet, "http://pay.test/return?a=b", nil)
	if n := Received(r2, nil); n.URI != "/return?a=b" || n.BodySize != 0 || n.Body != nil {
		t.Errorf("in-process request: %+v", n)
	}
}

// TestCut: journal_body cuts the kept body, leaves the received one whole,
// and off keeps nothing.
func TestCut(t *testing.T) {
	n := &store.Notification{Method: "POST", Body: []byte("0123456789"), BodySize: 10}
	for _, tc := range []struct {
		limit int64
		want  string
		same  bool
	}{{limit: 20, want: "0123456789", same: true}, {limit: 10, want: "0123456789", same: true}, {limit: 4, want: "0123"}, {limit: 0, want: ""}} {
		c := Cut(n, tc.limit)
		if string(c.Body) != tc.want || c.BodySize != 10 || (c == n) != tc.same {
			t.Errorf("limit %d: %q size %d (same %v), want %q size 10 (same %v)", tc.limit, c.Body, c.BodySize, c == n, tc.want, tc.same)
		}
	}
	if string(n.Body) != "0123456789" {
		t.Errorf("the received body was cut: %q", n.Body)
	}
	if Cut(n, -1) != nil || Cut(nil, 10) != nil {
		t.Error("off (or nothing) keeps a notification")
	}
}

// TestAttemptWording: an attempt's failure as an operator reads it.
func TestAttemptWording(t *testing.T) {
	refused := realRefused(t)
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		name    string
		outcome string
		status  int
		err     error
		want    string
	}{
		{"answered", store.AttemptAnswered, 200, nil, ""},
		{"failure status", store.AttemptFailed, 500, nil, "status 500: not a success by the platform's rule"},
		{"refused", store.AttemptUnreachable, 0, refused, "connection refused"},
		{"refused in words", store.AttemptUnreachable, 0, errors.New("making dial info: dial tcp 127.0.0.1:9: connect: connection refused"), "connection refused"},
		{"reset", store.AttemptAmbiguous, 0, fmt.Errorf("reading the answer: %w", reset), "connection reset"},
		{"timeout", store.AttemptAmbiguous, 0, fmt.Errorf("forwarding: %w", context.DeadlineExceeded), "timeout after 1.5s"},
		{"status with an error", store.AttemptAmbiguous, 502, fmt.Errorf("copying: %w", errors.New("unexpected EOF")), "status 502: unexpected EOF"},
		{"root cause", store.AttemptAmbiguous, 0, fmt.Errorf("a: %w", fmt.Errorf("b: %w", errors.New("the cause"))), "the cause"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Error(tc.outcome, tc.status, tc.err, 1500*time.Millisecond); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// realRefused is the error of a dial to a loopback port nobody listens on.
func realRefused(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c, err := net.Dial("tcp", addr)
	if err == nil {
		_ = c.Close()
		t.Fatalf("%s still accepts", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	return err
}

// TestAttempt: a failed attempt keeps its answer's body (bounded), a
// success keeps none, and the wording goes with it.
func TestAttempt(t *testing.T) {
	start := time.Now()
	long := []byte(strings.Repeat("x", store.MaxAttemptBody+10))
	a := Attempt(Result{Outcome: store.AttemptFailed, Start: start, Duration: time.Second, Status: 500, Body: long, Resigned: true})
	if len(a.Body) != store.MaxAttemptBody || a.Status != 500 || a.Error != "status 500: not a success by the platform's rule" ||
		!a.Start.Equal(start) || a.Duration != time.Second || !a.Resigned || a.Outcome != store.AttemptFailed {
		t.Errorf("failed: %+v", a)
	}
	long[0] = 'y'
	if a.Body[0] != 'x' {
		t.Error("the kept body shares the answer's buffer")
	}
	if a := Attempt(Result{Outcome: store.AttemptAnswered, Status: 200, Body: []byte("ok")}); a.Body != nil || a.Error != "" {
		t.Errorf("answered: %+v", a)
	}
}
