package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metricsdk "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

type env struct {
	ctx   context.Context
	js    jetstream.JetStream
	store *natsjs.Store
}

func newEnv(t testing.TB) env {
	t.Helper()
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := natsjs.Setup(ctx, js, natsjs.Options{}); err != nil {
		t.Fatal(err)
	}
	s, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return env{ctx: ctx, js: js, store: s}
}

// fleetCreated is a real event for fleet id.
func fleetCreated(id string, replicas int32) events.Envelope {
	return events.New(events.FleetName(id), time.Now(), &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: replicas}})
}

func fleetSubject(id string) string { return events.MustSubject(events.FleetName(id)) }

// streamMsgs returns the number of messages in the stream.
func (e env) streamMsgs(t testing.TB) uint64 {
	t.Helper()
	info, err := e.store.Stream().Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (e env) history(t testing.TB, subject string, from uint64) []events.Envelope {
	t.Helper()
	h, err := e.store.History(e.ctx, subject, from)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (e env) append(t testing.TB, subject string, expected uint64, evs ...events.Envelope) uint64 {
	t.Helper()
	seq, err := e.store.Append(e.ctx, subject, expected, evs...)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestServerOrder pins down the nats-server behaviour Append's retry
// handling is built on: a standalone server checks the expected last
// subject sequence before the de-duplication window, so a retry with a
// stale guard is refused (10071) instead of acknowledged as a duplicate.
// Append copes with either order; if this fails after a server upgrade,
// update the comment on Append.
func TestServerOrder(t *testing.T) {
	e := newEnv(t)
	subject := fleetSubject("order")
	publish := func(id string, expected uint64) (*jetstream.PubAck, error) {
		msg := nats.NewMsg(subject)
		msg.Data = []byte("x")
		msg.Header.Set(jetstream.MsgIDHeader, id)
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expected, 10))
		return e.js.PublishMsg(e.ctx, msg)
	}
	first, err := publish("id-1", 0)
	if err != nil {
		t.Fatal(err)
	}

	// Same id, guard now stale: the sequence check wins.
	_, err = publish("id-1", 0)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("retry with a stale guard: err %v, want API error %d (expected sequence checked before duplicates)",
			err, jetstream.JSErrCodeStreamWrongLastSequence)
	}

	// Same id, guard still right: a duplicate with the original sequence.
	ack, err := publish("id-1", first.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate || ack.Sequence != first.Sequence {
		t.Fatalf("retry with a current guard: ack %+v, want duplicate of %d", ack, first.Sequence)
	}
}

func TestAppendConcurrentSameExpected(t *testing.T) {
	e := newEnv(t)
	subject := fleetSubject("race")
	const rounds = 50
	var last uint64
	for round := range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		seqs := make([]uint64, 2)
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				ev := fleetCreated("race", int32(i))
				<-start
				seqs[i], errs[i] = e.store.Append(e.ctx, subject, last, ev)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: both appends with expected %d succeeded (%d, %d)", round, last, seqs[0], seqs[1])
				}
				winner = i
			case errors.Is(err, events.ErrConflict):
			default:
				t.Fatalf("round %d: append %d: %v, want success or a conflict", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: both appends conflicted: %v; %v", round, errs[0], errs[1])
		}
		last = seqs[winner]
		if got, err := e.store.LastSequence(e.ctx, subject); err != nil || got != last {
			t.Fatalf("round %d: LastSequence = %d, %v; want %d", round, got, err, last)
		}
	}
	if n := len(e.history(t, subject, 0)); n != rounds {
		t.Fatalf("%d events stored, want one per round (%d)", n, rounds)
	}
}

