package platformapi

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
)

// PayPal is a stand-in of PayPal's webhook events API: POST
// /v1/oauth2/token (client credentials, HTTP Basic), GET
// /v1/notifications/webhooks-events (start_time, end_time, page_size up to
// 300; newest first; a rel=next link while more remain; events older than
// 30 days gone) and POST /v1/notifications/webhooks-events/{id}/resend
// (webhook_ids), which delivers the event to URL signed by Signer (PayPal's
// PAYPAL-TRANSMISSION-* headers over the CRC-32 of the body, with the
// signer's WebhookID), as a new transmission.
type PayPal struct {
	// ClientID and Secret are the REST app's credentials the token
	// endpoint accepts.
	ClientID, Secret string
	// Lacking names calls the app may not make: "list", "resend" (403
	// NOT_AUTHORIZED).
	Lacking []string
	// Signer signs deliveries (its Key is PayPal's, its WebhookID the
	// webhook's id a resend must name); URL is the webhook's listener.
	Signer signer.PayPal
	URL    string
	// TokenTTL is the tokens' expires_in; 0: 9 hours, as PayPal's.
	TokenTTL time.Duration
	// Client delivers; nil: a client with a 10s timeout.
	Client *http.Client
	// Now is the stand-in's clock; nil: time.Now.
	Now func() time.Time

	mu      sync.Mutex
	tokens  map[string]time.Time
	issued  int
	events  []paypalEvent
	resends map[string]int
	last    map[string]int
}

type paypalEvent struct {
	id      string
	created time.Time
	seq     int
	raw     json.RawMessage
}

func (p *PayPal) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Add holds event (a PayPal webhook event's JSON, with id and
// create_time) in the list.
func (p *PayPal) Add(event []byte) error {
	var e struct {
		ID         string `json:"id"`
		CreateTime string `json:"create_time"`
	}
	if err := json.Unmarshal(event, &e); err != nil {
		return fmt.Errorf("platformapi: paypal event: %v", err)
	}
	at, err := time.Parse(time.RFC3339, e.CreateTime)
	if e.ID == "" || err != nil {
		return fmt.Errorf("platformapi: paypal event needs an id and an RFC 3339 create_time")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, event); err != nil {
		return fmt.Errorf("platformapi: paypal event: %v", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, paypalEvent{id: e.ID, created: at, seq: len(p.events), raw: compact.Bytes()})
	sort.SliceStable(p.events, func(i, j int) bool {
		a, b := p.events[i], p.events[j]
		if !a.created.Equal(b.created) {
			return a.created.After(b.created)
		}
		return a.seq > b.seq
	})
	return nil
}

// Tokens is how many access tokens were issued.
func (p *PayPal) Tokens() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.issued
}

// Resends is how many resends of event id were asked for.
func (p *PayPal) Resends(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resends[id]
}

// LastStatus is the status the listener answered the last delivery of
// event id (0: none, or it could not be reached).
func (p *PayPal) LastStatus(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[id]
}

func (p *PayPal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if path == "/v1/oauth2/token" && r.Method == http.MethodPost {
		p.token(w, r)
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	p.mu.Lock()
	until, known := p.tokens[tok]
	p.mu.Unlock()
	if !ok || !known || !p.now().Before(until) {
		paypalError(w, 401, "AUTHENTICATION_FAILURE", "Authentication failed due to invalid authentication credentials or a missing Authorization header.")
		return
	}
	const events = "/v1/notifications/webhooks-events"
	switch {
	case path == events && r.Method == http.MethodGet:
		if p.lacks("list") {
			paypalError(w, 403, "NOT_AUTHORIZED", "Authorization failed due to insufficient permissions.")
			return
		}
		p.list(w, r)
	case strings.HasPrefix(path, events+"/") && strings.HasSuffix(path, "/resend") && r.Method == http.MethodPost:
		if p.lacks("resend") {
			paypalError(w, 403, "NOT_AUTHORIZED", "Authorization failed due to insufficient permissions.")
			return
		}
		p.resend(w, r, strings.TrimSuffix(strings.TrimPrefix(path, events+"/"), "/resend"))
	default:
		paypalError(w, 404, "RESOURCE_NOT_FOUND", "The specified resource does not exist.")
	}
}

func (p *PayPal) lacks(call string) bool {
	for _, c := range p.Lacking {
		if c == call {
			return true
		}
	}
	return false
}

func (p *PayPal) token(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		writeJSON(w, 400, []byte(`{"error":"unsupported_grant_type","error_description":"Grant Type is NULL"}`))
		return
	}
	if !ok || id != p.ClientID || secret != p.Secret {
		writeJSON(w, 401, []byte(`{"error":"invalid_client","error_description":"Client Authentication failed"}`))
		return
	}
	ttl := p.TokenTTL
	if ttl <= 0 {
		ttl = 9 * time.Hour
	}
	b := make([]byte, 24)
	rand.Read(b)
	tok := "A21AA" + hex.EncodeToString(b)
	p.mu.Lock()
	if p.tokens == nil {
		p.tokens = map[string]time.Time{}
	}
	p.tokens[tok] = p.now().Add(ttl)
	p.issued++
	p.mu.Unlock()
	body, _ := json.Marshal(map[string]any{
		"scope":        "https://uri.paypal.com/services/applications/webhooks",
		"access_token": tok, "token_type": "Bearer", "app_id": "APP-80W284485P519543T",
		"expires_in": int64(ttl / time.Second), "nonce": time.Now().UTC().Format(time.RFC3339) + hex.EncodeToString(b[:8]),
	})
	writeJSON(w, 200, body)
}

func (p *PayPal) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	size := 10
	if v := q.Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 300 {
			paypalError(w, 400, "INVALID_REQUEST", "page_size: must be between 1 and 300")
			return
		}
		size = n
	}
	var start, end time.Time
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"start_time", &start}, {"end_time", &end}} {
		if v := q.Get(b.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				paypalError(w, 400, "INVALID_REQUEST", b.name+": not a date-time")
				return
			}
			*b.t = t
		}
	}
	skip := 0
	if v := q.Get("next_page_token"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			paypalError(w, 400, "INVALID_REQUEST", "next_page_token: invalid")
			return
		}
		skip = n
	}
	oldest := p.now().Add(-eventRetention)
	p.mu.Lock()
	var match []json.RawMessage
	for _, e := range p.events {
		if e.created.Before(oldest) || !start.IsZero() && e.created.Before(start) || !end.IsZero() && e.created.After(end) {
			continue
		}
		match = append(match, e.raw)
	}
	p.mu.Unlock()
	page := []json.RawMessage{}
	if skip < len(match) {
		page = match[skip:min(len(match), skip+size)]
	}
	links := []map[string]string{}
	if skip+size < len(match) {
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("next_page_token", strconv.Itoa(skip+size))
		// PayPal's links name its own host.
		links = append(links, map[string]string{
			"href": "https://api-m.paypal.com/v1/notifications/webhooks-events?" + next.Encode(), "rel": "next", "method": "GET"})
	}
	body, err := json.Marshal(map[string]any{"events": page, "count": len(page), "links": links})
	if err != nil {
		paypalError(w, 500, "INTERNAL_SERVICE_ERROR", "An internal service error has occurred.")
		return
	}
	writeJSON(w, 200, body)
}

