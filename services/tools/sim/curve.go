package sim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Curve is a demand curve: matches per second over the steady phase,
// linear between its points, flat before the first and after the last.
// The zero Curve has no points: no demand mode.
type Curve struct {
	Points []CurvePoint
}

// CurvePoint is the demand at one moment of the steady phase.
type CurvePoint struct {
	At   time.Duration // since the steady phase began
	Rate float64       // matches per second
}

// ParseCurve reads a curve written "0s:2,30s:2,40s:20,60s:20": points
// time:rate, times increasing, rates at least 0.
func ParseCurve(s string) (Curve, error) {
	var c Curve
	s = strings.TrimSpace(s)
	if s == "" {
		return c, nil
	}
	for _, part := range strings.Split(s, ",") {
		at, rate, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return Curve{}, fmt.Errorf("demand curve: %q is not time:rate (e.g. 30s:20)", part)
		}
		d, err := time.ParseDuration(at)
		if err != nil {
			return Curve{}, fmt.Errorf("demand curve: %q: %w", part, err)
		}
		r, err := strconv.ParseFloat(rate, 64)
		if err != nil {
			return Curve{}, fmt.Errorf("demand curve: %q: %w", part, err)
		}
		c.Points = append(c.Points, CurvePoint{At: d, Rate: r})
	}
	return c, c.validate()
}

// validate checks that times increase from 0 on and rates are not
// negative.
func (c Curve) validate() error {
	for i, p := range c.Points {
		switch {
		case p.At < 0:
			return fmt.Errorf("demand curve: time %s is negative", p.At)
		case p.Rate < 0 || p.Rate != p.Rate: // NaN is not a rate
			return fmt.Errorf("demand curve: rate %g at %s is not 0 or more", p.Rate, p.At)
		case i > 0 && p.At <= c.Points[i-1].At:
			return fmt.Errorf("demand curve: times must increase (%s after %s)", p.At, c.Points[i-1].At)
		}
	}
	if len(c.Points) > 0 && c.Max() == 0 {
		return errors.New("demand curve: every rate is 0")
	}
	return nil
}

// Set reports whether the curve has points (demand mode).
func (c Curve) Set() bool { return len(c.Points) > 0 }

// RateAt is the demand t into the steady phase, in matches per second.
func (c Curve) RateAt(t time.Duration) float64 {
	if len(c.Points) == 0 {
		return 0
	}
	if t <= c.Points[0].At {
		return c.Points[0].Rate
	}
	for i := 1; i < len(c.Points); i++ {
		a, b := c.Points[i-1], c.Points[i]
		if t <= b.At {
			f := float64(t-a.At) / float64(b.At-a.At)
			return a.Rate + f*(b.Rate-a.Rate)
		}
	}
	return c.Points[len(c.Points)-1].Rate
}

// Max is the highest rate of the curve.
func (c Curve) Max() float64 {
	m := 0.0
	for _, p := range c.Points {
		m = max(m, p.Rate)
	}
	return m
}

// End is the time of the curve's last point.
func (c Curve) End() time.Duration {
	if len(c.Points) == 0 {
		return 0
	}
	return c.Points[len(c.Points)-1].At
}

// Matches is the demand between a and b: the curve's integral, in
// matches.
func (c Curve) Matches(a, b time.Duration) float64 {
	if len(c.Points) == 0 || b <= a {
		return 0
	}
	// Every point inside (a, b) is a corner; between corners the curve is
	// linear, so the trapezoid rule is exact.
	cuts := []time.Duration{a}
	for _, p := range c.Points {
		if p.At > a && p.At < b {
			cuts = append(cuts, p.At)
		}
	}
	cuts = append(cuts, b)
	total := 0.0
	for i := 1; i < len(cuts); i++ {
		x, y := cuts[i-1], cuts[i]
		total += (c.RateAt(x) + c.RateAt(y)) / 2 * (y - x).Seconds()
	}
	return total
}

// String writes the curve as ParseCurve reads it.
func (c Curve) String() string {
	parts := make([]string, len(c.Points))
	for i, p := range c.Points {
		parts[i] = p.At.String() + ":" + strconv.FormatFloat(p.Rate, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}
