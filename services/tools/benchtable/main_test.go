package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkAllocate-2   	       1	4748687195 ns/op	      2106 allocs/s	         9.598 p50-ms	        81.01 p99-ms	        41.00 refused
BenchmarkAllocate-2   	       1	4902187367 ns/op	      2040 allocs/s	        10.00 p50-ms	       102.8 p99-ms	         6.000 refused
BenchmarkAllocateOther-2 1 5 ns/op 7 allocs/s
PASS
`
	m := parseBench(strings.NewReader(out), "BenchmarkAllocate")
	if got := m["allocs/s"]; len(got) != 2 || got[0] != 2106 || got[1] != 2040 {
		t.Fatalf("allocs/s = %v", got)
	}
	if got := m["p99-ms"]; len(got) != 2 || got[1] != 102.8 {
		t.Fatalf("p99-ms = %v", got)
	}
}

// A log line printed while a benchmark runs splits its result line: the
// figures that follow on a line of their own are still its (make bench
// failed on BenchmarkReconnect this way: "no result lines").
func TestParseBenchInterruptedByALogLine(t *testing.T) {
	out := `BenchmarkReconnect-2   	time=2026-11-27T01:57:10.575Z level=WARN msg="API authentication is off" test=BenchmarkReconnect
replicas  callers  allocations  allocs/s  p50 ms
1         32       540          2290      10.9
    3000	    589495 ns/op	         0.5503 p50-ms	         1.439 p99-ms
BenchmarkReconnect-2   	    3000	    601000 ns/op	         0.6000 p50-ms	         1.500 p99-ms
time=2026-11-27T01:57:11Z level=INFO msg="12 servers"
PASS
`
	m := parseBench(strings.NewReader(out), "BenchmarkReconnect")
	if got := m["p99-ms"]; len(got) != 2 || got[0] != 1.439 || got[1] != 1.5 {
		t.Fatalf("p99-ms = %v", got)
	}
	if got := m["p50-ms"]; len(got) != 2 || got[0] != 0.5503 {
		t.Fatalf("p50-ms = %v", got)
	}
}

func TestEvaluateAndPrint(t *testing.T) {
	measured := map[string]map[string][]float64{
		"BenchmarkAllocate": {"allocs/s": {2106, 2040, 2189}, "p99-ms": {81, 102.8, 79}},
		"BenchmarkExplain":  {"p99-ms": {15.7, 16, 17.6}},
		"chaos":             {"false-terminations": {0}},
	}
	results := evaluate(measured)
	byWhat := map[string]result{}
	for _, r := range results {
		byWhat[r.What] = r
	}
	if r := byWhat["allocations sustained (2 API replicas)"]; r.Median != 2106 || r.Met {
		t.Fatalf("allocations: %+v", r)
	}
	if r := byWhat["explain, 1,000-event history, p99"]; r.Median != 16 || !r.Met {
		t.Fatalf("explain: %+v", r)
	}
	if r := byWhat["false terminations (chaos)"]; !r.Met {
		t.Fatalf("false terminations: %+v", r)
	}
	if r := byWhat["rebuild rate (1,000,000 events)"]; r.Note != "not run" {
		t.Fatalf("rebuild: %+v", r)
	}
	var buf bytes.Buffer
	if err := printTable(&buf, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"falls short", "met", "not run", "≥ 5000/s", "≤ 100ms"} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, buf.String())
		}
	}
	if median([]float64{3, 1, 2, 4}) != 2.5 {
		t.Fatal("median of an even count")
	}
}

// A figure reported without a target is printed as such and survives the
// JSON the table is saved as.
func TestReportedFigures(t *testing.T) {
	results := evaluate(map[string]map[string][]float64{"sim": {"events/s": {133}}})
	var found bool
	for _, r := range results {
		if r.Metric == "events/s" && r.Bench == "sim" {
			found = true
			if !r.Reported || !r.Met || r.Median != 133 {
				t.Fatalf("reported figure: %+v", r)
			}
		}
	}
	if !found {
		t.Fatal("no scale events/s row")
	}
	if _, err := json.Marshal(results); err != nil {
		t.Fatalf("results do not encode: %v", err)
	}
	var b strings.Builder
	if err := printTable(&b, results); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "reported") {
		t.Fatalf("table has no reported verdict:\n%s", b.String())
	}
}

// TestServedAllocationFigure: the API's own allocation p99 is read from the
// sim report, "more than the last bound" (negative) is judged as that
// bound, so that it never meets an at-most target by its sign, and a run
// that timed none gives no figure.
func TestServedAllocationFigure(t *testing.T) {
	for _, c := range []struct {
		json string
		want float64
	}{
		{`{"allocation_served_ms": {"n": 5, "p99": 16}}`, 16},
		{`{"allocation_served_ms": {"n": 5, "p99": -60000}}`, 60000},
	} {
		var r simReport
		if err := json.Unmarshal([]byte(c.json), &r); err != nil {
			t.Fatal(err)
		}
		if got := r.figures()["alloc-served-p99-ms"]; len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: %v, want [%v]", c.json, got, c.want)
		}
	}
	// None timed (a control plane that wrote no figures): no figure, so
	// the row says "not run" rather than meet its target with a 0.
	var none simReport
	if err := json.Unmarshal([]byte(`{"allocation_served_ms": {"n": 0, "p99": 0}}`), &none); err != nil {
		t.Fatal(err)
	}
	if got, ok := none.figures()["alloc-served-p99-ms"]; ok {
		t.Errorf("no allocation timed: figure %v, want none", got)
	}
}
