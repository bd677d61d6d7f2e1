package redeliver

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/journal"
)

// TestRebuildAsReceived: the journal's capture, rebuilt, is the request
// the platform sent — method, URI before rewrites, host, headers,
// addresses, TLS — without the headers of its connection.
func TestRebuildAsReceived(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "https://pay.test:8443/notify?x=1", strings.NewReader(""))
	r.Header.Set("Wechatpay-Signature", "sig")
	r.Header.Set("Connection", "keep-alive")
	r.Header.Set("Content-Length", "3")
	r.RemoteAddr = "203.0.113.7:4711"
	r.TLS = &tls.ConnectionState{}
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8443})))
	n := journal.Received(r, []byte("a=b"))
	n.URI, n.OrigURI = "/rewritten", "/notify?x=1"

	req, err := rebuild(t.Context(), n, n.Body)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(req.Body)
	if req.Method != http.MethodPost || req.RequestURI != "/notify?x=1" || req.URL.Path != "/notify" || req.Host != "pay.test:8443" ||
		req.RemoteAddr != "203.0.113.7:4711" || req.TLS == nil || req.TLS.ServerName != "pay.test" || string(body) != "a=b" || req.ContentLength != 3 {
		t.Errorf("rebuilt %s %s host %s from %s tls %v body %q", req.Method, req.RequestURI, req.Host, req.RemoteAddr, req.TLS, body)
	}
	if req.Header.Get("Wechatpay-Signature") != "sig" || req.Header.Get("Connection") != "" || req.Header.Get("Content-Length") != "" {
		t.Errorf("headers %v", req.Header)
	}
	if a, _ := req.Context().Value(http.LocalAddrContextKey).(net.Addr); a == nil || a.String() != "127.0.0.1:8443" {
		t.Errorf("local address %v", a)
	}
	if req, err := rebuild(t.Context(), n, nil); err != nil || req.Body != http.NoBody {
		t.Errorf("a probe's request: %v, %v", req, err)
	}
	n.OrigURI = "not a uri"
	if _, err := rebuild(t.Context(), n, nil); err == nil || !strings.Contains(err.Error(), "journaled uri") {
		t.Errorf("a bad uri: %v", err)
	}
}

// TestSeen: a live request's chain is kept (the first), and a probe stops
// at the first handler it reaches, found only at the route it looks for.
func TestSeen(t *testing.T) {
	srv := &caddyhttp.Server{}
	live := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/notify", nil)
		return r.WithContext(context.WithValue(r.Context(), caddyhttp.ServerCtxKey, srv))
	}
	first, second := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }),
		caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	mine, other := &app.Route{Name: "a#1"}, &app.Route{Name: "b#1"}

	var p Point
	if p.Seen(live(), first, mine) || p.Seen(live(), second, mine) {
		t.Fatal("a live request taken for a probe")
	}
	if c := p.chain.Load(); c == nil || c.srv != srv {
		t.Fatalf("kept chain %+v", c)
	}

	probeOf := func(pr *prober) *http.Request {
		r := live()
		return r.WithContext(context.WithValue(r.Context(), probeCtxKey{}, pr))
	}
	pr := &prober{route: mine}
	if !p.Seen(probeOf(pr), first, other) || !p.Seen(probeOf(pr), first, mine) {
		t.Fatal("a probe not answered")
	}
	if pr.reached != "b#1" || pr.found != nil {
		t.Errorf("probe reached %q found %v: it stops at the first handler, another route's", pr.reached, pr.found)
	}
	pr = &prober{route: mine}
	p.Seen(probeOf(pr), first, mine)
	if pr.reached != "a#1" || pr.found == nil || pr.found.srv != srv {
		t.Errorf("probe reached %q found %+v", pr.reached, pr.found)
	}
}

// TestAnswerRecorder: a redelivery's answer keeps its status (not a 1xx),
// headers and the first 64KiB of its body; nothing written is Caddy's 200.
func TestAnswerRecorder(t *testing.T) {
	a := newAnswerRecorder()
	a.Header().Set("X-A", "1")
	a.WriteHeader(http.StatusContinue)
	a.WriteHeader(http.StatusAccepted)
	a.WriteHeader(http.StatusTeapot)
	big := bytes.Repeat([]byte("x"), maxAnswer+10)
	if n, err := a.Write(big); n != len(big) || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	ans := a.answer()
	if ans.Status != http.StatusAccepted || ans.Header.Get("X-A") != "1" || len(ans.Body) != maxAnswer {
		t.Errorf("answer %d %v %d bytes", ans.Status, ans.Header, len(ans.Body))
	}
	if ans := newAnswerRecorder().answer(); ans.Status != http.StatusOK || len(ans.Body) != 0 {
		t.Errorf("nothing written: %+v", ans)
	}
}
