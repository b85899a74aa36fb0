package grafana_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/promcheck"
)

// observability is the document that lists every metric and alert.
const observability = "../../docs/observability.md"

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID    string   `json:"uid"`
	Title  string   `json:"title"`
	Tags   []string `json:"tags"`
	Panels []panel  `json:"panels"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct{ X, Y, W, H int }
	Targets    []struct {
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// Every dashboard has a unique uid and a "Tether / " title, and every
// panel a unique id, a place within the grid, the dashboard's Prometheus
// variable as its data source, and queries that select a metric.
func TestDashboards(t *testing.T) {
	files, err := filepath.Glob("dashboards/*.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("dashboards: %v %v, want fleet overview, control plane and player sessions", files, err)
	}
	uids := map[string]string{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || uids[d.UID] != "" || !strings.HasPrefix(d.Title, "Tether / ") || !slices.Contains(d.Tags, "tether") {
			t.Errorf("%s: uid %q (also in %q), title %q, tags %v: want a unique uid, a title \"Tether / …\" and the tag tether",
				f, d.UID, uids[d.UID], d.Title, d.Tags)
		}
		uids[d.UID] = f
		ids := map[int]bool{}
		var check func([]panel)
		check = func(ps []panel) {
			for _, p := range ps {
				if ids[p.ID] || p.Title == "" || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
					t.Errorf("%s: panel %d %q: a unique id, a title and a place within 24 columns", f, p.ID, p.Title)
				}
				ids[p.ID] = true
				check(p.Panels)
				if p.Type == "row" {
					continue
				}
				if !strings.Contains(string(p.Datasource), "${datasource}") || len(p.Targets) == 0 {
					t.Errorf("%s: panel %q: data source %s, %d queries; want ${datasource} and a query", f, p.Title, p.Datasource, len(p.Targets))
				}
				for _, q := range p.Targets {
					names, err := promcheck.MetricNames(q.Expr)
					if err != nil || len(names) == 0 || !strings.Contains(string(q.Datasource), "${datasource}") {
						t.Errorf("%s: panel %q: query %q selects %v (%v), data source %s", f, p.Title, q.Expr, names, err, q.Datasource)
					}
				}
			}
		}
		check(d.Panels)
	}
}

// Every alert has a unique Tether… name, a for: duration, a severity
// (critical pages a human, warning does not), a summary, a description
// and a runbook, and docs/observability.md names it.
func TestAlertRules(t *testing.T) {
	files, err := filepath.Glob("prometheus/*.yml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(observability)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	alerts := 0
	for _, f := range files {
		queries, _, err := promcheck.Queries(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(queries) == 0 {
			continue // not a rule file (prometheus.yml)
		}
		rf, err := promcheck.ReadRules(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				alerts++
				if !regexp.MustCompile(`^Tether[A-Z][A-Za-z]+$`).MatchString(r.Alert) || seen[r.Alert] {
					t.Errorf("%s: alert %q: want a unique name Tether…", f, r.Alert)
				}
				seen[r.Alert] = true
				if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
					t.Errorf("%s: %s: for %q: want a duration", f, r.Alert, r.For)
				}
				if s := r.Labels["severity"]; s != "critical" && s != "warning" {
					t.Errorf("%s: %s: severity %q, want critical or warning", f, r.Alert, s)
				}
				for _, a := range []string{"summary", "description", "runbook"} {
					if strings.TrimSpace(r.Annotations[a]) == "" {
						t.Errorf("%s: %s: no %s", f, r.Alert, a)
					}
				}
				if names, err := promcheck.MetricNames(r.Expr); err != nil || len(names) == 0 {
					t.Errorf("%s: %s: expr %q selects %v (%v)", f, r.Alert, r.Expr, names, err)
				}
				if !strings.Contains(string(doc), r.Alert) {
					t.Errorf("%s: %s is not in %s", f, r.Alert, observability)
				}
			}
		}
	}
	for _, must := range []string{"TetherProjectionStalled", "TetherNoControllerLeader", "TetherHostLost", "TetherAllocationErrors", "TetherAllocationsExhausted"} {
		if !seen[must] {
			t.Errorf("no alert %s", must)
		}
	}
	if alerts == 0 {
		t.Fatal("no alert rules")
	}
}

// Every Tether metric a dashboard or a rule uses is in
// docs/observability.md (under its family name: a histogram's, a
// counter's with _total).
func TestMetricsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(observability)
	if err != nil {
		t.Fatal(err)
	}
	queries, _, err := promcheck.Queries(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		names, err := promcheck.MetricNames(q.Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "tether_") {
				continue
			}
			family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")
			if !strings.Contains(string(doc), family) {
				t.Errorf("%s (%s) uses %s, which %s does not list", q.File, q.Where, family, observability)
			}
		}
	}
}
