package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/store"
)

// Sending one delivery attempt to the backend: the request built from the
// queued notification, the transport that never re-sends it, and what the
// answer came to.

// sendResult is what one attempt came to.
type sendResult struct {
	kind     gate.Kind
	status   int
	header   http.Header
	body     []byte // up to max_answer
	overflow bool
	err      error
	// resigned: sent with a fresh signature (Route.Resign).
	resigned bool
}

// send posts the notification to the backend once: never re-sent by the
// transport (gate.SendTrace), classified by the route's success rule
// (gate.Classify).
func (e *Engine) send(d *store.Delivery, attempt int) sendResult {
	n := d.Notification
	if n == nil {
		return sendResult{kind: gate.BackendNotReached, err: errors.New("the queued delivery holds no notification")}
	}
	target, err := target(e.cfg.To, n.URI)
	if err != nil {
		return sendResult{kind: gate.BackendNotReached, err: err}
	}
	sent := &gate.SendTrace{}
	ctx, cancel := context.WithTimeout(e.sendCtx, e.cfg.Ceiling)
	defer cancel()
	ctx = sent.Context(ctx)
	req, err := http.NewRequestWithContext(ctx, n.Method, target, bytes.NewReader(n.Body))
	if err != nil {
		return sendResult{kind: gate.BackendNotReached, err: err}
	}
	req.Header = deliveryHeaders(n.Header)
	for name, v := range d.Credentials {
		req.Header[name] = v
	}
	// A delivery retried for hours carries a signature as old as the
	// platform's copy, which a backend verifying it with the platform's
	// library (a 5-minute tolerance) refuses: where the route holds the
	// signing secret, each attempt is signed afresh over the same body.
	resigned, err := e.rt.Resign(req.Header, n.Body)
	if err != nil {
		return sendResult{kind: gate.BackendNotReached, err: fmt.Errorf("re-signing the notification: %v", err)}
	}
	req.Header.Set("Idemgate-Delivery-Attempt", strconv.Itoa(attempt))
	if n.Host != "" {
		req.Header.Set("X-Forwarded-Host", n.Host)
	}
	if n.TLS {
		req.Header.Set("X-Forwarded-Proto", "https")
	} else {
		req.Header.Set("X-Forwarded-Proto", "http")
	}
	resp, err := e.client.Do(req)
	out := sendResult{resigned: resigned}
	if err == nil {
		out.status, out.header = resp.StatusCode, resp.Header
		limit := e.cfg.MaxAnswer
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		if rerr == nil && int64(len(b)) > limit {
			out.overflow = true
			b = nil
			_, rerr = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDeliveryAnswer))
		}
		resp.Body.Close()
		out.body, out.err = b, rerr
	} else {
		out.err = err
	}
	out.kind = gate.Classify(gate.Sent{
		Err: out.err, Answered: resp != nil, Attempted: sent.Attempted(), Written: sent.Written(),
		Success: out.err == nil && e.rt.Success(n.Method, out.status, out.header, out.body),
		// The engine's own client, traced: a request not written was
		// not sent.
		Unsent: true,
	})
	return out
}

// target is the backend URL for a notification received at uri: its path
// and query appended to to's, as reverse_proxy does.
func target(to *url.URL, uri string) (string, error) {
	ref, err := url.ParseRequestURI(uri)
	if err != nil {
		return "", err
	}
	u := *to
	switch {
	case strings.HasSuffix(u.Path, "/") && strings.HasPrefix(ref.Path, "/"):
		u.Path += ref.Path[1:]
	case !strings.HasSuffix(u.Path, "/") && !strings.HasPrefix(ref.Path, "/"):
		u.Path += "/" + ref.Path
	default:
		u.Path += ref.Path
	}
	u.RawPath = ""
	switch {
	case u.RawQuery == "":
		u.RawQuery = ref.RawQuery
	case ref.RawQuery != "":
		u.RawQuery += "&" + ref.RawQuery
	}
	return u.String(), nil
}

// deliveryHeaders are the notification's headers minus hop-by-hop ones.
func deliveryHeaders(h http.Header) http.Header {
	out := make(http.Header, len(h)+3)
	for k, v := range h {
		switch k {
		case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
			"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Host":
			continue
		}
		out[k] = append([]string(nil), v...)
	}
	return out
}
