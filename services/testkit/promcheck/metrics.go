// Package promcheck checks the metrics that Grafana dashboards and
// Prometheus rule files use against the metrics a running Tether serves:
// it reads a /metrics scrape (Parse), the PromQL of every dashboard and
// rule file under a directory (Queries), the metric names a PromQL
// expression selects (MetricNames, a small tokenizer rather than a
// parser), and reports every name a query uses that the scrape does not
// have (Check). Recorder gives every instrument a running program made a
// sample, so that a scrape shows the counters nothing has counted yet.
package promcheck

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Sample is one line of a scrape: a series and its value.
type Sample struct {
	// Name is the sample's metric name, suffix included (…_bucket,
	// …_total): the name a query selects.
	Name string
	// Labels are the series' labels.
	Labels map[string]string
	// Value is the sample's value as written.
	Value string
}

// Parse reads a scrape in the Prometheus text format.
func Parse(r io.Reader) ([]Sample, error) {
	var out []Sample
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; lines.Scan(); n++ {
		line := strings.TrimSpace(lines.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("promcheck: scrape line %d %q: %w", n, line, err)
		}
		out = append(out, s)
	}
	return out, lines.Err()
}

// parseSample reads `name{k="v",…} value [timestamp]`.
func parseSample(line string) (Sample, error) {
	end := strings.IndexAny(line, "{ ")
	if end <= 0 {
		return Sample{}, errors.New("no metric name")
	}
	s := Sample{Name: line[:end], Labels: map[string]string{}}
	rest := line[end:]
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, "=")
			if eq <= 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return Sample{}, errors.New("bad label")
			}
			key := strings.TrimSpace(rest[:eq])
			value, n, err := quoted(rest[eq+1:])
			if err != nil {
				return Sample{}, fmt.Errorf("label %s: %w", key, err)
			}
			s.Labels[key] = value
			rest = rest[eq+1+n:]
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return Sample{}, errors.New("no value")
	}
	s.Value = fields[0]
	return s, nil
}

// quoted reads a double-quoted label value at the start of s, with the
// format's escapes (\\, \", \n), and returns it and the bytes it took.
func quoted(s string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i + 1, nil
		case '\\':
			if i+1 == len(s) {
				return "", 0, errors.New("unterminated escape")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, errors.New("unterminated value")
}

// Names returns the metric names a scrape serves: each sample's name, so
// a histogram's …_bucket, …_sum and …_count, never its bare family name,
// which no query can select.
func Names(samples []Sample) map[string]bool {
	out := map[string]bool{}
	for _, s := range samples {
		out[s.Name] = true
	}
	return out
}

// Query is one PromQL expression of a dashboard or a rule file.
type Query struct {
	// File is the file it is in.
	File string
	// Where says where in it: a panel's title, a variable's name, an
	// alert's or a recording rule's name.
	Where string
	// Expr is the expression.
	Expr string
}

// RuleFile is the shape of a Prometheus rule file.
type RuleFile struct {
	// Groups are its rule groups.
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is a group of rules.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is an alerting rule (Alert set) or a recording rule (Record set).
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ReadRules reads a Prometheus rule file (YAML).
func ReadRules(path string) (RuleFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return RuleFile{}, err
	}
	var rf RuleFile
	if err := yaml.UnmarshalStrict(raw, &rf); err != nil {
		return RuleFile{}, fmt.Errorf("promcheck: %s: %w", path, err)
	}
	return rf, nil
}

// Queries reads every dashboard (*.json) and every Prometheus rule file
// (*.yml or *.yaml with top-level groups; other YAML, such as Grafana's
// provisioning files, is left alone) under dir. It also returns the
// names the rule files' recording rules define.
func Queries(dir string) (queries []Query, recorded []string, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch ext := filepath.Ext(path); ext {
		case ".json":
			qs, err := dashboardQueries(path)
			if err != nil {
				return err
			}
			queries = append(queries, qs...)
		case ".yml", ".yaml":
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var top map[string]any
			if err := yaml.Unmarshal(raw, &top); err != nil {
				return fmt.Errorf("promcheck: %s: %w", path, err)
			}
			if _, ok := top["groups"]; !ok {
				return nil
			}
			rf, err := ReadRules(path)
			if err != nil {
				return err
			}
			for _, g := range rf.Groups {
				for _, r := range g.Rules {
					queries = append(queries, Query{File: path, Where: g.Name + "/" + r.Alert + r.Record, Expr: r.Expr})
					if r.Record != "" {
						recorded = append(recorded, r.Record)
					}
				}
			}
		}
		return nil
	})
	return queries, recorded, err
}

// dashboardQueries returns a Grafana dashboard's expressions: every
// "expr" (panel targets, annotations) and the query of every "query"
// variable.
func dashboardQueries(path string) ([]Query, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d any
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("promcheck: %s: %w", path, err)
	}
	var out []Query
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch v := v.(type) {
		case map[string]any:
			if t, ok := v["title"].(string); ok {
				where = t
			}
			if e, ok := v["expr"].(string); ok {
				out = append(out, Query{File: path, Where: where, Expr: e})
			}
			for _, c := range v {
				walk(c, where)
			}
		case []any:
			for _, c := range v {
				walk(c, where)
			}
		}
	}
	walk(d, "")
	if dm, ok := d.(map[string]any); ok {
		templating, _ := dm["templating"].(map[string]any)
		list, _ := templating["list"].([]any)
		for _, item := range list {
			v, _ := item.(map[string]any)
			if v["type"] != "query" {
				continue
			}
			q, ok := v["query"].(string)
			if !ok {
				qm, _ := v["query"].(map[string]any)
				q, _ = qm["query"].(string)
			}
			if expr, ok := variableExpr(q); ok {
				name, _ := v["name"].(string)
				out = append(out, Query{File: path, Where: "$" + name, Expr: expr})
			}
		}
	}
	return out, nil
}

