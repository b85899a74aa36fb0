package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/dev/natsembed/natstest"
)

func newStore(t testing.TB) (*natsjs.Store, context.Context) {
	t.Helper()
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s, ctx
}

func fleetEvent(name string, replicas int32) events.Envelope {
	return events.New(name, time.Now(), &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: replicas}})
}

func TestConcurrentAppendsWithSameExpectedSequence(t *testing.T) {
	s, ctx := newStore(t)
	const rounds = 50
	for round := range rounds {
		subject := events.MustSubject(events.FleetName(fmt.Sprintf("f%d", round)))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = s.Append(ctx, subject, 0, fleetEvent("fleets/x", int32(i)))
			})
		}
		wg.Wait()
		var ok, conflicts int
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, events.ErrConflict):
				conflicts++
			default:
				t.Fatalf("round %d: unexpected error %v", round, err)
			}
		}
		if ok != 1 || conflicts != 1 {
			t.Fatalf("round %d: %d succeeded and %d conflicted, want 1 and 1", round, ok, conflicts)
		}
	}
}

func TestSameMessageIDIsStoredOnce(t *testing.T) {
	s, ctx := newStore(t)
	subject := events.MustSubject("fleets/arena")
	e := fleetEvent("fleets/arena", 3)
	first, err := s.Append(ctx, subject, 0, e)
	if err != nil {
		t.Fatal(err)
	}
	// The retry carries a now-stale expected sequence: it is still a
	// duplicate, not a conflict, and answers with the original sequence.
	second, err := s.Append(ctx, subject, 0, e)
	if err != nil {
		t.Fatalf("retry of a stored event: %v", err)
	}
	if second != first {
		t.Fatalf("retry returned sequence %d, first append %d", second, first)
	}
	hist, err := s.History(ctx, subject, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 {
		t.Fatalf("stored %d copies, want 1", len(hist))
	}
	last, err := s.StreamLastSequence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last != 1 {
		t.Fatalf("stream last sequence %d, want 1", last)
	}
}

func TestExpectedSequences(t *testing.T) {
	s, ctx := newStore(t)
	subject := events.MustSubject("fleets/arena")
	seq, err := s.Append(ctx, subject, 0, fleetEvent("fleets/arena", 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		expected uint64
		conflict bool
	}{
		{"zero on a subject with events", 0, true},
		{"stale sequence", seq + 5, true},
		{"any sequence", events.AnySequence, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Append(ctx, subject, tc.expected, fleetEvent("fleets/arena", 2))
			if got := errors.Is(err, events.ErrConflict); got != tc.conflict {
				t.Fatalf("conflict = %v (err %v), want %v", got, err, tc.conflict)
			}
		})
	}
	// Several events in one append are chained by sequence.
	last, err := s.LastSequence(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Append(ctx, subject, last, fleetEvent("fleets/arena", 3), fleetEvent("fleets/arena", 4))
	if err != nil {
		t.Fatal(err)
	}
	if got != last+2 {
		t.Fatalf("two-event append ended at %d, want %d", got, last+2)
	}
}

func TestHistory(t *testing.T) {
	s, ctx := newStore(t)
	a, b := events.MustSubject("fleets/arena/gameServers/gs-a"), events.MustSubject("fleets/arena/gameServers/gs-b")
	var want []uint64
	for i := range 3 {
		for _, subj := range []string{a, b} {
			seq, err := s.Append(ctx, subj, events.AnySequence, events.New("fleets/arena/gameServers/x", time.Now(), &eventsv1.HealthDegraded{MissedPeriods: int32(i)}))
			if err != nil {
				t.Fatal(err)
			}
			if subj == a {
				want = append(want, seq)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		subject string
		from    uint64
		want    int
	}{
		{"one subject", a, 0, 3},
		{"wildcard", events.FleetGameServersSubject("arena"), 0, 6},
		{"from the second event", a, want[1], 2},
		{"past the end", a, want[2] + 1, 0},
		{"empty subject", events.MustSubject("fleets/none"), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hist, err := s.History(ctx, tc.subject, tc.from)
			if err != nil {
				t.Fatal(err)
			}
			if len(hist) != tc.want {
				t.Fatalf("%d events, want %d", len(hist), tc.want)
			}
			for i := 1; i < len(hist); i++ {
				if hist[i].Sequence <= hist[i-1].Sequence {
					t.Fatalf("out of order: %d after %d", hist[i].Sequence, hist[i-1].Sequence)
				}
			}
		})
	}
	if n, err := s.LastSequence(ctx, events.MustSubject("fleets/none")); err != nil || n != 0 {
		t.Fatalf("LastSequence of an unknown subject = %d, %v", n, err)
	}
}

// BenchmarkAppendGuarded measures synchronous appends guarded by the
// per-subject expected sequence, over 1000 aggregates.
func BenchmarkAppendGuarded(b *testing.B) {
	s, ctx := newStore(b)
	const aggregates = 1000
	last := make([]uint64, aggregates)
	subjects := make([]string, aggregates)
	for i := range subjects {
		subjects[i] = events.MustSubject(fmt.Sprintf("fleets/arena/gameServers/gs-%d", i))
	}
	payload := &eventsv1.HealthDegraded{MissedPeriods: 1}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		k := i % aggregates
		seq, err := s.Append(ctx, subjects[k], last[k], events.New("fleets/arena/gameServers/x", time.Now(), payload))
		if err != nil {
			b.Fatal(err)
		}
		last[k] = seq
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
