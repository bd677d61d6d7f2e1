package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"
)

// AlertConfig POSTs the handler's events as JSON to an operations
// endpoint: an alert, or the hook for the refund or reconciliation a
// business failure after payment requires. Delivery is off the request
// path: a bounded queue and one worker, a few bounded retries; a slow or
// dead endpoint never slows or fails a request (events that find the
// queue full are dropped and logged).
type AlertConfig struct {
	// URL is the endpoint (http or https).
	URL string `json:"url,omitempty"`
	// Events are the event names to send, without the "idempotency."
	// prefix: failed, last_retry, dead, ambiguous, conflict, lost_claim,
	// reconcile (a reconciliation found payments settled whose business
	// never ran). Default: failed, last_retry, dead, ambiguous, conflict,
	// reconcile.
	Events []string `json:"events,omitempty"`
}

var (
	alertEventNames   = []string{"failed", "last_retry", "dead", "ambiguous", "conflict", "lost_claim", "reconcile", "missing"}
	alertDefaultEvent = []string{"failed", "last_retry", "dead", "ambiguous", "conflict", "reconcile", "missing"}
)

const (
	alertQueue    = 1024
	alertAttempts = 4
	alertTimeout  = 5 * time.Second
)

// alerter is a running AlertConfig: started by Provision, stopped by
// Cleanup.
type alerter struct {
	url    string
	events map[string]bool
	logger *zap.Logger
	client *http.Client
	// backoff is the pause before each retry, the last repeated:
	// newAlerter sets it, only the worker reads it.
	backoff []time.Duration

	q        chan alertEvent
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	lastWarn time.Time
}

// alertEvent is the JSON an alert endpoint receives.
type alertEvent struct {
	Event    string    `json:"event"`
	Time     time.Time `json:"time"`
	Scope    string    `json:"scope"`
	Key      string    `json:"key"`
	Platform string    `json:"platform"`
	Status   int       `json:"status,omitempty"`
	Attempts int64     `json:"attempts,omitempty"`
	// Details are an event's own data beyond one key's (reconcile: its
	// counts and amounts).
	Details map[string]any `json:"details,omitempty"`
}

func (c *AlertConfig) validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("alert: want an http(s) URL, got %q", c.URL)
	}
	for _, e := range c.Events {
		if !slices.Contains(alertEventNames, e) {
			return fmt.Errorf("alert: unknown event %q (want %s)", e, strings.Join(alertEventNames, ", "))
		}
	}
	return nil
}

func newAlerter(c *AlertConfig, logger *zap.Logger) *alerter {
	events := c.Events
	if len(events) == 0 {
		events = alertDefaultEvent
	}
	a := &alerter{
		url: c.URL, events: map[string]bool{}, logger: logger,
		client:  &http.Client{Timeout: alertTimeout},
		backoff: []time.Duration{500 * time.Millisecond, 2 * time.Second, 5 * time.Second},
		q:       make(chan alertEvent, alertQueue), stop: make(chan struct{}), done: make(chan struct{}),
	}
	for _, e := range events {
		a.events["idempotency."+e] = true
	}
	go a.run()
	return a
}

// send queues an event; it never blocks.
func (a *alerter) send(e alertEvent) {
	if a == nil || !a.events[e.Event] {
		return
	}
	select {
	case a.q <- e:
	default:
		a.mu.Lock()
		warn := time.Since(a.lastWarn) > time.Minute
		if warn {
			a.lastWarn = time.Now()
		}
		a.mu.Unlock()
		if warn {
			a.logger.Warn("alert queue full: events dropped", zap.String("alert", a.url), zap.Int("queue", alertQueue))
		}
	}
}

func (a *alerter) run() {
	defer close(a.done)
	for {
		select {
		case <-a.stop:
			return
		case e := <-a.q:
			a.post(e)
		}
	}
}

// post sends one event, retrying a bounded number of times.
func (a *alerter) post(e alertEvent) {
	body, _ := json.Marshal(e)
	var err error
	for i := range alertAttempts {
		if i > 0 {
			t := time.NewTimer(a.backoff[min(i-1, len(a.backoff)-1)])
			select {
			case <-a.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		if err = a.postOnce(body); err == nil {
			return
		}
	}
	a.logger.Warn("alert endpoint failed: event not delivered",
		zap.String("alert", a.url), zap.String("event", e.Event), zap.Int("attempts", alertAttempts), zap.Error(err))
}

func (a *alerter) postOnce(body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), alertTimeout)
	defer cancel()
	go func() {
		select {
		case <-a.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "idemgate-alert")
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// close stops the worker; queued events are dropped (the config is going
// away; the next one has its own alerter).
func (a *alerter) close() {
	if a == nil {
		return
	}
	a.once.Do(func() {
		close(a.stop)
		<-a.done
	})
}

// parseAlert reads `alert <url> [<event>...]`.
func parseAlert(d *caddyfile.Dispenser) (*AlertConfig, error) {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return nil, d.ArgErr()
	}
	c := &AlertConfig{URL: args[0], Events: args[1:]}
	if err := c.validate(); err != nil {
		return nil, d.Err(err.Error())
	}
	return c, nil
}