func TestAppendRetry(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name string
		// run appends, retries, and returns the sequence the retry must
		// return and the retry's result.
		run func(t *testing.T, subject, id string) (want uint64, got uint64, err error)
		// stored is how many events the subject must hold afterwards.
		stored int
	}{
		{
			name: "same guard",
			run: func(t *testing.T, subject, id string) (uint64, uint64, error) {
				ev := fleetCreated(id, 3)
				want := e.append(t, subject, 0, ev)
				got, err := e.store.Append(e.ctx, subject, 0, ev)
				return want, got, err
			},
			stored: 1,
		},
		{
			name: "guard still current",
			run: func(t *testing.T, subject, id string) (uint64, uint64, error) {
				ev := fleetCreated(id, 3)
				want := e.append(t, subject, 0, ev)
				got, err := e.store.Append(e.ctx, subject, want, ev)
				return want, got, err
			},
			stored: 1,
		},
		{
			name: "another writer appended in between",
			run: func(t *testing.T, subject, id string) (uint64, uint64, error) {
				ev := fleetCreated(id, 3)
				want := e.append(t, subject, 0, ev)
				e.append(t, subject, want, fleetCreated(id, 4))
				got, err := e.store.Append(e.ctx, subject, 0, ev)
				return want, got, err
			},
			stored: 2,
		},
		{
			name: "any sequence",
			run: func(t *testing.T, subject, id string) (uint64, uint64, error) {
				ev := fleetCreated(id, 3)
				want := e.append(t, subject, events.AnySequence, ev)
				got, err := e.store.Append(e.ctx, subject, events.AnySequence, ev)
				return want, got, err
			},
			stored: 1,
		},
		{
			name: "several events",
			run: func(t *testing.T, subject, id string) (uint64, uint64, error) {
				evs := []events.Envelope{fleetCreated(id, 3), fleetCreated(id, 4), fleetCreated(id, 5)}
				want := e.append(t, subject, 0, evs...)
				got, err := e.store.Append(e.ctx, subject, 0, evs...)
				return want, got, err
			},
			stored: 3,
		},
		{
			name: "after a partial append",
			run: func(t *testing.T, subject, id string) (uint64, uint64, error) {
				evs := []events.Envelope{fleetCreated(id, 3), fleetCreated(id, 4)}
				first := e.append(t, subject, 0, evs[0])
				got, err := e.store.Append(e.ctx, subject, 0, evs...)
				return first + 1, got, err
			},
			stored: 2,
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("retry-%d", i)
			subject := fleetSubject(id)
			before := e.streamMsgs(t)
			want, got, err := tc.run(t, subject, id)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if got != want {
				t.Fatalf("retry returned sequence %d, want %d", got, want)
			}
			if n := len(e.history(t, subject, 0)); n != tc.stored {
				t.Fatalf("history holds %d events, want %d", n, tc.stored)
			}
			if n := e.streamMsgs(t) - before; n != uint64(tc.stored) {
				t.Fatalf("stream grew by %d messages, want %d", n, tc.stored)
			}
		})
	}
}

func TestAppendExpectedSequence(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name     string
		prior    int                      // events on the subject before the append
		expected func(last uint64) uint64 // from the subject's last sequence
		conflict bool
	}{
		{"zero on a new subject", 0, func(uint64) uint64 { return 0 }, false},
		{"zero on a subject with events", 1, func(uint64) uint64 { return 0 }, true},
		{"current", 2, func(last uint64) uint64 { return last }, false},
		{"stale", 2, func(last uint64) uint64 { return last - 1 }, true},
		{"ahead", 1, func(last uint64) uint64 { return last + 5 }, true},
		{"nonzero on a new subject", 0, func(uint64) uint64 { return 1 }, true},
		{"any on a new subject", 0, func(uint64) uint64 { return events.AnySequence }, false},
		{"any on a subject with events", 2, func(uint64) uint64 { return events.AnySequence }, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("exp-%d", i)
			subject := fleetSubject(id)
			for range tc.prior {
				// Interleave another subject so stream and subject sequences differ.
				e.append(t, fleetSubject("other"), events.AnySequence, fleetCreated("other", 1))
				e.append(t, subject, events.AnySequence, fleetCreated(id, 1))
			}
			last, err := e.store.LastSequence(e.ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			seq, err := e.store.Append(e.ctx, subject, tc.expected(last), fleetCreated(id, 2))
			if got := errors.Is(err, events.ErrConflict); got != tc.conflict {
				t.Fatalf("conflict = %v (err %v), want %v", got, err, tc.conflict)
			}
			if !tc.conflict && err != nil {
				t.Fatal(err)
			}
			after, err := e.store.LastSequence(e.ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			want := seq
			if tc.conflict {
				want = last // nothing stored
			}
			if after != want {
				t.Fatalf("subject's last sequence %d after the append, want %d", after, want)
			}
		})
	}
}

