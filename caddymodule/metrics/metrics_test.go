package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestMetricsRegistryReuse: every config's registry exports the one set
// of process metrics, each once, and lets it go when its config is
// unloaded.
func TestMetricsRegistryReuse(t *testing.T) {
	ctx1, cancel1 := caddy.NewContext(caddy.Context{Context: context.Background()})
	m1, m2 := Load(ctx1), Load(ctx1)
	if m1 == nil || m1 != m2 {
		t.Fatalf("two handlers of one registry got %p and %p, want one", m1, m2)
	}
	// A context sharing the registry (as WithValue does) shares them too.
	ctx2 := ctx1.WithValue(caddy.CtxKey("x"), 1)
	if Load(ctx2) != m1 {
		t.Fatalf("a derived context got other metrics")
	}
	// The next config's registry is another one, with the same metrics.
	ctx3, cancel3 := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel3()
	if Load(ctx3) != m1 {
		t.Fatalf("the next config got other metrics: counting would start again")
	}
	rt := Route{"generic", "registry-reuse"}
	m1.Observe(context.Background(), rt, Observation{Outcome: app.Forwarded, Elapsed: time.Millisecond})
	m1.Observe(context.Background(), rt, Observation{Outcome: app.Forwarded, Elapsed: time.Millisecond})
	for _, ctx := range []caddy.Context{ctx1, ctx3} {
		fams, err := ctx.GetMetricsRegistry().Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		var n int
		for _, f := range fams {
			if f.GetName() != "idemgate_requests_total" {
				continue
			}
			for _, m := range f.Metric {
				for _, l := range m.Label {
					if l.GetName() == "scope" && l.GetValue() == "registry-reuse" {
						n++
						if v := m.GetCounter().GetValue(); v != 2 {
							t.Errorf("idemgate_requests_total{scope=registry-reuse} = %v, want 2", v)
						}
					}
				}
			}
		}
		if n != 1 {
			t.Errorf("%d idemgate_requests_total{scope=registry-reuse} series gathered, want 1", n)
		}
	}
	reg := ctx1.GetMetricsRegistry()
	cancel1()
	gatewaytest.Eventually(t, 2*time.Second, "the unloaded config's registry let go", func() bool {
		_, held := registries.References(reg)
		return !held
	})
	var nilMetrics *Metrics
	nilMetrics.Observe(context.Background(), Route{"generic", "generic"}, Observation{Outcome: app.Forwarded}) // no registry: no metrics, no panic
}

// TestMetricsHotPathAllocations: recording a decision allocates nothing
// once its label combination has been seen.
func TestMetricsHotPathAllocations(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	m := Load(ctx)
	bg := context.Background()
	// Through the interface, as the handler's record calls it.
	var r Recorder = m
	record := func() {
		r.Observe(bg, Route{"alipay", "alipay_return"},
			Observation{Outcome: app.Replayed, Elapsed: time.Millisecond, Copies: 3, Backend: time.Millisecond})
	}
	record()
	if n := testing.AllocsPerRun(200, record); n > 0 {
		t.Errorf("%v allocations per decision, want 0", n)
	}
}

func BenchmarkMetricsRequest(b *testing.B) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	m := Load(ctx)
	bg := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Observe(bg, Route{"stripe", "stripe"}, Observation{Outcome: app.Forwarded, Elapsed: time.Millisecond})
		}
	})
}
