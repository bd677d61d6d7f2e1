package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// stallLog is a Caddy log writer (`output idemgate_stall`) whose writes
// wait while the test holds it, as a log on a slow disk or a full pipe
// does, and which keeps what was written.
type stallLog struct{}

var stall = struct {
	mu   sync.Mutex
	held chan struct{} // closed: writes go through
	buf  bytes.Buffer
}{held: closedChan()}

func closedChan() chan struct{} { c := make(chan struct{}); close(c); return c }

func init() { caddy.RegisterModule(stallLog{}) }

func (stallLog) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "caddy.logging.writers.idemgate_stall", New: func() caddy.Module { return new(stallLog) }}
}
func (stallLog) String() string                                 { return "idemgate_stall" }
func (stallLog) WriterKey() string                              { return "idemgate_stall" }
func (stallLog) OpenWriter() (io.WriteCloser, error)            { return stallWriter{}, nil }
func (*stallLog) UnmarshalCaddyfile(*caddyfile.Dispenser) error { return nil }

type stallWriter struct{}

func (stallWriter) Write(p []byte) (int, error) {
	stall.mu.Lock()
	held := stall.held
	stall.mu.Unlock()
	<-held
	stall.mu.Lock()
	defer stall.mu.Unlock()
	return stall.buf.Write(p)
}
func (stallWriter) Close() error { return nil }

// TestDecisionLineAfterAnswer: the decision line is written after the
// answer, not before it: with Caddy's log stalled, the platform still gets
// its answer, and the line follows once the log moves again.
func TestDecisionLineAfterAnswer(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	base := startCaddyWith(t, caddyGlobals{log: "output idemgate_stall\n\t\tformat json\n\t\tlevel INFO"}, `
	idempotency {
		key {idempotency.form.out_trade_no}
		store memory
	}
	reverse_proxy `+be.Addr())
	release := make(chan struct{})
	stall.mu.Lock()
	stall.held = release
	stall.buf.Reset()
	stall.mu.Unlock()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // Caddy's stop logs too

	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.PostForm(base+"/notify", url.Values{"out_trade_no": {"after-1"}})
	if err != nil {
		t.Fatalf("no answer while the log stalls: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	free()
	gatewaytest.Eventually(t, 5*time.Second, "the decision line", func() bool {
		stall.mu.Lock()
		defer stall.mu.Unlock()
		s := stall.buf.String()
		return strings.Contains(s, `"msg":"idempotency decision"`) && strings.Contains(s, `"outcome":"forwarded"`)
	})
}

// TestLineQueue: every line queued is written, in order while the queue
// has room, those of a full queue by their callers; close writes what is
// left, and a line after close is written at once.
func TestLineQueue(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	q := newLineQueue()
	l := q.logger(zap.New(core).Named("http.handlers.idempotency"))
	l.Debug("below the level")
	const n = 3 * lineQueueSize
	for i := range n {
		l.Info("idempotency decision", zap.Int("i", i))
	}
	q.close()
	l.Info("after close")
	all := logs.AllUntimed()
	if len(all) != n+1 || all[n].Message != "after close" {
		t.Fatalf("%d lines written, want %d and the one after close last", len(all), n+1)
	}
	seen := make(map[int64]bool)
	for _, e := range all[:n] {
		if e.LoggerName != "http.handlers.idempotency" || e.Level != zapcore.InfoLevel {
			t.Fatalf("line %+v", e.Entry)
		}
		seen[e.ContextMap()["i"].(int64)] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct lines of %d", len(seen), n)
	}

	core, logs = observer.New(zapcore.InfoLevel)
	q = newLineQueue()
	l = q.logger(zap.New(core))
	for i := range 100 {
		l.Info("idempotency decision", zap.Int("i", i))
	}
	q.close()
	for i, e := range logs.AllUntimed() {
		if e.ContextMap()["i"] != int64(i) {
			t.Fatalf("line %d is %v: out of order", i, e.ContextMap()["i"])
		}
	}
}

// BenchmarkDecisionLine: what the decision line costs, written by the
// request itself (as before) or queued (decisionlog.go), into a JSON log
// file from 32 requests at a time: ns/op is the request's wait, cpu-µs/op
// the whole process's CPU per line, the writer's included.
func BenchmarkDecisionLine(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "caddy.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	base := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(f),
		zapcore.InfoLevel)).Named("http.handlers.idempotency")
	for _, queued := range []bool{false, true} {
		name := "direct"
		if queued {
			name = "queued"
		}
		b.Run(name, func(b *testing.B) {
			l, q := base, newLineQueue()
			if queued {
				l = q.logger(base)
			}
			b.SetParallelism(16)
			c0 := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if ce := l.Check(zapcore.InfoLevel, "idempotency decision"); ce != nil {
						ce.Write(zap.String("platform", "alipay"), zap.String("outcome", "forwarded"),
							zap.Duration("duration", 1234*time.Microsecond), zap.String("key", "47efdc2559ef49ef"))
					}
				}
			})
			q.close()
			b.ReportMetric(float64((processCPU(b)-c0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
