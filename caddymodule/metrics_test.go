package caddymodule

import (
	"testing"

	_ "github.com/caddyserver/caddy/v2/modules/metrics" // the admin endpoint's /metrics

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// scrape reads the admin endpoint's /metrics (gatewaytest.Scrape): each
// sample's value by its name and sorted labels, as written:
// name{a="x",b="y"}.
func scrape(t testing.TB, g gateway) (map[string]float64, string) {
	t.Helper()
	return gatewaytest.Scrape(t, g.of())
}

func wantSample(t testing.TB, samples map[string]float64, name string, want float64) {
	t.Helper()
	gatewaytest.WantSample(t, samples, name, want)
}

// wantDelta: name grew by want since base (the process's metrics count
// every test's requests).
func wantDelta(t testing.TB, samples, base map[string]float64, name string, want float64) {
	t.Helper()
	gatewaytest.WantDelta(t, samples, base, name, want)
}

func filter(s map[string]float64, prefix string) map[string]float64 {
	return gatewaytest.Series(s, prefix)
}
