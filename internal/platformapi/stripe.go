// Package platformapi holds local stand-ins of the platforms' read APIs
// (the missing-notifications work, 补单): Stripe's event list and retry,
// PayPal's webhook event list and resend. Each is an http.Handler for an
// httptest server or a laptop example; it requires the credentials,
// pages as the platform does, answers errors in the platform's shape, and
// on a resend delivers the event to the configured URL signed as the
// platform does (Stripe with stripe-go's own signer, PayPal with
// internal/signer's), counting resends.
//
// Test support and example use only: nothing in the gateway imports it.
package platformapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// eventRetention is how long the platforms list an event (30 days).
const eventRetention = 30 * 24 * time.Hour

// Stripe is a stand-in of Stripe's event API: GET /v1/events (created[gte],
// created[gt], created[lt], created[lte], limit up to 100, starting_after;
// newest first; events older than 30 days gone) and POST
// /v1/events/{id}/retry (webhook_endpoint), which delivers the event to
// URL with a Stripe-Signature made by stripe-go's signer with Secret, and
// sets its pending_webhooks to 0 once the endpoint answers 2xx.
type Stripe struct {
	// Key is the API key the stand-in accepts (Bearer, or Basic as the
	// username, as Stripe does).
	Key string
	// Lacking names permissions the key does not have: "rak_event_read"
	// (the list) and "rak_event_write" (retry) are refused with 403 and
	// Stripe's message.
	Lacking []string
	// Endpoint is the webhook endpoint's id (we_…) a retry must name;
	// Secret its signing secret (whsec_…); URL where it delivers.
	Endpoint, Secret, URL string
	// Client delivers; nil: a client with a 10s timeout.
	Client *http.Client
	// Now is the stand-in's clock; nil: time.Now.
	Now func() time.Time

	mu      sync.Mutex
	events  []stripeEvent
	resends map[string]int
	last    map[string]int
}

type stripeEvent struct {
	id      string
	created int64
	seq     int
	obj     map[string]any
}

// NewStripe is a stand-in accepting key, whose endpoint we_… has the
// signing secret and delivers to deliverTo.
func NewStripe(key, endpoint, secret, deliverTo string) *Stripe {
	return &Stripe{Key: key, Endpoint: endpoint, Secret: secret, URL: deliverTo}
}

func (s *Stripe) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Add holds event (a Stripe event's JSON, with id and created) in the
// list.
func (s *Stripe) Add(event []byte) error {
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(event))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil {
		return fmt.Errorf("platformapi: stripe event: %v", err)
	}
	id, _ := obj["id"].(string)
	created, err := obj["created"].(json.Number).Int64()
	if id == "" || err != nil {
		return fmt.Errorf("platformapi: stripe event needs an id and created")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, stripeEvent{id: id, created: created, seq: len(s.events), obj: obj})
	// Newest first, as Stripe lists; of one second, the later added first.
	sort.SliceStable(s.events, func(i, j int) bool {
		a, b := s.events[i], s.events[j]
		if a.created != b.created {
			return a.created > b.created
		}
		return a.seq > b.seq
	})
	return nil
}

// Resends is how many retries of event id were asked for.
func (s *Stripe) Resends(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resends[id]
}

// LastStatus is the status the endpoint answered the last delivery of
// event id (0: none, or it could not be reached).
func (s *Stripe) LastStatus(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[id]
}

func (s *Stripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := ""
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		key = v
	} else if u, _, ok := r.BasicAuth(); ok {
		key = u
	}
	switch {
	case key == "":
		stripeError(w, 401, "invalid_request_error", "", "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').")
		return
	case key != s.Key:
		stripeError(w, 401, "invalid_request_error", "", "Invalid API Key provided: "+maskKey(key))
		return
	}
	path := r.URL.Path
	switch {
	case path == "/v1/events" && r.Method == http.MethodGet:
		if s.lacks("rak_event_read") {
			s.permission(w, "rak_event_read")
			return
		}
		s.list(w, r)
	case strings.HasPrefix(path, "/v1/events/") && strings.HasSuffix(path, "/retry") && r.Method == http.MethodPost:
		if s.lacks("rak_event_write") {
			s.permission(w, "rak_event_write")
			return
		}
		s.retry(w, r, strings.TrimSuffix(strings.TrimPrefix(path, "/v1/events/"), "/retry"))
	default:
		stripeError(w, 404, "invalid_request_error", "", fmt.Sprintf("Unrecognized request URL (%s: %s).", r.Method, path))
	}
}

func (s *Stripe) lacks(perm string) bool {
	for _, p := range s.Lacking {
		if p == perm {
			return true
		}
	}
	return false
}

func (s *Stripe) permission(w http.ResponseWriter, perm string) {
	stripeError(w, 403, "invalid_request_error", "", fmt.Sprintf(
		"The provided key '%s' does not have the required permissions for this endpoint on account 'acct_1StandIn'. Having the '%s' permission would allow this request to continue.",
		maskKey(s.Key), perm))
}

