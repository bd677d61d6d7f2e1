package metrics

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
)

// exportedMetricNames are the series names Prometheus scrapes from the
// handler's instruments (the exporter's _total and _seconds suffixes, and
// a histogram's _bucket, _sum and _count).
func exportedMetricNames() []string {
	var names []string
	for _, c := range []string{Requests, LostClaims, StoreErrors, DeliveryAttempts, DeadLetters} {
		names = append(names, c+"_total")
	}
	for _, h := range []string{RequestDuration + "_seconds", BackendDuration + "_seconds",
		WaitDuration + "_seconds", Copies, DeliveryDuration + "_seconds"} {
		names = append(names, h+"_bucket", h+"_sum", h+"_count")
	}
	names = append(names, QueueDepth, QueueOldest+"_seconds")
	return names
}

var metricRef = regexp.MustCompile(`idemgate_[a-z_]+`)

// checkExpr fails for an expression that names a series idemgate does not
// export (a renamed metric would silently match nothing).
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	if len(refs) == 0 {
		t.Errorf("%s: no idemgate metric in %q", where, expr)
	}
	for _, r := range refs {
		if !slices.Contains(exportedMetricNames(), r) {
			t.Errorf("%s: %s is not a metric idemgate exports (%v)", where, r, exportedMetricNames())
		}
	}
}

// TestMonitoringAlertRules: the rules file parses as Prometheus rule
// groups, covers the alerts the README promises, and every expression
// names only metrics idemgate exports. (promtool is not at hand; this is
// the structural half of its check.)
func TestMonitoringAlertRules(t *testing.T) {
	b, err := os.ReadFile("../../examples/monitoring/idemgate.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("rules file: %v", err)
	}
	var alerts []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkExpr(t, r.Alert, r.Expr)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: needs a severity label and a summary", r.Alert)
			}
		}
	}
	for _, want := range []string{"IdemgateDeadLetters", "IdemgateBackendFailing", "IdemgateLostClaims",
		"IdemgateStoreErrors", "IdemgateFingerprintConflicts", "IdemgateKeyRetriedFarTooOften"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s (have %v)", want, alerts)
		}
	}
}

// TestMonitoringDashboard: the Grafana dashboard is JSON whose panels all
// query metrics idemgate exports.
func TestMonitoringDashboard(t *testing.T) {
	b, err := os.ReadFile("../../examples/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if d.Title == "" || len(d.Panels) < 8 {
		t.Fatalf("dashboard %q has %d panels", d.Title, len(d.Panels))
	}
	seen := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkExpr(t, p.Title, tg.Expr)
			for _, r := range metricRef.FindAllString(tg.Expr, -1) {
				seen[r] = true
			}
		}
	}
	// Every instrument has a panel.
	for _, base := range []string{"idemgate_requests_total", "idemgate_request_duration_seconds_bucket",
		"idemgate_backend_duration_seconds_bucket", "idemgate_wait_duration_seconds_bucket",
		"idemgate_copies_per_key_bucket", "idemgate_lost_claims_total", "idemgate_store_errors_total"} {
		if !seen[base] {
			t.Errorf("no panel shows %s", base)
		}
	}
}
