package natsjs

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

// newTestStore is a store on an embedded NATS server of its own.
func newTestStore(t *testing.T) (context.Context, *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	_, js := natstest.Connect(t, natstest.Start(t))
	if err := Setup(ctx, js, Options{}); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, js, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, s
}

// CurrentHistory completes, from the stream's leader, a history that a
// replica behind the leader answered short (here a reader that returns
// only the first events of what is stored), so a decision on absence is
// never made on a replica's past.
func TestCurrentHistoryCompletesAReplicasShortAnswer(t *testing.T) {
	ctx, s := newTestStore(t)
	name := events.GameServerName("arena", "gs-a")
	subject := events.MustSubject(name)
	other := events.MustSubject(events.GameServerName("arena", "gs-b"))
	for i := range 5 {
		for _, subj := range []string{subject, other} {
			ev := events.New(name, time.Now(), &eventsv1.HealthDegraded{MissedPeriods: int32(i)})
			if _, err := s.Append(ctx, subj, events.AnySequence, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	full, err := s.History(ctx, subject, 0)
	if err != nil || len(full) != 5 {
		t.Fatalf("history: %d events, %v", len(full), err)
	}
	for _, tc := range []struct {
		name  string
		from  uint64
		known int // events the behind replica holds, of those from from
	}{
		{"the replica holds nothing of the server", 0, 0},
		{"the replica holds the first two", 0, 2},
		{"the replica is current", 0, 5},
		{"from the third event, the replica holds none of it", full[2].Sequence, 0},
		{"from between events, the replica holds one", full[2].Sequence - 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := s.History(ctx, subject, tc.from)
			if err != nil {
				t.Fatal(err)
			}
			behind := func(ctx context.Context, subj string, from uint64) ([]events.Envelope, error) {
				h, err := s.History(ctx, subj, from)
				return h[:tc.known], err
			}
			got, err := s.currentHistory(ctx, subject, tc.from, behind)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d events, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i].ID != want[i].ID || got[i].Sequence != want[i].Sequence || got[i].Type != want[i].Type {
					t.Errorf("event %d: %s seq %d, want %s seq %d", i, got[i].ID, got[i].Sequence, want[i].ID, want[i].Sequence)
				}
			}
		})
	}
	if _, err := s.CurrentHistory(ctx, events.FleetGameServersSubject("arena"), 0); err == nil {
		t.Error("CurrentHistory of a wildcard: no error")
	}
}

// A last event older than the first a replica showed is read again from
// the leader; a leader that does not have it either is an error, never a
// history cut short.
func TestLastSequenceAfterAskTheLeader(t *testing.T) {
	ctx, s := newTestStore(t)
	name := events.GameServerName("arena", "gs-a")
	subject := events.MustSubject(name)
	var last uint64
	var err error
	for range 3 {
		if last, err = s.Append(ctx, subject, events.AnySequence, events.New(name, time.Now(), &eventsv1.HealthDegraded{})); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.lastSequenceAfter(ctx, subject, last-1); err != nil || got != last {
		t.Errorf("lastSequenceAfter(%d) = %d, %v; want %d", last-1, got, err, last)
	}
	if got, err := s.lastSequenceAfter(ctx, subject, last+5); err == nil {
		t.Errorf("lastSequenceAfter past the leader's last = %d, want an error", got)
	}
	if got, err := s.lastSequenceAfter(ctx, events.MustSubject(events.GameServerName("arena", "none")), 1); err == nil {
		t.Errorf("lastSequenceAfter of an empty subject = %d, want an error", got)
	}
}

// emptyBatch is a pull's answer with no message and no error: what the
// client makes of a server's "no messages" or "request timeout".
type emptyBatch struct{}

func (emptyBatch) Messages() <-chan jetstream.Msg {
	ch := make(chan jetstream.Msg)
	close(ch)
	return ch
}

func (emptyBatch) Error() error { return nil }

// A history read whose no-wait pull comes back empty, with events pending,
// waits for them once and returns them all (it used to fail the read: a
// player's rejoin, once, under load); a server that keeps answering with
// nothing fails it, never a short history.
func TestHistoryPullsAgainAfterAnEmptyAnswer(t *testing.T) {
	ctx, s := newTestStore(t)
	name := events.GameServerName("arena", "gs-a")
	subject := events.MustSubject(name)
	for i := range 5 {
		if _, err := s.Append(ctx, subject, events.AnySequence, events.New(name, time.Now(), &eventsv1.HealthDegraded{MissedPeriods: int32(i)})); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		empties int // pulls answered with nothing before the server's own
		want    int // events read; 0 for an error
	}{
		{"every pull answered", 0, 5},
		{"the first pull answered with nothing", 1, 5},
		{"the server answers nothing twice", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pulls, waits int
			s.pull = func(cons jetstream.Consumer, n int, wait bool) (jetstream.MessageBatch, error) {
				pulls++
				if wait {
					waits++
				}
				if pulls <= tc.empties {
					return emptyBatch{}, nil
				}
				return pullHistory(cons, n, wait)
			}
			t.Cleanup(func() { s.pull = pullHistory })
			got, err := s.History(ctx, subject, 0)
			switch {
			case tc.want == 0 && err == nil:
				t.Fatalf("%d events, no error: a short history", len(got))
			case tc.want == 0:
				t.Logf("error, as wanted: %v", err)
			case err != nil || len(got) != tc.want:
				t.Fatalf("%d events, %v; want %d", len(got), err, tc.want)
			}
			if wantWaits := min(tc.empties, 1); waits != wantWaits {
				t.Errorf("%d waiting pulls, want %d", waits, wantWaits)
			}
		})
	}
}
