package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// DefaultAPI is Stripe's API: where the read API goes without a BaseURL.
const DefaultAPI = "https://api.stripe.com"

// apiTimeout bounds a call when APIConfig names no client.
const apiTimeout = 10 * time.Second

// apiMaxBody bounds one answer read from the API (a page of 100 events).
const apiMaxBody = 16 << 20

// apiMaxPages bounds the pages one Events call follows (100 each).
const apiMaxPages = 1000

// NewReadAPI is Stripe's read API: a keying.EventLister over Stripe's
// event list (GET /v1/events, a restricted key with Events: Read) and its
// retry (POST /v1/events/{id}/retry, Events: Write).
//
// cfg.Key is the restricted key (rk_…; a secret key sk_… works too), sent
// as "Authorization: Bearer"; cfg.Merchant is the webhook endpoint's id
// (we_…) a resend is delivered to, as Stripe CLI's `events resend
// --webhook-endpoint` sends it (webhook_endpoint=we_…). Without it Resend
// refuses: Stripe CLI's default, for_stripecli=true, would send the event
// to a CLI listener, not to the gateway.
func NewReadAPI(cfg keying.APIConfig) (any, error) {
	key := strings.TrimSpace(string(cfg.Key))
	if key == "" {
		return nil, errors.New("stripe: the read API needs an API key (a restricted key with Events: Read)")
	}
	base := strings.TrimRight(strings.TrimSpace(cfg.BaseURL), "/")
	if base == "" {
		base = DefaultAPI
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("stripe: api %q is not an http(s) URL", base)
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: apiTimeout}
	}
	return &ReadAPI{base: base, key: key, endpoint: strings.TrimSpace(cfg.Merchant), client: client}, nil
}

// ReadAPI is Stripe's keying.EventLister (NewReadAPI).
type ReadAPI struct {
	base, key, endpoint string
	client              *http.Client
}

// apiEvent is what the read API takes from an event of Stripe's list; the
// money comes from the whole event, as its notification's would.
type apiEvent struct {
	ID              string `json:"id"`
	Type            string `json:"type"`
	Created         int64  `json:"created"`
	PendingWebhooks int64  `json:"pending_webhooks"`
	Data            struct {
		Object struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		} `json:"object"`
	} `json:"data"`
}

// Events lists the events created in [since, until), newest first (as
// Stripe lists them), paging with starting_after while has_more, at most
// limit (none when limit <= 0). A zero since or until leaves that end
// open. Stripe keeps events for 30 days.
func (a *ReadAPI) Events(ctx context.Context, since, until time.Time, limit int) ([]keying.PlatformEvent, error) {
	q := url.Values{"limit": {"100"}}
	if !since.IsZero() {
		q.Set("created[gte]", strconv.FormatInt(since.Unix(), 10))
	}
	if !until.IsZero() {
		q.Set("created[lt]", strconv.FormatInt(until.Unix(), 10))
	}
	var out []keying.PlatformEvent
	for pages := 0; ; pages++ {
		if pages == apiMaxPages {
			return out, fmt.Errorf("stripe: the event list goes on past %d pages", apiMaxPages)
		}
		var page struct {
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		if err := a.call(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &page); err != nil {
			return out, err
		}
		last := ""
		for _, raw := range page.Data {
			e, err := platformEvent(raw)
			if err != nil {
				return out, err
			}
			out = append(out, e)
			last = e.ID
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
		}
		if !page.HasMore || last == "" {
			return out, nil
		}
		if last == q.Get("starting_after") {
			return out, errors.New("stripe: the event list's next page starts where this one did")
		}
		q.Set("starting_after", last)
	}
}

// platformEvent maps one listed event. Its money is what the Stripe
// preset reads from the same event as a notification (data.object's
// amount and currency; a charge.refunded's increase of amount_refunded
// over data.previous_attributes); an event the preset could not read
// (a malformed amount) keeps no money: the gateway's record decides.
func platformEvent(raw json.RawMessage) (keying.PlatformEvent, error) {
	var e apiEvent
	if err := json.Unmarshal(raw, &e); err != nil {
		return keying.PlatformEvent{}, fmt.Errorf("stripe: the event list holds an event that is not JSON: %v", err)
	}
	if e.ID == "" {
		return keying.PlatformEvent{}, errors.New("stripe: the event list holds an event with no id")
	}
	pe := keying.PlatformEvent{
		ID: e.ID, Type: e.Type, Object: e.Data.Object.ID,
		MerchantRef: e.Data.Object.Metadata["order_id"],
		Delivered:   e.PendingWebhooks == 0,
	}
	if e.Created > 0 {
		pe.At = time.Unix(e.Created, 0)
	}
	if n, err := (&Stripe{noVerify: true}).Verify(&keying.Request{Method: http.MethodPost, Body: raw}); err == nil {
		pe.Money = n.Money
	}
	return pe, nil
}

// Resend asks Stripe to deliver event id again to the webhook endpoint
// (POST /v1/events/{id}/retry, webhook_endpoint=we_…): it arrives signed
// by Stripe with the endpoint's secret, as any retry.
func (a *ReadAPI) Resend(ctx context.Context, id string) error {
	if a.endpoint == "" {
		return errors.New("stripe: resend needs the webhook endpoint's id (we_…)")
	}
	if id == "" {
		return errors.New("stripe: resend needs an event id")
	}
	body := url.Values{"webhook_endpoint": {a.endpoint}}.Encode()
	return a.call(ctx, http.MethodPost, "/v1/events/"+url.PathEscape(id)+"/retry", strings.NewReader(body), nil)
}

// call sends one request with the key and decodes a 2xx answer into out
// (nil: discarded). 401 and 403 wrap keying.ErrAPIRefused with Stripe's
// message, any key in it masked.
func (a *ReadAPI) call(ctx context.Context, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return fmt.Errorf("stripe: %s %s: %v", method, pathOnly(path), err)
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("stripe: %s %s: %w", method, pathOnly(path), unwrapURL(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, apiMaxBody))
	if err != nil {
		return fmt.Errorf("stripe: %s %s: reading the answer: %w", method, pathOnly(path), err)
	}
	if resp.StatusCode/100 != 2 {
		msg := a.message(data)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return fmt.Errorf("stripe: %s %s: %w (%d): %s", method, pathOnly(path), keying.ErrAPIRefused, resp.StatusCode, msg)
		}
		return fmt.Errorf("stripe: %s %s: status %d: %s", method, pathOnly(path), resp.StatusCode, msg)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("stripe: %s %s: the answer is not Stripe's JSON: %v", method, pathOnly(path), err)
	}
	return nil
}

// stripeKeyRE finds what looks like a Stripe key in a message (Stripe's
// own messages name the key, partly masked).
var stripeKeyRE = regexp.MustCompile(`\b(sk|rk|pk)_(test|live)_[A-Za-z0-9*_.]*`)

// message is Stripe's error message (error.message; the permission a
// restricted key lacks is named there), with any key masked, cut short.
func (a *ReadAPI) message(data []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := "no error message"
	if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	msg = strings.ReplaceAll(msg, a.key, "<key>")
	msg = stripeKeyRE.ReplaceAllString(msg, "<key>")
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

// unwrapURL drops url.Error's method and URL (the error names them
// already) but keeps what went wrong (a refused connection, the client's
// timeout).
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("timed out: %w", ue.Err)
		}
		return ue.Err
	}
	return err
}
