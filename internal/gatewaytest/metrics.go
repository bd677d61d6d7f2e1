package gatewaytest

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Scrape reads the admin endpoint's /metrics and returns each sample's
// value by its name and sorted labels, as written: name{a="x",b="y"}. The
// test must link Caddy's metrics module (a blank import of
// caddy/v2/modules/metrics) for the admin endpoint to serve /metrics.
func Scrape(t testing.TB, g Gateway) (map[string]float64, string) {
	t.Helper()
	status, text := g.AdminDo(t, http.MethodGet, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", status, text)
	}
	samples := map[string]float64{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	return samples, text
}

// WantSample fails the test unless samples hold name at want.
func WantSample(t testing.TB, samples map[string]float64, name string, want float64) {
	t.Helper()
	if got, ok := samples[name]; !ok || got != want {
		t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
	}
}

// WantDelta fails the test unless name grew by want from base to samples.
func WantDelta(t testing.TB, samples, base map[string]float64, name string, want float64) {
	t.Helper()
	if got, ok := samples[name]; !ok || got-base[name] != want {
		t.Errorf("%s = %v (present %v, %v before), want %v more", name, got, ok, base[name], want)
	}
}

// freshClient opens a connection per request: a process's admin endpoint
// may have restarted since the last one.
var freshClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// AdminPost POSTs to the admin endpoint admin (host:port) and wants 200;
// it returns the answer's body.
func AdminPost(t testing.TB, admin, path string) string {
	t.Helper()
	resp, err := freshClient.Post("http://"+admin+path, "application/json", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

// Series are the samples of the metric name (every label set).
func Series(s map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s {
		if strings.HasPrefix(k, name+"{") || k == name {
			out[k] = v
		}
	}
	return out
}
