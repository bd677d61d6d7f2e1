package admin

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/internal/registry"
)

// RedeliverTimeout bounds a redelivery: the backend's work included.
const RedeliverTimeout = 2 * time.Minute

// RedeliveryView is the answer to POST /idempotency/keys/<key>/redeliver:
// what the route answered the journaled notification.
type RedeliveryView struct {
	Store string `json:"store"`
	Key   string `json:"key"`
	// Status is the answer's status: the backend's, or the replay's.
	Status   int         `json:"status"`
	Replayed bool        `json:"replayed"`
	Header   http.Header `json:"header,omitempty"`
	Body     string      `json:"body"`
	// Reopened: an answered key was made free first (?force=1); its
	// history stays, the redelivery's attempt added to it.
	Reopened bool `json:"reopened,omitempty"`
}

// redeliver serves POST /idempotency/keys/<key>/redeliver (see Redeliver).
func (a *AdminAPI) redeliver(w http.ResponseWriter, r *http.Request, key string) error {
	ps, err := pickStore(r)
	if err != nil {
		return err
	}
	out, err := Redeliver(r.Context(), ps, key, boolParam(r, "force"), a.logger, r.RemoteAddr)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// Redeliver sends the journaled notification of key (its exact bytes and
// headers) to the listener it came in on, so it takes the same route and
// claims the key like any copy: a failed or dead key is forwarded once, an
// answered one would only replay (refused unless force, which forgets the
// answer first). Refusals are admin errors (caddy.APIError) with their
// status; remote names who asked, for the log line. The console calls it
// too, so the rules stay in one place.
func Redeliver(ctx context.Context, ps *registry.Store, key string, force bool, logger *zap.Logger, remote string) (RedeliveryView, error) {
	lctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	rec, err := lookup(lctx, ps, key)
	if err != nil {
		return RedeliveryView{}, err
	}
	n := rec.Notification
	switch {
	case n == nil:
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q has no journaled notification (journal_body off, or no attempt was ever settled): ask the platform to resend", key))
	case n.Truncated():
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q: only %d of the notification's %d bytes were kept (journal_body): a redelivery would not be the platform's bytes", key, len(n.Body), n.BodySize))
	case n.Addr == "":
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q: the journal does not say which listener the notification came in on", key))
	case rec.State == cache.StateInFlight:
		return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q is in flight: its first copy is at the backend now; wait for it (or purge with force if its gateway is gone)", key))
	}
	reopened := false
	if rec.State == cache.StateAnswered {
		if !force {
			return RedeliveryView{}, apiError(http.StatusConflict, fmt.Errorf("key %q is answered (status %d): a redelivery runs the backend again; add ?force=1 (--force) if that is what is needed", key, rec.Status))
		}
		// Reopened, not deleted: the key's history (copies, the earlier
		// attempts) stays beside the redelivery's.
		if err := ps.Reopen(lctx, key, registry.TTLOf(key)); err != nil && !errors.Is(err, cache.ErrNotFound) {
			return RedeliveryView{}, apiError(http.StatusServiceUnavailable, fmt.Errorf("store %s: %v", ps.ID, err))
		}
		reopened = true
	}
	if logger != nil {
		logger.Info("redelivering a journaled notification through the admin API",
			zap.String("store", ps.ID), zap.String("key", registry.HashKey(key)), zap.String("state", string(rec.State)),
			zap.Bool("force", force), zap.String("remote", remote))
	}
	resp, body, err := sendNotification(ctx, n, rec.FirstSeen)
	if err != nil {
		return RedeliveryView{}, apiError(http.StatusBadGateway, fmt.Errorf("redelivering key %q to %s: %v", key, n.Addr, err))
	}
	return RedeliveryView{
		Store: ps.ID, Key: key, Status: resp.StatusCode, Replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		Header: resp.Header, Body: string(body), Reopened: reopened,
	}, nil
}

// hopHeaders are not resent: they describe the platform's connection.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Content-Length"}

// sendNotification sends n to the listener it came in on, marked as a
// redelivery of a notification first received at receivedAt.
func sendNotification(ctx context.Context, n *cache.Notification, receivedAt time.Time) (*http.Response, []byte, error) {
	scheme := "http"
	if n.TLS {
		scheme = "https"
	}
	ctx, cancel := context.WithTimeout(ctx, RedeliverTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, n.Method, scheme+"://"+n.Addr+n.URI, bytes.NewReader(n.Body))
	if err != nil {
		return nil, nil, err
	}
	req.Header = n.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	registry.MarkRedelivery(req.Header, receivedAt)
	req.Host = n.Host
	tr := &http.Transport{
		// The gateway's own listener, by the address the notification
		// came in on: its certificate names the site, not that address.
		TLSClientConfig:   &tls.Config{ServerName: hostOnly(n.Host), InsecureSkipVerify: true}, //nolint:gosec // our own listener
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}).Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp, body, err
}

func hostOnly(hostport string) string {
	for i := len(hostport) - 1; i >= 0; i-- {
		switch hostport[i] {
		case ':':
			return hostport[:i]
		case ']':
			return hostport
		}
	}
	return hostport
}
