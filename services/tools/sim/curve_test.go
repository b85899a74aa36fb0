package sim

import (
	"math"
	"testing"
	"time"
)

// A curve reads back as written, is linear between its points and flat
// outside them, and its integral is the area under it.
func TestCurve(t *testing.T) {
	c, err := ParseCurve("0s:2, 30s:2,40s:20,60s:20,70s:2,120s:2")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.String(), "0s:2,30s:2,40s:20,1m0s:20,1m10s:2,2m0s:2"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{{0, 2}, {15 * time.Second, 2}, {35 * time.Second, 11}, {50 * time.Second, 20}, {65 * time.Second, 11}, {5 * time.Minute, 2}} {
		if got := c.RateAt(tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("RateAt(%s) = %g, want %g", tc.at, got, tc.want)
		}
	}
	// 30×2 + 10×11 + 20×20 + 10×11 + 50×2 = 780.
	if got := c.Matches(0, 2*time.Minute); math.Abs(got-780) > 1e-9 {
		t.Fatalf("Matches over the curve = %g, want 780", got)
	}
	if got := c.Matches(35*time.Second, 45*time.Second); math.Abs(got-(5*(11+20)/2.0+5*20)) > 1e-9 {
		t.Fatalf("Matches(35s, 45s) = %g", got)
	}
	if c.Max() != 20 || c.End() != 2*time.Minute {
		t.Fatalf("Max %g, End %s", c.Max(), c.End())
	}
	for _, bad := range []string{"10s", "0s:1,0s:2", "0s:-1", "x:1", "0s:0,5s:0", "-1s:3"} {
		if _, err := ParseCurve(bad); err == nil {
			t.Errorf("ParseCurve(%q) took it", bad)
		}
	}
}

// A step function built from changes in any order integrates exactly
// between event times, and its peak sees a change inside the window.
func TestSteps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	s := sumDeltas([]delta{{at(2), -1}, {at(0), 1}, {at(1), 1}, {at(3), 2}, {at(3), -1}})
	// 1 on [0,1), 2 on [1,2), 1 on [2,3), 2 from 3 on.
	for _, tc := range []struct {
		a, b float64
		want float64
	}{{0, 4, 1 + 2 + 1 + 2}, {0.5, 1.5, 0.5 + 1}, {-1, 0, 0}, {2.5, 2.5, 0}} {
		if got := s.integral(at(tc.a), at(tc.b)); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("integral(%g, %g) = %g, want %g", tc.a, tc.b, got, tc.want)
		}
	}
	if got := s.peak(at(2), at(2.9)); got != 1 {
		t.Errorf("peak over [2, 2.9) = %g, want 1", got)
	}
	if got := s.peak(at(0.5), at(2.9)); got != 2 {
		t.Errorf("peak over [0.5, 2.9) = %g, want 2", got)
	}
}
