package promcheck_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/services/platform/telemetry"
	"github.com/tetherhq/tether/services/testkit/promcheck"
)

func TestMetricNames(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want []string
	}{
		{"a selector", `tether_hosts{status="LOST"}`, []string{"tether_hosts"}},
		{"a rate by a label", `sum by (fleet, reason) (rate(tether_gameserver_terminations_total{fleet=~"$fleet"}[$__rate_interval]))`,
			[]string{"tether_gameserver_terminations_total"}},
		{"by after the aggregation", `sum(rate(a_total[5m])) by (le, fleet)`, []string{"a_total"}},
		{"a quantile", `histogram_quantile(0.99, sum by (le) (rate(tether_controller_pass_duration_seconds_bucket[5m])))`,
			[]string{"tether_controller_pass_duration_seconds_bucket"}},
		{"a ratio with on and group_left", `a / on (instance) group_left(job) b`, []string{"a", "b"}},
		{"keywords in capitals", `a AND ON(x) b OR c UNLESS d`, []string{"a", "b", "c", "d"}},
		{"comparison with bool and offset", `a > bool 0 and b offset 1h30m`, []string{"a", "b"}},
		{"or vector", `(sum(tether_controller_leader) or vector(0)) < 1`, []string{"tether_controller_leader"}},
		{"strings that look like metrics", `label_replace(up_like, "dst", "$1", "src", "tether_(.*)")`, []string{"up_like"}},
		{"a grafana variable", `a{fleet="$fleet"} * ${factor} + $__interval_ms`, []string{"a"}},
		{"a subquery", `max_over_time(rate(a_total[1m])[10m:30s])`, []string{"a_total"}},
		{"a comment", "a # b\n+ c", []string{"a", "c"}},
		{"a recording rule name", `job:tether_allocations:rate5m`, []string{"job:tether_allocations:rate5m"}},
		{"repeats once", `a / (a + b)`, []string{"a", "b"}},
		{"numbers", `a > 1e3 and b < .5 and c != 0x1f`, []string{"a", "b", "c"}},
		{"without", `sum without (instance, otel_scope_name) (a)`, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := promcheck.MetricNames(tt.expr)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("MetricNames(%q) = %v, %v; want %v", tt.expr, got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{`a{b="c}`, `rate(a[5m`, `"open`} {
		if _, err := promcheck.MetricNames(bad); err == nil {
			t.Errorf("MetricNames(%q): no error", bad)
		}
	}
}

func TestParse(t *testing.T) {
	scrape := `# HELP tether_hosts Hosts by status.
# TYPE tether_hosts gauge
tether_hosts{otel_scope_name="x",status="LOST"} 1
tether_x_bucket{le="+Inf",path="a\"b\\c\nd"} 3 1700000000
tether_y_total 7
`
	samples, err := promcheck.Parse(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 3 || samples[0].Labels["status"] != "LOST" || samples[1].Labels["path"] != "a\"b\\c\nd" ||
		samples[1].Value != "3" || samples[2].Name != "tether_y_total" || samples[2].Value != "7" {
		t.Fatalf("Parse = %+v", samples)
	}
	if names := promcheck.Names(samples); !names["tether_x_bucket"] || names["tether_x"] {
		t.Fatalf("Names = %v, want the sample names only", names)
	}
	if _, err := promcheck.Parse(strings.NewReader(`a{b="c} 1`)); err == nil {
		t.Fatal("Parse of an unterminated value: no error")
	}
}

// Check names every metric a dashboard, a variable or a rule uses that
// the scrape does not serve; a recording rule's name counts as served.
func TestCheckFindsUnknownMetrics(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("dashboards/d.json", `{"title": "D", "templating": {"list": [
  {"name": "fleet", "type": "query", "query": {"query": "label_values(tether_fleet_replicas, fleet)"}},
  {"name": "typo", "type": "query", "query": "label_values(tether_fleet_replica, fleet)"},
  {"name": "interval", "type": "interval", "query": "1m,5m"}]},
 "panels": [{"title": "Ready", "targets": [{"expr": "sum(tether_fleet_replicas) - sum(job:ready:sum)"}]},
            {"title": "Row", "panels": [{"title": "Gone", "targets": [{"expr": "rate(tether_gone_total[5m])"}]}]}]}`)
	write("alerts.yml", `groups:
- name: tether
  rules:
  - record: job:ready:sum
    expr: sum(tether_fleet_game_servers{state="READY"})
  - alert: Typo
    expr: tether_controller_leaders == 0
    for: 1m
`)
	write("provisioning/dashboards.yml", "apiVersion: 1\nproviders: []\n")
	served := map[string]bool{"tether_fleet_replicas": true, "tether_fleet_game_servers": true}
	problems, err := promcheck.Check(dir, served)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Where+" "+p.Metric)
	}
	slices.Sort(got)
	want := []string{"$typo tether_fleet_replica", "Gone tether_gone_total", "tether/Typo tether_controller_leaders"}
	if !slices.Equal(got, want) {
		t.Fatalf("Check found %q, want %q", got, want)
	}
	if _, err := promcheck.Check(t.TempDir(), served); err == nil {
		t.Fatal("Check of a directory without queries: no error")
	}
}

// Touch makes a counter that never counted show in the scrape, under the
// exporter's name for it.
func TestRecorderTouch(t *testing.T) {
	tel, err := telemetry.New(telemetry.Options{ServiceName: "promcheck-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	rec := promcheck.NewRecorder(tel.MeterProvider)
	meter := rec.Meter("test")
	if _, err := meter.Int64Counter("tether_never_counted"); err != nil {
		t.Fatal(err)
	}
	if _, err := meter.Float64Histogram("tether_never_timed_seconds"); err != nil {
		t.Fatal(err)
	}
	scrape := func() map[string]bool {
		t.Helper()
		rr := httptest.NewRecorder()
		tel.MetricsHandler.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		samples, err := promcheck.Parse(rr.Body)
		if err != nil {
			t.Fatal(err)
		}
		return promcheck.Names(samples)
	}
	if names := scrape(); names["tether_never_counted_total"] {
		t.Fatal("an untouched counter is in the scrape")
	}
	rec.Touch(context.Background())
	names := scrape()
	for _, n := range []string{"tether_never_counted_total", "tether_never_timed_seconds_bucket", "tether_never_timed_seconds_count"} {
		if !names[n] {
			t.Errorf("%s is not in the scrape after Touch", n)
		}
	}
}