func TestAppendSeveralEvents(t *testing.T) {
	e := newEnv(t)
	subject := fleetSubject("several")
	first := e.append(t, subject, 0, fleetCreated("several", 1))
	evs := []events.Envelope{fleetCreated("several", 2), fleetCreated("several", 3), fleetCreated("several", 4)}
	last := e.append(t, subject, first, evs...)
	if last != first+3 {
		t.Fatalf("append ended at %d, want %d", last, first+3)
	}
	hist := e.history(t, subject, first+1)
	if len(hist) != len(evs) {
		t.Fatalf("%d events after %d, want %d", len(hist), first, len(evs))
	}
	for i, h := range hist {
		if h.ID != evs[i].ID || h.Sequence != first+1+uint64(i) {
			t.Fatalf("event %d: id %s sequence %d, want %s at %d", i, h.ID, h.Sequence, evs[i].ID, first+1+uint64(i))
		}
	}
}

func TestAppendRejects(t *testing.T) {
	e := newEnv(t)
	bad := fleetCreated("rejects", 1)
	bad.Type = "FleetDeleted" // does not match the payload
	noID := fleetCreated("rejects", 1)
	noID.ID = ""
	tests := []struct {
		name    string
		subject string
		evs     []events.Envelope
	}{
		{"no events", fleetSubject("rejects"), nil},
		{"wildcard subject", events.FleetGameServersSubject("rejects"), []events.Envelope{fleetCreated("rejects", 1)}},
		{"subject outside the stream", "elsewhere.fleet.rejects", []events.Envelope{fleetCreated("rejects", 1)}},
		{"bare prefix", events.SubjectPrefix + ".", []events.Envelope{fleetCreated("rejects", 1)}},
		{"bad envelope after a good one", fleetSubject("rejects"), []events.Envelope{fleetCreated("rejects", 1), bad}},
		{"event without id", fleetSubject("rejects"), []events.Envelope{noID}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.streamMsgs(t)
			if _, err := e.store.Append(e.ctx, tc.subject, events.AnySequence, tc.evs...); err == nil {
				t.Fatal("append succeeded, want an error")
			} else if errors.Is(err, events.ErrConflict) {
				t.Fatalf("err %v is a conflict, want another error", err)
			}
			if n := e.streamMsgs(t) - before; n != 0 {
				t.Fatalf("%d messages stored by a refused append", n)
			}
		})
	}
}

