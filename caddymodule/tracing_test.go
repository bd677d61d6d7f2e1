package caddymodule

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// spanTap is a test-only handler placed after Caddy's tracing handler: it
// attaches spanRecorder to the TracerProvider of the request's span —
// Caddy's own SDK provider — so the test sees every span that provider
// ends from then on, Caddy's request span and the decision span included.
type spanTap struct{}

var (
	spanRecorder = tracetest.NewSpanRecorder()
	tappedMu     sync.Mutex
	tapped       = map[*sdktrace.TracerProvider]bool{}
)

func init() {
	caddy.RegisterModule(spanTap{})
	httpcaddyfile.RegisterHandlerDirective("idemgate_test_span_tap", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		h.Next()
		return spanTap{}, nil
	})
}

func (spanTap) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.idemgate_test_span_tap", New: func() caddy.Module { return spanTap{} }}
}

func (spanTap) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if tp, ok := trace.SpanFromContext(r.Context()).TracerProvider().(*sdktrace.TracerProvider); ok {
		tappedMu.Lock()
		if !tapped[tp] {
			tapped[tp] = true
			tp.RegisterSpanProcessor(spanRecorder)
		}
		tappedMu.Unlock()
	}
	return next.ServeHTTP(w, r)
}

// TestDecisionSpans: with Caddy's tracing handler on the route, each
// decision is a span, child of Caddy's request span (same provider), with
// the outcome and a hash of the key, never the key.
func TestDecisionSpans(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	be := newBackend(t)
	base := startCaddy(t, `
	route /notify {
		tracing {
			span gateway_request
		}
		idemgate_test_span_tap
		idempotency {
			key {idempotency.form.out_trade_no}
			scope demo
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())

	const order = "secret-order-77"
	before := len(spanRecorder.Ended()) // spans of earlier runs (-count)
	key := "demo:" + order
	var want []string
	for _, outcome := range []string{"forwarded", "replayed", "replayed"} {
		notify(t, base, order)
		want = append(want, outcome)
	}

	// Caddy's span ends after the handler chain returns, just after the
	// client got its answer.
	var spans []sdktrace.ReadOnlySpan
	eventually(t, 5*time.Second, "three decision spans with their request spans", func() bool {
		spans = spans[:0]
		for _, s := range spanRecorder.Ended()[before:] {
			if s.Name() == "idempotency" || s.Name() == "gateway_request" {
				spans = append(spans, s)
			}
		}
		return countNamed(spans, "idempotency") == 3 && countNamed(spans, "gateway_request") == 3
	})

	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	var got []string
	for _, s := range spans {
		if s.Name() != "idempotency" {
			continue
		}
		parent, ok := byID[s.Parent().SpanID()]
		if !ok || parent.Name() != "gateway_request" || parent.SpanKind() != trace.SpanKindServer ||
			parent.SpanContext().TraceID() != s.SpanContext().TraceID() {
			t.Errorf("decision span's parent is %v (%v), want Caddy's request span", s.Parent(), ok)
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
			if strings.Contains(kv.Value.Emit(), order) {
				t.Errorf("attribute %s carries the raw key: %q", kv.Key, kv.Value.Emit())
			}
		}
		if attrs["idempotency.key_hash"] != app.HashKey(key) || attrs["idempotency.platform"] != "generic" {
			t.Errorf("decision span attributes %v", attrs)
		}
		got = append(got, attrs["idempotency.outcome"])
	}
	slices.Sort(got)
	if strings.Join(got, ",") != "forwarded,replayed,replayed" {
		t.Errorf("outcomes %v, want %v", got, want)
	}
}

func countNamed(spans []sdktrace.ReadOnlySpan, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name() == name {
			n++
		}
	}
	return n
}

// TestDecisionLogs: one line per decision through the handler's zap
// logger, at the contract's levels, with the key hashed unless log_keys.
func TestDecisionLogs(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	newHandler := func(t *testing.T, logKeys bool) *Handler {
		h := &Handler{Key: "{idempotency.form.out_trade_no}", Scope: "demo", Fingerprint: "{idempotency.form.total_amount}",
			Store: &StoreConfig{Type: "memory"}, WarnCopies: 2, LogKeys: logKeys}
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		t.Cleanup(cancel)
		if err := h.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.Validate(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Cleanup() })
		useLogger(h, zap.New(core))
		return h
	}
	backend := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(200)
		w.Write([]byte("ok"))
		return nil
	})
	send := func(h *Handler, next caddyhttp.Handler, order, amount string) int {
		form := url.Values{"out_trade_no": {order}, "total_amount": {amount}}.Encode()
		r := httptest.NewRequest(http.MethodPost, "/notify", bytes.NewBufferString(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, next); err != nil {
			var he caddyhttp.HandlerError
			if errors.As(err, &he) {
				return he.StatusCode
			}
			return 500
		}
		return w.Code
	}
	type line struct {
		level          zapcore.Level
		msg            string
		outcome, key   string
		copies         int64
		copiesOmitted  bool
		errorSubstring string
	}
	check := func(t *testing.T, want line) {
		t.Helper()
		all := logs.TakeAll()
		if len(all) != 1 {
			t.Fatalf("%d log lines, want 1: %v", len(all), all)
		}
		e := all[0]
		f := e.ContextMap()
		if e.Level != want.level || !strings.Contains(e.Message, want.msg) || f["outcome"] != want.outcome || f["key"] != want.key {
			t.Errorf("log line %v %q %v, want %v %q outcome=%s key=%s", e.Level, e.Message, f, want.level, want.msg, want.outcome, want.key)
		}
		if want.copies > 0 && f["copies"] != want.copies {
			t.Errorf("copies %v, want %d", f["copies"], want.copies)
		}
		if f["platform"] != "generic" {
			t.Errorf("platform %v", f["platform"])
		}
		if want.errorSubstring != "" && !strings.Contains(fmtField(f["error"]), want.errorSubstring) {
			t.Errorf("error field %v, want %q", f["error"], want.errorSubstring)
		}
	}

	t.Run("hashed", func(t *testing.T) {
		h := newHandler(t, false)
		key := "demo:log-1"
		send(h, backend, "log-1", "1")
		check(t, line{level: zapcore.InfoLevel, msg: "idempotency decision", outcome: "forwarded", key: app.HashKey(key)})
		send(h, backend, "log-1", "1")
		// Replays are routine: debug.
		check(t, line{level: zapcore.DebugLevel, msg: "idempotency decision", outcome: "replayed", key: app.HashKey(key), copies: 2})
		send(h, backend, "log-1", "1") // copies 3 > warn_copies 2: warned the first time
		check(t, line{level: zapcore.WarnLevel, msg: "more often than warn_copies", outcome: "replayed", key: app.HashKey(key), copies: 3})
		send(h, backend, "log-1", "1") // and then at most once a minute
		check(t, line{level: zapcore.DebugLevel, msg: "idempotency decision", outcome: "replayed", key: app.HashKey(key), copies: 4})
		if status := send(h, backend, "log-1", "2"); status != 422 {
			t.Fatalf("conflict: %d", status)
		}
		check(t, line{level: zapcore.ErrorLevel, msg: "possible tampering", outcome: "conflict", key: app.HashKey(key), errorSubstring: "different fingerprint"})
	})

	t.Run("backend failure", func(t *testing.T) {
		h := newHandler(t, false)
		failing := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(503)
			return nil
		})
		if status := send(h, failing, "log-f", "1"); status != 503 {
			t.Fatalf("failing backend: %d", status)
		}
		all := logs.TakeAll()
		if len(all) != 1 || all[0].Level != zapcore.WarnLevel || all[0].ContextMap()["upstream_status"] != int64(503) ||
			all[0].ContextMap()["outcome"] != "backend_failed" {
			t.Fatalf("backend failure logs: %v", all)
		}
	})

	t.Run("log_keys", func(t *testing.T) {
		h := newHandler(t, true)
		send(h, backend, "log-2", "1")
		check(t, line{level: zapcore.InfoLevel, msg: "idempotency decision", outcome: "forwarded", key: "demo:log-2"})
	})

	t.Run("lost claim", func(t *testing.T) {
		h := newHandler(t, false)
		// The key is purged while its copy is at the backend: the answer
		// cannot be remembered, which is logged at error level.
		purging := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			if err := h.store.(store.Recovery).Delete(r.Context(), "demo:log-3"); err != nil {
				t.Errorf("purge: %v", err)
			}
			return backend(w, r)
		})
		send(h, purging, "log-3", "1")
		all := logs.TakeAll()
		if len(all) != 2 || all[0].Level != zapcore.ErrorLevel || !strings.Contains(all[0].Message, "lost the claim") ||
			all[0].ContextMap()["op"] != "complete" || all[0].ContextMap()["key"] != app.HashKey("demo:log-3") {
			t.Fatalf("lost claim logs: %v", all)
		}
	})
}

func fmtField(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}
