package gatewaytest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Alert is one alert as the route's `alert` endpoint receives it.
type Alert struct {
	Event    string         `json:"event"`
	Time     time.Time      `json:"time"`
	Scope    string         `json:"scope"`
	Key      string         `json:"key"`
	Platform string         `json:"platform"`
	Status   int            `json:"status,omitempty"`
	Attempts int64          `json:"attempts,omitempty"`
	Details  map[string]any `json:"details,omitempty"`
}

// AlertSink is an alert endpoint on a loopback port (URL) that collects
// the alerts posted to it.
type AlertSink struct {
	URL    string
	mu     sync.Mutex
	events []Alert
}

// NewAlertSink starts a sink for t.
func NewAlertSink(t testing.TB) *AlertSink {
	s := &AlertSink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e Alert
		_ = json.NewDecoder(r.Body).Decode(&e)
		s.mu.Lock()
		s.events = append(s.events, e)
		s.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Named are the alerts of event (idempotency.missing, …) so far.
func (s *AlertSink) Named(event string) []Alert {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Alert
	for _, e := range s.events {
		if e.Event == event {
			out = append(out, e)
		}
	}
	return out
}

// Count is how many alerts of event for key came so far.
func (s *AlertSink) Count(event, key string) int {
	n := 0
	for _, e := range s.Named(event) {
		if e.Key == key {
			n++
		}
	}
	return n
}
