package paypal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// DefaultAPI is PayPal's live API: where the read API goes without a
// BaseURL (the sandbox is https://api-m.sandbox.paypal.com).
const DefaultAPI = "https://api-m.paypal.com"

const (
	// apiTimeout bounds a call when APIConfig names no client.
	apiTimeout = 10 * time.Second
	// apiMaxBody bounds one answer read from the API.
	apiMaxBody = 16 << 20
	// apiPageSize is the page_size asked for (PayPal's largest).
	apiPageSize = 300
	// tokenMargin: a token is renewed this long before PayPal says it
	// expires.
	tokenMargin = time.Minute
	// apiMaxPages bounds the pages one Events call follows.
	apiMaxPages = 1000
)

// NewReadAPI is PayPal's read API: a keying.EventLister over PayPal's
// webhook event list (GET /v1/notifications/webhooks-events) and its
// resend (POST /v1/notifications/webhooks-events/{id}/resend).
//
// cfg.Key is the REST app's client id and secret, "id:secret": an OAuth2
// client-credentials token (POST /v1/oauth2/token, HTTP Basic) is asked
// for and kept until shortly before it expires. cfg.Merchant is the
// route's webhook id (the subscription the gateway verifies with): a
// resend names it in webhook_ids, so the event goes to that webhook only;
// without it Resend refuses rather than resend to every webhook of the app.
func NewReadAPI(cfg keying.APIConfig) (any, error) {
	id, secret, ok := strings.Cut(strings.TrimSpace(string(cfg.Key)), ":")
	if !ok || id == "" || secret == "" {
		return nil, errors.New("paypal: the read API needs the REST app's client id and secret (id:secret)")
	}
	base := strings.TrimRight(strings.TrimSpace(cfg.BaseURL), "/")
	if base == "" {
		base = DefaultAPI
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("paypal: api %q is not an http(s) URL", base)
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: apiTimeout}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &ReadAPI{base: base, id: id, secret: secret, webhookID: strings.TrimSpace(cfg.Merchant), client: client, now: now}, nil
}

// ReadAPI is PayPal's keying.EventLister (NewReadAPI).
type ReadAPI struct {
	base, id, secret, webhookID string
	client                      *http.Client
	now                         func() time.Time

	mu    sync.Mutex // guards token, until
	token string
	until time.Time
}

// apiEvent is what the read API takes from an event of PayPal's list; the
// money comes from the whole event, as its notification's would.
type apiEvent struct {
	ID         string `json:"id"`
	EventType  string `json:"event_type"`
	CreateTime string `json:"create_time"`
	Resource   struct {
		ID        string `json:"id"`
		InvoiceID string `json:"invoice_id"`
		CustomID  string `json:"custom_id"`
	} `json:"resource"`
}

// link is one of a PayPal answer's HATEOAS links.
type link struct {
	Href   string `json:"href"`
	Rel    string `json:"rel"`
	Method string `json:"method"`
}

// Events lists the events created in [since, until) (start_time,
// end_time), in PayPal's order (newest first), following the rel=next
// link, at most limit (none when limit <= 0). A next link is followed on
// the configured API only: its path and query, never its host, so the
// token goes nowhere else. PayPal keeps events for 30 days.
func (a *ReadAPI) Events(ctx context.Context, since, until time.Time, limit int) ([]keying.PlatformEvent, error) {
	q := url.Values{"page_size": {strconv.Itoa(apiPageSize)}}
	if !since.IsZero() {
		q.Set("start_time", since.UTC().Format(time.RFC3339))
	}
	if !until.IsZero() {
		q.Set("end_time", until.UTC().Format(time.RFC3339))
	}
	next := "/v1/notifications/webhooks-events?" + q.Encode()
	var out []keying.PlatformEvent
	for pages := 0; next != ""; pages++ {
		if pages == apiMaxPages {
			return out, fmt.Errorf("paypal: the event list goes on past %d pages", apiMaxPages)
		}
		var page struct {
			Events []json.RawMessage `json:"events"`
			Links  []link            `json:"links"`
		}
		if err := a.call(ctx, http.MethodGet, next, nil, &page); err != nil {
			return out, err
		}
		for _, raw := range page.Events {
			e, err := platformEvent(raw)
			if err != nil {
				return out, err
			}
			if !since.IsZero() && !e.At.IsZero() && e.At.Before(since) || !until.IsZero() && !e.At.Before(until) {
				continue // the window is half-open, whatever the API's ends are
			}
			out = append(out, e)
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
		}
		prev := next
		next = ""
		for _, l := range page.Links {
			if l.Rel == "next" && len(page.Events) > 0 {
				u, err := url.Parse(l.Href)
				if err != nil || u.Path == "" {
					return out, fmt.Errorf("paypal: the event list's next link %q is not a URL", l.Href)
				}
				next = u.EscapedPath()
				if u.RawQuery != "" {
					next += "?" + u.RawQuery
				}
				if next == prev {
					return out, errors.New("paypal: the event list's next link points at the same page")
				}
			}
		}
	}
	return out, nil
}