func (s *Stripe) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			stripeError(w, 400, "invalid_request_error", "parameter_invalid_integer", "Invalid integer: "+v)
			return
		}
		limit = n
	}
	bound := func(name string) (int64, bool, bool) {
		v := q.Get("created[" + name + "]")
		if v == "" {
			return 0, false, true
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			stripeError(w, 400, "invalid_request_error", "parameter_invalid_integer", "Invalid integer: "+v)
			return 0, false, false
		}
		return n, true, true
	}
	gte, hasGte, ok1 := bound("gte")
	gt, hasGt, ok2 := bound("gt")
	lt, hasLt, ok3 := bound("lt")
	lte, hasLte, ok4 := bound("lte")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return
	}
	oldest := s.now().Add(-eventRetention).Unix()
	after := q.Get("starting_after")

	s.mu.Lock()
	var page []any
	hasMore := false
	started := after == ""
	found := started
	for _, e := range s.events {
		if !started {
			if e.id == after {
				started, found = true, true
			}
			continue
		}
		if e.created < oldest || hasGte && e.created < gte || hasGt && e.created <= gt ||
			hasLt && e.created >= lt || hasLte && e.created > lte {
			continue
		}
		if len(page) == limit {
			hasMore = true
			break
		}
		page = append(page, e.obj)
	}
	body, err := json.Marshal(map[string]any{"object": "list", "url": "/v1/events", "has_more": hasMore, "data": nonNil(page)})
	s.mu.Unlock()
	if !found {
		stripeError(w, 400, "invalid_request_error", "resource_missing", fmt.Sprintf("No such event: '%s'", after))
		return
	}
	if err != nil {
		stripeError(w, 500, "api_error", "", err.Error())
		return
	}
	writeJSON(w, 200, body)
}

func (s *Stripe) retry(w http.ResponseWriter, r *http.Request, id string) {
	if err := r.ParseForm(); err != nil {
		stripeError(w, 400, "invalid_request_error", "", "Invalid request body")
		return
	}
	if ep := r.PostForm.Get("webhook_endpoint"); ep != s.Endpoint {
		if ep == "" {
			stripeError(w, 400, "invalid_request_error", "parameter_missing", "Missing required param: webhook_endpoint.")
		} else {
			stripeError(w, 400, "invalid_request_error", "resource_missing", fmt.Sprintf("No such webhook endpoint: '%s'", ep))
		}
		return
	}
	s.mu.Lock()
	var obj map[string]any // the event's, shared with the list
	for _, e := range s.events {
		if e.id == id {
			obj = e.obj
		}
	}
	if obj == nil {
		s.mu.Unlock()
		stripeError(w, 404, "invalid_request_error", "resource_missing", fmt.Sprintf("No such event: '%s'", id))
		return
	}
	if s.resends == nil {
		s.resends, s.last = map[string]int{}, map[string]int{}
	}
	s.resends[id]++
	body, err := json.MarshalIndent(obj, "", "  ")
	s.mu.Unlock()
	if err != nil {
		stripeError(w, 500, "api_error", "", err.Error())
		return
	}
	status := s.deliver(r, body)
	s.mu.Lock()
	s.last[id] = status
	if status/100 == 2 {
		obj["pending_webhooks"] = json.Number("0")
	}
	answer, err := json.Marshal(obj)
	s.mu.Unlock()
	if err != nil {
		stripeError(w, 500, "api_error", "", err.Error())
		return
	}
	writeJSON(w, 200, answer)
}

// deliver posts body to URL signed as Stripe signs (stripe-go's signer,
// Stripe-Signature t=…,v1=…), and returns the endpoint's status (0 when
// it could not be reached).
func (s *Stripe) deliver(r *http.Request, body []byte) int {
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: s.Secret, Timestamp: s.now()})
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Stripe-Signature", sp.Header)
	return post(s.Client, req)
}

// post sends req and returns the status (0 on error).
func post(c *http.Client, req *http.Request) int {
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode
}

// maskKey writes a key as Stripe's messages do: its prefix, stars, its
// last four characters.
func maskKey(k string) string {
	prefix := ""
	if i := strings.LastIndex(k, "_"); i >= 0 && i < 8 {
		prefix = k[:i+1]
	}
	tail := ""
	if len(k) > len(prefix)+4 {
		tail = k[len(k)-4:]
	}
	return prefix + "*********" + tail
}

// stripeError answers Stripe's error shape.
func stripeError(w http.ResponseWriter, status int, typ, code, msg string) {
	e := map[string]string{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	body, _ := json.Marshal(map[string]any{"error": e})
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

func nonNil(v []any) []any {
	if v == nil {
		return []any{}
	}
	return v
}

// StripeEvent is a Stripe event as Stripe's API lists and delivers one:
// of eventType, created at the given time, data.object the JSON object,
// data.previous_attributes the JSON previous (none when empty),
// pending_webhooks as given, and the api_version of stripe-go (so that
// its webhook.ConstructEvent accepts the delivery).
func StripeEvent(id, eventType string, created time.Time, object, previous string, pending int) []byte {
	data := `{"object": ` + object + `}`
	if previous != "" {
		data = `{"object": ` + object + `, "previous_attributes": ` + previous + `}`
	}
	return []byte(fmt.Sprintf(`{
  "id": %q,
  "object": "event",
  "api_version": %q,
  "created": %d,
  "data": %s,
  "livemode": false,
  "pending_webhooks": %d,
  "request": {"id": null, "idempotency_key": null},
  "type": %q
}`, id, stripe.APIVersion, created.Unix(), data, pending, eventType))
}
