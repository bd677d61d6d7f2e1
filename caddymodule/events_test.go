package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
)

// eventTap is an events handler for tests: it keeps every event it sees.
type eventTap struct{}

var (
	tappedEventsMu sync.Mutex
	tappedEvents   []caddy.Event
)

func init() { caddy.RegisterModule(eventTap{}) }

func (eventTap) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "events.handlers.idemgate_test_tap", New: func() caddy.Module { return new(eventTap) }}
}

func (eventTap) Handle(_ context.Context, e caddy.Event) error {
	tappedEventsMu.Lock()
	tappedEvents = append(tappedEvents, e)
	tappedEventsMu.Unlock()
	return nil
}

func eventsNamed(name, key string) []caddy.Event {
	tappedEventsMu.Lock()
	defer tappedEventsMu.Unlock()
	var out []caddy.Event
	for _, e := range tappedEvents {
		if e.Name() == name && e.Data["key"] == key {
			out = append(out, e)
		}
	}
	return out
}

// loadTapped runs caddyfile with the test tap subscribed to events (the
// Caddyfile has no events option: the subscription goes in its JSON), the
// tap emptied of an earlier run's events (-count).
func loadTapped(t *testing.T, caddyfile string, events ...string) {
	t.Helper()
	tappedEventsMu.Lock()
	tappedEvents = nil
	tappedEventsMu.Unlock()
	cfgJSON, _, err := caddyfileAdapter().Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["apps"].(map[string]any)["events"] = map[string]any{"subscriptions": []any{map[string]any{
		"events":   events,
		"handlers": []any{map[string]any{"handler": "idemgate_test_tap"}},
	}}}
	cfgJSON, _ = json.Marshal(cfg)
	if err := caddy.Load(cfgJSON, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caddy.Stop() })
}

// TestEvents: a failed backend answer and a fingerprint conflict are Caddy
// events, with scope, key, platform and the upstream status, so any events
// handler can alert or start a refund.
func TestEvents(t *testing.T) {
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if order == "ev-fail" {
			return 500, "down", 0
		}
		return 200, "ok", 0
	})
	port := freePort(t)
	loadTapped(t, `{
	admin off
	persist_config off
	storage file_system `+t.TempDir()+`
}
http://127.0.0.1:`+itoa(port)+` {
	handle /notify {
		idempotency {
			key demo:{idempotency.form.out_trade_no}
			fingerprint {idempotency.form.total_amount}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
}`, "idempotency.failed", "idempotency.conflict")
	base := "http://127.0.0.1:" + itoa(port)
	waitListening(t, base)

	if r := notify(t, base, "ev-fail"); r.status != 500 {
		t.Fatalf("failing backend: %d", r.status)
	}
	if r := notify(t, base, "ev-ok"); r.status != 200 {
		t.Fatalf("ok: %d", r.status)
	}
	if r := notify(t, base, "ev-ok", "total_amount", "999"); r.status != 422 {
		t.Fatalf("conflict: %d", r.status)
	}
	failed := eventsNamed("idempotency.failed", "generic:demo:ev-fail")
	if len(failed) != 1 || failed[0].Data["status"] != 500 || failed[0].Data["scope"] != "generic" || failed[0].Data["platform"] != "generic" {
		t.Fatalf("idempotency.failed events: %+v", failed)
	}
	if c := eventsNamed("idempotency.conflict", "generic:demo:ev-ok"); len(c) != 1 {
		t.Fatalf("idempotency.conflict events: %+v", c)
	}
	if ok := eventsNamed("idempotency.failed", "generic:demo:ev-ok"); len(ok) != 0 {
		t.Fatalf("a success emitted failed: %+v", ok)
	}
}

// TestPersistenceWarning: a Redis store without AOF or RDB is warned about
// at start; one with AOF is not.
func TestPersistenceWarning(t *testing.T) {
	for _, c := range []struct {
		name string
		opts redistest.Options
		warn bool
	}{{"no persistence", redistest.Options{}, true}, {"aof", redistest.Options{AOF: true}, false}} {
		t.Run(c.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.WarnLevel)
			rs := redistest.StartWith(t, c.opts)
			w, err := checkRedis(rs.Client(), store.NewRedis(rs.Client(), store.RedisOptions{}),
				StoreConfig{Type: "redis", Addresses: []string{rs.Addr()}}, 2*time.Second, zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			got := logs.FilterMessageSnippet("neither AOF nor RDB").Len()
			if (got == 1) != c.warn {
				t.Fatalf("%d persistence warnings, want warn=%v: %v", got, c.warn, logs.All())
			}
		})
	}
}

var _ caddyevents.Handler = eventTap{}
