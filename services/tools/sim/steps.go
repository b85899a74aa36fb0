package sim

import (
	"slices"
	"sort"
	"time"
)

// steps is a step function of time, read from events: the value v[i]
// holds from at[i] until at[i+1], and 0 before at[0]. Integrating it
// between event times is exact, not sampled.
type steps struct {
	at []time.Time
	v  []float64
}

// delta is a change of a counted quantity at an instant.
type delta struct {
	at time.Time
	d  float64
}

// sumDeltas turns changes, in any order, into the step function of their
// running sum.
func sumDeltas(ds []delta) steps {
	ds = slices.Clone(ds)
	slices.SortStableFunc(ds, func(a, b delta) int { return a.at.Compare(b.at) })
	var s steps
	cur := 0.0
	for _, d := range ds {
		cur += d.d
		s.set(d.at, cur)
	}
	return s
}

// set makes the function v from t on; t must not be before the last
// change.
func (s *steps) set(t time.Time, v float64) {
	if n := len(s.at); n > 0 && !t.After(s.at[n-1]) {
		s.v[n-1] = v // the same instant (or a producer's clock a hair behind)
		return
	}
	s.at, s.v = append(s.at, t), append(s.v, v)
}

// value is the function at t.
func (s steps) value(t time.Time) float64 {
	i := sort.Search(len(s.at), func(i int) bool { return s.at[i].After(t) })
	if i == 0 {
		return 0
	}
	return s.v[i-1]
}

// integral is the function's integral over [a, b), in value × seconds.
func (s steps) integral(a, b time.Time) float64 {
	if !b.After(a) {
		return 0
	}
	total, cur, t := 0.0, s.value(a), a
	for i := sort.Search(len(s.at), func(i int) bool { return s.at[i].After(a) }); i < len(s.at) && s.at[i].Before(b); i++ {
		total += cur * s.at[i].Sub(t).Seconds()
		t, cur = s.at[i], s.v[i]
	}
	return total + cur*b.Sub(t).Seconds()
}

// peak is the function's highest value over [a, b).
func (s steps) peak(a, b time.Time) float64 {
	m := s.value(a)
	for i := sort.Search(len(s.at), func(i int) bool { return s.at[i].After(a) }); i < len(s.at) && s.at[i].Before(b); i++ {
		m = max(m, s.v[i])
	}
	return m
}
