package redeliver

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

// rebuild is the request the platform sent, n, with body: its
// method, URI, host, headers and addresses.
func rebuild(ctx context.Context, n *store.Notification, body []byte) (*http.Request, error) {
	uri := n.ReceivedURI()
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, fmt.Errorf("the journaled uri %q: %v", uri, err)
	}
	req := (&http.Request{Method: n.Method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: n.Header.Clone(), Host: n.Host, RequestURI: uri, ContentLength: int64(len(body)),
		Body: io.NopCloser(bytes.NewReader(body)), RemoteAddr: n.Remote}).WithContext(ctx)
	if req.Header == nil {
		req.Header = http.Header{}
	}
	for _, name := range hopHeaders {
		req.Header.Del(name)
	}
	if len(body) == 0 {
		req.Body = http.NoBody
	}
	if req.RemoteAddr == "" {
		req.RemoteAddr = "127.0.0.1:0"
	}
	if n.TLS {
		host, _, err := net.SplitHostPort(n.Host)
		if err != nil {
			host = n.Host
		}
		req.TLS = &tls.ConnectionState{HandshakeComplete: true, ServerName: host}
	}
	if a, err := net.ResolveTCPAddr("tcp", n.Addr); err == nil {
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, net.Addr(a)))
	}
	return req, nil
}

// hopHeaders describe the platform's connection, not the notification.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Content-Length"}

// serverOf is ctx's http server that listens on addr's port.
func serverOf(ctx caddy.Context, addr string) *caddyhttp.Server {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	a, err := ctx.AppIfConfigured("http")
	if err != nil {
		return nil
	}
	for _, srv := range a.(*caddyhttp.App).Servers {
		for _, l := range srv.Listen {
			na, err := caddy.ParseNetworkAddress(l)
			if err != nil {
				continue
			}
			p, _ := strconv.Atoi(port)
			if uint(p) >= na.StartPort && uint(p) <= na.EndPort {
				return srv
			}
		}
	}
	return nil
}

// answerRecorder keeps a redelivery's answer (the first 64KiB of its
// body, as the admin API shows it).
type answerRecorder struct {
	hdr    http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

const maxAnswer = 64 << 10

func newAnswerRecorder() *answerRecorder { return &answerRecorder{hdr: http.Header{}} }

func (a *answerRecorder) Header() http.Header { return a.hdr }

func (a *answerRecorder) WriteHeader(status int) {
	if a.wrote || status < 200 && status >= 100 {
		return
	}
	a.status, a.wrote = status, true
}

func (a *answerRecorder) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	if room := maxAnswer - a.body.Len(); room > 0 {
		a.body.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (a *answerRecorder) answer() app.Answer {
	if !a.wrote {
		a.status = http.StatusOK // what Caddy answers when no handler wrote
	}
	return app.Answer{Status: a.status, Header: a.hdr.Clone(), Body: bytes.Clone(a.body.Bytes())}
}