// Grafana's Prometheus variable functions.
var (
	labelValuesOf = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	labelValues   = regexp.MustCompile(`^\s*label_values\(\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	queryResult   = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
	metricsOf     = regexp.MustCompile(`^\s*(metrics|label_names)\(.*\)\s*$`)
)

// variableExpr returns the PromQL in a Grafana variable's query, if any.
func variableExpr(q string) (string, bool) {
	if m := labelValuesOf.FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	if labelValues.MatchString(q) || metricsOf.MatchString(q) || strings.TrimSpace(q) == "" {
		return "", false
	}
	if m := queryResult.FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	return q, true
}

// PromQL words that are not metric names when they are not called.
var (
	// clauses are followed by a list of label names in parentheses.
	clauses = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	// keywords are operators and literals.
	keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true, "atan2": true}
)

// MetricNames returns the metric names a PromQL expression selects, in
// order of first use: its identifiers outside strings, label matchers,
// range brackets and the label lists of by, without, on, ignoring,
// group_left and group_right, that are neither called (functions,
// aggregations) nor keywords. Grafana's variables ($fleet, ${fleet},
// $__rate_interval) are skipped.
func MetricNames(expr string) ([]string, error) {
	var out []string
	i := 0
	skipTo := func(open, close byte) error {
		depth := 0
		for ; i < len(expr); i++ {
			switch c := expr[i]; c {
			case '"', '\'', '`':
				if err := skipString(expr, &i); err != nil {
					return err
				}
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					i++
					return nil
				}
			}
		}
		return fmt.Errorf("promcheck: %q: unclosed %c", expr, open)
	}
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(expr, &i); err != nil {
				return nil, err
			}
			i++
		case c == '{':
			if err := skipTo('{', '}'); err != nil {
				return nil, err
			}
		case c == '[':
			if err := skipTo('[', ']'); err != nil {
				return nil, err
			}
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				if err := skipTo('{', '}'); err != nil {
					return nil, err
				}
				continue
			}
			for i < len(expr) && isIdent(expr[i], false) {
				i++
			}
		case isDigit(c) || c == '.' && i+1 < len(expr) && isDigit(expr[i+1]):
			for i < len(expr) && (isIdent(expr[i], false) || expr[i] == '.') {
				i++
			}
		case isIdent(c, true):
			start := i
			for i < len(expr) && isIdent(expr[i], false) {
				i++
			}
			word := expr[start:i]
			next := i
			for next < len(expr) && strings.ContainsRune(" \t\r\n", rune(expr[next])) {
				next++
			}
			called := next < len(expr) && expr[next] == '('
			if !called { // an aggregation with its clause first: sum by (x) (…)
				after := next
				for after < len(expr) && isIdent(expr[after], false) {
					after++
				}
				w := strings.ToLower(expr[next:after])
				called = w == "by" || w == "without"
			}
			lower := strings.ToLower(word)
			switch {
			case clauses[lower]:
				if called {
					i = next
					if err := skipTo('(', ')'); err != nil {
						return nil, err
					}
				}
			case called || keywords[lower]:
			default:
				if !slices.Contains(out, word) {
					out = append(out, word)
				}
			}
		default:
			i++
		}
	}
	return out, nil
}

// skipString moves *i from a string's opening quote to its closing one.
func skipString(s string, i *int) error {
	quote := s[*i]
	for j := *i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && quote != '`':
			j++
		case s[j] == quote:
			*i = j
			return nil
		}
	}
	return fmt.Errorf("promcheck: %q: unterminated string at %d", s, *i)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isIdent tells the bytes of a PromQL identifier (a metric name may hold
// colons); first is the first byte, which is not a digit.
func isIdent(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && isDigit(c)
}

// builtin are the series Prometheus itself makes.
var builtin = map[string]bool{"up": true, "ALERTS": true, "ALERTS_FOR_STATE": true,
	"scrape_duration_seconds": true, "scrape_samples_scraped": true, "scrape_series_added": true}

// Problem is a query that names a metric the scrape does not serve, or
// that cannot be read.
type Problem struct {
	Query
	// Metric is the unknown name; empty when Err is set.
	Metric string
	// Err says why the expression could not be read.
	Err error
}

func (p Problem) String() string {
	if p.Err != nil {
		return fmt.Sprintf("%s (%s): %v", p.File, p.Where, p.Err)
	}
	return fmt.Sprintf("%s (%s): %s is not a metric Tether serves, in %s", p.File, p.Where, p.Metric, strconv.Quote(p.Expr))
}

// Check reads every query under dir and returns each use of a metric
// that served (a scrape's Names) does not have, nor a recording rule
// defines, nor Prometheus makes itself. It returns an error when dir
// holds no query at all, so that a moved directory does not pass.
func Check(dir string, served map[string]bool) ([]Problem, error) {
	queries, recorded, err := Queries(dir)
	if err != nil {
		return nil, err
	}
	if len(queries) == 0 {
		return nil, fmt.Errorf("promcheck: no dashboard or rule query under %s", dir)
	}
	var problems []Problem
	for _, q := range queries {
		names, err := MetricNames(q.Expr)
		if err != nil {
			problems = append(problems, Problem{Query: q, Err: err})
			continue
		}
		if len(names) == 0 {
			problems = append(problems, Problem{Query: q, Err: errors.New("selects no metric")})
		}
		for _, n := range names {
			if !served[n] && !builtin[n] && !slices.Contains(recorded, n) {
				problems = append(problems, Problem{Query: q, Metric: n})
			}
		}
	}
	return problems, nil
}