func TestAppendHeaders(t *testing.T) {
	e := newEnv(t)
	traced := fleetCreated("headers", 1)
	traced.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced.TraceState = "vendor=x"
	tests := []struct {
		name string
		ev   events.Envelope
		want map[string]string
	}{
		{"plain", fleetCreated("headers", 2), map[string]string{natsjs.HeaderTraceParent: "", natsjs.HeaderTraceState: ""}},
		{"traced", traced, map[string]string{natsjs.HeaderTraceParent: traced.TraceParent, natsjs.HeaderTraceState: traced.TraceState}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq := e.append(t, fleetSubject("headers"), events.AnySequence, tc.ev)
			msg, err := e.store.Stream().GetMsg(e.ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			tc.want[jetstream.MsgIDHeader] = tc.ev.ID
			tc.want[natsjs.HeaderType] = "FleetCreated"
			for k, v := range tc.want {
				if got := msg.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if got := msg.Header.Get(jetstream.ExpectedLastSubjSeqHeader); got != "" {
				t.Errorf("AnySequence append carries %s: %q", jetstream.ExpectedLastSubjSeqHeader, got)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	e := newEnv(t)
	a := events.MustSubject(events.GameServerName("arena", "gs-a"))
	b := events.MustSubject(events.GameServerName("arena", "gs-b"))
	other := events.MustSubject(events.GameServerName("other", "gs-a"))
	var all, onA []events.Envelope
	for i := range 3 {
		for _, subj := range []string{a, b, other} {
			name, _ := events.NameFromSubject(subj)
			ev := events.New(name, time.Now(), &eventsv1.HealthDegraded{MissedPeriods: int32(i)})
			ev.Sequence = e.append(t, subj, events.AnySequence, ev)
			if subj == other {
				continue
			}
			all = append(all, ev)
			if subj == a {
				onA = append(onA, ev)
			}
		}
	}
	tests := []struct {
		name    string
		subject string
		from    uint64
		want    []events.Envelope
	}{
		{"one subject", a, 0, onA},
		{"from 1 is all", a, 1, onA},
		{"wildcard", events.FleetGameServersSubject("arena"), 0, all},
		{"from an event's sequence", a, onA[1].Sequence, onA[1:]},
		{"from between events", a, onA[1].Sequence - 1, onA[1:]},
		{"wildcard from", events.FleetGameServersSubject("arena"), all[3].Sequence, all[3:]},
		{"wildcard, one event", events.FleetGameServersSubject("arena"), all[5].Sequence, all[5:]},
		{"one event", a, onA[2].Sequence, onA[2:]},
		{"past the end", a, onA[2].Sequence + 1, nil},
		{"far past the stream's end", a, 1 << 40, nil},
		{"empty subject", fleetSubject("none"), 0, nil},
		{"empty wildcard", events.FleetGameServersSubject("none"), 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got := e.history(t, tc.subject, tc.from)
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("History took %s", took)
			}
			if got == nil {
				t.Error("History returned nil, want an empty slice")
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d events, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.ID != w.ID || g.Sequence != w.Sequence || g.Type != w.Type || g.Aggregate != w.Aggregate || !proto.Equal(g.Data, w.Data) {
					t.Fatalf("event %d: got %s %s seq %d %v, want %s %s seq %d %v", i, g.ID, g.Type, g.Sequence, g.Data, w.ID, w.Type, w.Sequence, w.Data)
				}
			}
		})
	}
	info, err := e.store.Stream().Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("%d consumers left behind by History", info.State.Consumers)
	}
}

func TestHistoryLarge(t *testing.T) {
	e := newEnv(t)
	subject := fleetSubject("large")
	const n = 2500 // more than one pull batch
	evs := make([]events.Envelope, 0, 100)
	for i := range n {
		evs = append(evs, fleetCreated("large", int32(i)))
		if len(evs) == cap(evs) {
			e.append(t, subject, events.AnySequence, evs...)
			evs = evs[:0]
		}
	}
	got := e.history(t, subject, 0)
	if len(got) != n {
		t.Fatalf("%d events, want %d", len(got), n)
	}
	for i, g := range got {
		if g.Sequence != uint64(i+1) || g.Data.(*eventsv1.FleetCreated).GetSpec().GetReplicas() != int32(i) {
			t.Fatalf("event %d: sequence %d, payload %v", i, g.Sequence, g.Data)
		}
	}
}

// TestHistoryUndecodable: an undecodable message on a subject (junk, or
// an event of another aggregate) stops no read of the subject. History,
// CurrentHistory and LastEvent give it in its place as the envelope that
// stands for it, whose sequence guards the next append, and the store's
// metric counts it once. Before, every read of the subject failed, and an
// agent's writes to a game server so poisoned retried for ever.
func TestHistoryUndecodable(t *testing.T) {
	e := newEnv(t)
	reader := metricsdk.NewManualReader()
	store, err := natsjs.New(e.ctx, e.js, natsjs.Options{MeterProvider: metricsdk.NewMeterProvider(metricsdk.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		prior int    // good events before the poison
		after int    // good events after it
		junk  []byte // nil: another aggregate's event
	}{
		{"only event", 0, 0, []byte("not an envelope")},
		{"after good ones", 2, 0, []byte("not an envelope")},
		{"among good ones", 1, 2, []byte("not an envelope")},
		{"another aggregate's event last", 1, 0, nil},
		{"another aggregate's event among good ones", 1, 1, nil},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("poison-%d", i)
			subject := fleetSubject(id)
			for range tc.prior {
				e.append(t, subject, events.AnySequence, fleetCreated(id, 1))
			}
			junk := tc.junk
			if junk == nil {
				other := fleetCreated("someone-else", 1)
				if junk, err = other.Marshal(); err != nil {
					t.Fatal(err)
				}
			}
			ack, err := e.js.Publish(e.ctx, subject, junk)
			if err != nil {
				t.Fatal(err)
			}
			for range tc.after {
				e.append(t, subject, events.AnySequence, fleetCreated(id, 1))
			}
			for _, read := range []struct {
				name string
				f    func(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)
			}{{"History", store.History}, {"CurrentHistory", store.CurrentHistory}} {
				got, err := read.f(e.ctx, subject, 0)
				if err != nil {
					t.Fatalf("%s: %v", read.name, err)
				}
				if len(got) != tc.prior+1+tc.after {
					t.Fatalf("%s: %d events, want %d", read.name, len(got), tc.prior+1+tc.after)
				}
				u := got[tc.prior]
				if u.Sequence != ack.Sequence || u.Type != events.UndecodableType || !errors.Is(u.Undecodable, events.ErrUndecodable) || u.Aggregate != events.FleetName(id) {
					t.Fatalf("%s: at the poison's place: %+v, want what stands for sequence %d", read.name, u, ack.Sequence)
				}
				if _, err := events.ApplyFleet(nil, u); !events.Skipped(err) {
					t.Fatalf("%s: the fold of what stands for it: %v, want it skipped", read.name, err)
				}
				for j, g := range got {
					if j != tc.prior && g.Undecodable != nil {
						t.Fatalf("%s: event %d undecodable: %v", read.name, j, g.Undecodable)
					}
				}
			}
			last, ok, err := store.LastEvent(e.ctx, subject)
			if err != nil || !ok {
				t.Fatalf("LastEvent: %v, %v", ok, err)
			}
			if tc.after == 0 && last.Sequence != ack.Sequence {
				t.Fatalf("LastEvent is %d, want the poison's %d", last.Sequence, ack.Sequence)
			}
			// Its sequence guards the next append like any other.
			seq, err := store.Append(e.ctx, subject, last.Sequence, fleetCreated(id, 2))
			if err != nil {
				t.Fatalf("append guarded by the last sequence read: %v", err)
			}
			if seq <= last.Sequence {
				t.Fatalf("appended at %d", seq)
			}
		})
	}
	if got := counterSum(t, reader, "tether_events_undecodable_skipped"); got != int64(len(tests)) {
		t.Fatalf("tether_events_undecodable_skipped = %d, want %d (each once)", got, len(tests))
	}
}

// counterSum reads an int64 counter's sum from reader.
func counterSum(t *testing.T, reader *metricsdk.ManualReader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is %T", name, m.Data)
			}
			var n int64
			for _, dp := range sum.DataPoints {
				n += dp.Value
			}
			return n
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestHistoryCanceled(t *testing.T) {
	e := newEnv(t)
	subject := fleetSubject("canceled")
	e.append(t, subject, 0, fleetCreated("canceled", 1))
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.store.History(ctx, subject, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestSequences(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		read func() (uint64, error)
	}{
		{"unknown subject", func() (uint64, error) { return e.store.LastSequence(e.ctx, fleetSubject("unknown")) }},
		{"empty stream", func() (uint64, error) { return e.store.StreamLastSequence(e.ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := tc.read(); err != nil || got != 0 {
				t.Fatalf("got %d, %v; want 0", got, err)
			}
		})
	}
	a := e.append(t, fleetSubject("a"), 0, fleetCreated("a", 1))
	b := e.append(t, fleetSubject("b"), 0, fleetCreated("b", 1))
	if got, err := e.store.LastSequence(e.ctx, fleetSubject("a")); err != nil || got != a {
		t.Fatalf("LastSequence(a) = %d, %v; want %d", got, err, a)
	}
	if got, err := e.store.StreamLastSequence(e.ctx); err != nil || got != b {
		t.Fatalf("StreamLastSequence = %d, %v; want %d", got, err, b)
	}
}

func TestNew(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	ctx := t.Context()
	tests := []struct {
		name    string
		opts    natsjs.Options
		wantErr bool
	}{
		{"defaults", natsjs.Options{}, false},
		{"again, unchanged", natsjs.Options{}, false},
		{"longer duplicate window", natsjs.Options{DuplicateWindow: time.Hour}, false},
		{"too many replicas", natsjs.Options{Replicas: 7}, true},
		{"negative duplicate window", natsjs.Options{DuplicateWindow: -time.Second}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := natsjs.Setup(ctx, js, tc.opts)
			if tc.wantErr {
				if err == nil {
					t.Fatal("Setup succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s, err := natsjs.New(ctx, js, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			cfg := s.Stream().CachedInfo().Config
			window := tc.opts.DuplicateWindow
			if window == 0 {
				window = natsjs.DefaultDuplicateWindow
			}
			if cfg.Name != events.StreamName || !cfg.DenyDelete || cfg.DenyPurge || !cfg.AllowDirect ||
				cfg.Duplicates != window || cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 ||
				len(cfg.Subjects) != 1 || cfg.Subjects[0] != events.SubjectPrefix+".>" {
				t.Fatalf("stream config %+v", cfg)
			}
		})
	}
}

// TestNewWithoutSetup: a service never creates the stream; it says to run
// `tether migrate`.
func TestNewWithoutSetup(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	_, err := natsjs.New(t.Context(), js, natsjs.Options{})
	if !errors.Is(err, jsclient.ErrNotSetUp) || !strings.Contains(err.Error(), "tether migrate") {
		t.Fatalf("New on a server without the stream: %v, want ErrNotSetUp naming tether migrate", err)
	}
	if _, err := js.Stream(t.Context(), events.StreamName); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("New created the stream: %v", err)
	}
}

// BenchmarkAppendGuarded measures sequential synchronous appends, each
// guarded by its aggregate's last sequence, over 1000 aggregates.
func BenchmarkAppendGuarded(b *testing.B) {
	e := newEnv(b)
	const aggregates = 1000
	last := make([]uint64, aggregates)
	subjects := make([]string, aggregates)
	names := make([]string, aggregates)
	for i := range subjects {
		names[i] = events.GameServerName("arena", fmt.Sprintf("gs-%d", i))
		subjects[i] = events.MustSubject(names[i])
	}
	payload := &eventsv1.HealthDegraded{MissedPeriods: 1}
	i := 0
	for b.Loop() {
		k := i % aggregates
		seq, err := e.store.Append(e.ctx, subjects[k], last[k], events.New(names[k], time.Now(), payload))
		if err != nil {
			b.Fatal(err)
		}
		last[k] = seq
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkHistory measures reading one aggregate's history.
func BenchmarkHistory(b *testing.B) {
	for _, n := range []int{0, 1, 10, 100} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			e := newEnv(b)
			subject := fleetSubject("bench")
			for i := range n {
				e.append(b, subject, events.AnySequence, fleetCreated("bench", int32(i)))
			}
			for b.Loop() {
				h, err := e.store.History(e.ctx, subject, 0)
				if err != nil {
					b.Fatal(err)
				}
				if len(h) != n {
					b.Fatalf("%d events, want %d", len(h), n)
				}
			}
		})
	}
}

// BenchmarkHistoryOfTheNextEvent measures what an agent told of an
// allocation reads: a game server's history after the event it knows,
// one event appended guarded by it, with `between` other servers' events
// stored in between. Read by the first event at or after a sequence, the
// server looks through every one of those for the subject; read by the
// subject's last event, it finds it by its index.
func BenchmarkHistoryOfTheNextEvent(b *testing.B) {
	for _, between := range []int{0, 1000, 20000} {
		b.Run(fmt.Sprintf("between=%d", between), func(b *testing.B) {
			e := newEnv(b)
			name := events.GameServerName("arena", "gs-next")
			subject := events.MustSubject(name)
			known := e.append(b, subject, 0, events.New(name, time.Now(), &eventsv1.GameServerScheduled{Host: "hosts/h1"}))
			others := events.GameServerName("arena", "gs-other")
			for range between {
				e.append(b, events.MustSubject(others), events.AnySequence, events.New(others, time.Now(), &eventsv1.HealthDegraded{MissedPeriods: 1}))
			}
			e.append(b, subject, known, events.New(name, time.Now(), &eventsv1.HealthDegraded{MissedPeriods: 1}))
			for b.Loop() {
				h, err := e.store.History(e.ctx, subject, known+1)
				if err != nil {
					b.Fatal(err)
				}
				if len(h) != 1 {
					b.Fatalf("%d events, want 1", len(h))
				}
			}
		})
	}
}

// History after a known event reads the subject's last event first; it
// answers from it alone only when that event was appended guarded by the
// known one (nothing between), and reads on otherwise: two new events,
// a last event appended unguarded, nothing new, a whole history.
func TestHistoryAfterAKnownEvent(t *testing.T) {
	e := newEnv(t)
	name := events.GameServerName("arena", "gs-h")
	subject := events.MustSubject(name)
	other := events.MustSubject(events.GameServerName("arena", "gs-x"))
	ev := func(missed int32) events.Envelope {
		return events.New(name, time.Now(), &eventsv1.HealthDegraded{MissedPeriods: missed})
	}
	noise := func() {
		e.append(t, other, events.AnySequence, events.New(events.GameServerName("arena", "gs-x"), time.Now(), &eventsv1.HealthDegraded{MissedPeriods: 9}))
	}
	seqs := func(h []events.Envelope) []uint64 {
		out := []uint64{}
		for _, x := range h {
			out = append(out, x.Sequence)
		}
		return out
	}
	s1 := e.append(t, subject, 0, ev(1))
	noise()
	if got := seqs(e.history(t, subject, s1+1)); len(got) != 0 {
		t.Fatalf("nothing new after %d: %v", s1, got)
	}
	s2 := e.append(t, subject, s1, ev(2))
	noise()
	if got := seqs(e.history(t, subject, s1+1)); !slices.Equal(got, []uint64{s2}) {
		t.Fatalf("one guarded event after %d: %v, want [%d]", s1, got, s2)
	}
	s3 := e.append(t, subject, s2, ev(3))
	noise()
	s4 := e.append(t, subject, s3, ev(4))
	if got := seqs(e.history(t, subject, s2+1)); !slices.Equal(got, []uint64{s3, s4}) {
		t.Fatalf("two events after %d: %v, want [%d %d]", s2, got, s3, s4)
	}
	if got := seqs(e.history(t, subject, s1+1)); !slices.Equal(got, []uint64{s2, s3, s4}) {
		t.Fatalf("three events after %d: %v", s1, got)
	}
	s5 := e.append(t, subject, events.AnySequence, ev(5))
	if got := seqs(e.history(t, subject, s4+1)); !slices.Equal(got, []uint64{s5}) {
		t.Fatalf("an unguarded event after %d: %v, want [%d]", s4, got, s5)
	}
	if got := seqs(e.history(t, subject, 0)); !slices.Equal(got, []uint64{s1, s2, s3, s4, s5}) {
		t.Fatalf("whole history: %v", got)
	}
	if got := seqs(e.history(t, subject, s5+1)); len(got) != 0 {
		t.Fatalf("past the last event: %v", got)
	}
}

// An append while the stream cannot take it (here: the stream is gone,
// as it is to a writer while a NATS election runs) waits for it to come
// back and goes through; a store told not to wait fails at once with
// events.ErrUnavailable, as does one whose wait runs out.
func TestAppendWaitsForAnUnavailableStream(t *testing.T) {
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	nc, writerJS := natstest.Connect(t, ns)
	ctx := t.Context()
	if err := natsjs.Setup(ctx, js, natsjs.Options{}); err != nil {
		t.Fatal(err)
	}
	open := func(wait time.Duration) *natsjs.Store {
		s, err := natsjs.New(ctx, writerJS, natsjs.Options{UnavailableWait: wait})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	waiting, impatient, brief := open(time.Minute), open(-1), open(300*time.Millisecond)
	name := events.GameServerName("arena", "gs-1")
	appendOne := func(s *natsjs.Store) error {
		_, err := s.Append(ctx, events.MustSubject(name), events.AnySequence, events.New(name, time.Now(), &eventsv1.GameServerScheduled{Host: "hosts/h1"}))
		return err
	}
	if err := js.DeleteStream(ctx, events.StreamName); err != nil {
		t.Fatal(err)
	}
	if err := appendOne(impatient); !errors.Is(err, events.ErrUnavailable) {
		t.Fatalf("append without waiting: %v, want events.ErrUnavailable", err)
	}
	if err := appendOne(brief); !errors.Is(err, events.ErrUnavailable) {
		t.Fatalf("append whose wait ran out: %v, want events.ErrUnavailable", err)
	}

	// The stream comes back once the waiting append has been refused once.
	sent := nc.Stats().OutMsgs
	back := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(30 * time.Second); nc.Stats().OutMsgs == sent && time.Now().Before(deadline); {
			<-tick.C
		}
		back <- natsjs.Setup(ctx, js, natsjs.Options{})
	}()
	if err := appendOne(waiting); err != nil {
		t.Fatalf("append across the stream's absence: %v", err)
	}
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	hist, err := waiting.History(ctx, events.MustSubject(name), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 {
		t.Fatalf("%d events stored, want 1", len(hist))
	}
}