// platformEvent maps one listed event. Its money is what the PayPal
// preset reads from the same event as a notification
// (resource.amount); an event the preset could not read keeps no money.
// PayPal's list says nothing the read API trusts about delivery:
// Delivered stays false, and the gateway's own record decides.
func platformEvent(raw json.RawMessage) (keying.PlatformEvent, error) {
	var e apiEvent
	if err := json.Unmarshal(raw, &e); err != nil {
		return keying.PlatformEvent{}, fmt.Errorf("paypal: the event list holds an event that is not JSON: %v", err)
	}
	if e.ID == "" {
		return keying.PlatformEvent{}, errors.New("paypal: the event list holds an event with no id")
	}
	pe := keying.PlatformEvent{ID: e.ID, Type: e.EventType, Object: e.Resource.ID, At: keying.RFC3339Time(e.CreateTime)}
	pe.MerchantRef = e.Resource.InvoiceID
	if pe.MerchantRef == "" {
		pe.MerchantRef = e.Resource.CustomID
	}
	if n, err := (&PayPal{noVerify: true}).Verify(&keying.Request{Method: http.MethodPost, Body: raw}); err == nil {
		pe.Money = n.Money
	}
	return pe, nil
}

// Resend asks PayPal to deliver event id again to the route's webhook
// (POST …/webhooks-events/{id}/resend, {"webhook_ids": [<webhook id>]}):
// it arrives signed by PayPal, as any retry.
func (a *ReadAPI) Resend(ctx context.Context, id string) error {
	if a.webhookID == "" {
		return errors.New("paypal: resend needs the webhook id")
	}
	if id == "" {
		return errors.New("paypal: resend needs an event id")
	}
	body, _ := json.Marshal(map[string][]string{"webhook_ids": {a.webhookID}})
	return a.call(ctx, http.MethodPost, "/v1/notifications/webhooks-events/"+url.PathEscape(id)+"/resend", body, nil)
}

// call sends one request with a token and decodes a 2xx answer into out
// (nil: discarded). A 401 drops the token, so the next call asks anew.
func (a *ReadAPI) call(ctx context.Context, method, path string, body []byte, out any) error {
	token, err := a.accessToken(ctx)
	if err != nil {
		return err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return fmt.Errorf("paypal: %s %s: %v", method, pathOnly(path), err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	status, data, err := a.do(req)
	if err != nil {
		return fmt.Errorf("paypal: %s %s: %w", method, pathOnly(path), err)
	}
	if status == http.StatusUnauthorized {
		a.mu.Lock()
		if a.token == token {
			a.token = ""
		}
		a.mu.Unlock()
	}
	if err := a.statusErr(method+" "+pathOnly(path), status, data); err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("paypal: %s %s: the answer is not PayPal's JSON: %v", method, pathOnly(path), err)
		}
	}
	return nil
}

// accessToken is the cached OAuth2 token, or a new one (POST
// /v1/oauth2/token, grant_type=client_credentials, HTTP Basic id:secret).
func (a *ReadAPI) accessToken(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token != "" && a.now().Before(a.until) {
		return a.token, nil
	}
	const what = "POST /v1/oauth2/token"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/v1/oauth2/token",
		strings.NewReader("grant_type=client_credentials"))
	if err != nil {
		return "", fmt.Errorf("paypal: %s: %v", what, err)
	}
	req.SetBasicAuth(a.id, a.secret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	status, data, err := a.do(req)
	if err != nil {
		return "", fmt.Errorf("paypal: %s: %w", what, err)
	}
	if err := a.statusErr(what, status, data); err != nil {
		return "", err
	}
	var t struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(data, &t); err != nil || t.AccessToken == "" {
		return "", fmt.Errorf("paypal: %s: the answer holds no access_token", what)
	}
	a.token = t.AccessToken
	a.until = a.now().Add(time.Duration(t.ExpiresIn)*time.Second - tokenMargin)
	return a.token, nil
}

// do sends req and reads its answer, bounded.
func (a *ReadAPI) do(req *http.Request) (int, []byte, error) {
	resp, err := a.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			if ue.Timeout() {
				return 0, nil, fmt.Errorf("timed out: %w", ue.Err)
			}
			return 0, nil, ue.Err
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, apiMaxBody))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp.StatusCode, data, nil
}

// statusErr is nil for a 2xx, an error naming the status and PayPal's
// message otherwise; 401 and 403 wrap keying.ErrAPIRefused.
func (a *ReadAPI) statusErr(what string, status int, data []byte) error {
	if status/100 == 2 {
		return nil
	}
	msg := a.message(data)
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		return fmt.Errorf("paypal: %s: %w (%d): %s", what, keying.ErrAPIRefused, status, msg)
	}
	return fmt.Errorf("paypal: %s: status %d: %s", what, status, msg)
}

// message is PayPal's error (name and message, or OAuth2's error and
// error_description), credentials masked, cut short.
func (a *ReadAPI) message(data []byte) string {
	var e struct {
		Name       string `json:"name"`
		Message    string `json:"message"`
		OAuthError string `json:"error"`
		OAuthDesc  string `json:"error_description"`
	}
	msg := "no error message"
	if json.Unmarshal(data, &e) == nil {
		switch {
		case e.Name != "" || e.Message != "":
			msg = strings.TrimSpace(e.Name + ": " + e.Message)
		case e.OAuthError != "":
			msg = strings.TrimSpace(e.OAuthError + ": " + e.OAuthDesc)
		}
	}
	for _, s := range []string{a.secret, a.id} {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "<credential>")
		}
	}
	if r := []rune(msg); len(r) > 300 {
		msg = string(r[:300]) + "…"
	}
	return strconv.Quote(msg)
}

// pathOnly is path without its query, for errors.
func pathOnly(path string) string {
	p, _, _ := strings.Cut(path, "?")
	return p
}