func (p *PayPal) resend(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		WebhookIDs []string `json:"webhook_ids"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			paypalError(w, 400, "MALFORMED_REQUEST", "The request JSON is not well formed.")
			return
		}
	}
	for _, wid := range req.WebhookIDs {
		if wid != p.Signer.WebhookID {
			paypalError(w, 404, "INVALID_RESOURCE_ID", "Webhook ID not found: "+wid)
			return
		}
	}
	p.mu.Lock()
	var raw json.RawMessage
	for _, e := range p.events {
		if e.id == id {
			raw = e.raw
		}
	}
	if raw == nil {
		p.mu.Unlock()
		paypalError(w, 404, "INVALID_RESOURCE_ID", "Requested resource ID was not found.")
		return
	}
	if p.resends == nil {
		p.resends, p.last = map[string]int{}, map[string]int{}
	}
	p.resends[id]++
	p.mu.Unlock()

	status := 0
	if hdr, err := p.Signer.Header(raw, p.now()); err == nil {
		if d, err := http.NewRequestWithContext(r.Context(), http.MethodPost, p.URL, bytes.NewReader(raw)); err == nil {
			d.Header = hdr
			d.Header.Set("User-Agent", "PayPal/AUHD-214.0-58433255")
			status = post(p.Client, d)
		}
	}
	p.mu.Lock()
	p.last[id] = status
	p.mu.Unlock()
	writeJSON(w, 202, raw)
}

// paypalError answers PayPal's error shape.
func paypalError(w http.ResponseWriter, status int, name, msg string) {
	body, _ := json.Marshal(map[string]any{"name": name, "message": msg, "debug_id": "f0f0f0f0f0f0f",
		"links": []map[string]string{{"href": "https://developer.paypal.com/docs/api/overview/#error", "rel": "information_link"}}})
	writeJSON(w, status, body)
}
