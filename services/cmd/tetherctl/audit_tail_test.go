package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestWatchHeaderName(t *testing.T) {
	if watchAfterHeader != apiserver.WatchAfterSequenceHeader {
		t.Fatalf("tetherctl reads %q, the API sends %q", watchAfterHeader, apiserver.WatchAfterSequenceHeader)
	}
}

// tailLine is one JSON line of tail or export.
type tailLine struct {
	Sequence, Type, Aggregate, Producer string
}

func jsonLines(t *testing.T, out string) []tailLine {
	t.Helper()
	var lines []tailLine
	for l := range strings.Lines(out) {
		var e tailLine
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		lines = append(lines, e)
	}
	return lines
}

// tail runs `tetherctl audit tail args…` until it printed n lines, then
// interrupts it and returns its output.
func (s *stack) tail(n int, args ...string) result {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		root := newRoot(&out)
		done <- execute(ctx, root, append([]string{"--addr", s.addr, "audit", "tail"}, args...), &errOut)
	}()
	wait.For(s.t, 20*time.Second, strconv.Itoa(n)+" lines from tail", func() bool { return strings.Count(out.String(), "\n") >= n })
	cancel()
	code := <-done
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func TestAuditTail(t *testing.T) {
	s := newStack(t)
	first := s.appendEvents(events.FleetName("arena"), &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 1}})
	gs := events.GameServerName("arena", "gs-1")
	s.appendEvents(gs, &eventsv1.GameServerScheduled{Host: "hosts/h1", Labels: map[string]string{"mode": "ranked"}})
	s.appendEvents(events.FleetName("duel"), &eventsv1.FleetCreated{Spec: &eventsv1.FleetSpec{Replicas: 1}})
	last := s.appendEvents(gs, &eventsv1.GameServerReady{})

	// From a sequence, filtered by fleet: the table.
	r := s.tail(2, "--after", first, "--fleet", "arena")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("tail: exit %d, stderr %q\n%s", r.code, r.stderr, r.stdout)
	}
	f := strings.Fields(lines[0])
	if len(f) < 6 || f[1] != "2" || f[2] != "GameServerScheduled" || f[3] != "arena/gs-1" || f[4] != "-" ||
		!strings.Contains(lines[0], `"labels":{"mode":"ranked"}`) {
		t.Fatalf("tail line %q", lines[0])
	}
	if f := strings.Fields(lines[1]); f[1] != last || f[2] != "GameServerReady" || f[5] != "-" {
		t.Fatalf("tail line %q", lines[1])
	}

	// Live, -o json: events stored while tail runs, by type.
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- execute(ctx, newRoot(&out), []string{"--addr", s.addr, "-o", "json", "audit", "tail", "--type", "GameServerUnhealthy"}, &syncBuffer{})
	}()
	// Until the watch is in place, an event may come before it: append
	// until one arrives, then one more.
	wait.For(t, 20*time.Second, "tail to print a live event", func() bool {
		s.appendEvents(gs, &eventsv1.GameServerUnhealthy{})
		return out.String() != ""
	})
	seq := s.appendEvents(gs, &eventsv1.GameServerUnhealthy{})
	wait.For(t, 20*time.Second, "tail to print event "+seq, func() bool { return strings.Contains(out.String(), `"sequence":"`+seq+`"`) })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("tail -o json exit %d", code)
	}
	got := jsonLines(t, out.String())
	for i, l := range got {
		if l.Type != "GameServerUnhealthy" || l.Aggregate != gs || (i > 0 && l.Sequence <= got[i-1].Sequence && len(l.Sequence) == len(got[i-1].Sequence)) {
			t.Fatalf("tail -o json lines %+v", got)
		}
	}
	if r := s.run("audit", "tail", "--type", "NoSuchEvent"); r.code != 1 || !strings.Contains(r.stderr, "INVALID_ARGUMENT") {
		t.Fatalf("tail of an unknown type: exit %d, stderr %q", r.code, r.stderr)
	}
}

// fakeStream replays events, then fails with err.
type fakeStream struct {
	header map[string][]string
	evs    []*tetherv1.Event
	err    error
}

func (f *fakeStream) Header() (map[string][]string, error) { return f.header, nil }
func (f *fakeStream) Recv() (*tetherv1.Event, error) {
	if len(f.evs) == 0 {
		return nil, f.err
	}
	ev := f.evs[0]
	f.evs = f.evs[1:]
	return ev, nil
}

// A broken stream is resumed after the last event printed, and an event
// the server sends again is not printed twice.
func TestStreamEventsResumes(t *testing.T) {
	ev := func(seq int64) *tetherv1.Event { return &tetherv1.Event{Sequence: seq, Type: "GameServerReady"} }
	streams := []*fakeStream{
		{header: map[string][]string{watchAfterHeader: {"10"}}, err: status.Error(codes.Unavailable, "connection reset")},
		{evs: []*tetherv1.Event{ev(11), ev(12)}, err: status.Error(codes.Unavailable, "load balancer")},
		{evs: []*tetherv1.Event{ev(12), ev(13)}, err: status.Error(codes.InvalidArgument, "bad")},
	}
	var reqs []int64
	open := func(_ context.Context, req *tetherv1.WatchEventsRequest) (eventStream, error) {
		reqs = append(reqs, req.GetAfterSequence())
		s := streams[0]
		streams = streams[1:]
		return s, nil
	}
	var out, errOut strings.Builder
	a := &app{out: &out, output: formatJSON, now: time.Now}
	c := &client{addr: "test"}
	err := a.streamEvents(context.Background(), c, open, &tetherv1.WatchEventsRequest{}, a.printTailEvent, &errOut)
	if status.Code(err) != codes.InvalidArgument || !errors.As(err, new(*callError)) {
		t.Fatalf("err %v, want the INVALID_ARGUMENT that ended it", err)
	}
	if want := []int64{0, 10, 12}; len(reqs) != 3 || reqs[0] != want[0] || reqs[1] != want[1] || reqs[2] != want[2] {
		t.Fatalf("requests after %v, want %v", reqs, want)
	}
	var seqs []string
	for _, l := range jsonLines(t, out.String()) {
		seqs = append(seqs, l.Sequence)
	}
	if strings.Join(seqs, " ") != "11 12 13" {
		t.Fatalf("printed %v, want 11 12 13", seqs)
	}
	if !strings.Contains(errOut.String(), "resuming after sequence 10") || !strings.Contains(errOut.String(), "resuming after sequence 12") {
		t.Fatalf("stderr %q", errOut.String())
	}
}

// Tail lines keep their columns whatever an actor's or a name's length:
// the columns after them start at the same place on every line (they
// drifted with a long actor, "dev-operator (operator, api-key)").
func TestTailLinesStayAligned(t *testing.T) {
	var out strings.Builder
	a := &app{out: &out, output: formatTable, now: time.Now}
	at := timestamppb.New(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	for _, ev := range []*tetherv1.Event{
		{Sequence: 1, Type: "FleetCreated", Aggregate: "fleets/lobby", Actor: "dev-operator (operator, api-key)", Time: at},
		{Sequence: 22, Type: "GameServerReady", Aggregate: "fleets/a-fleet-with-a-long-name/gameServers/gs-abcdefgh", Producer: "hosts/h1", Time: at},
		{Sequence: 333, Type: "FleetAutoscaleRecovered", Aggregate: "fleets/x", Actor: "an-actor-whose-name-goes-on-and-on-for-ever (admin, oidc)", Time: at},
	} {
		if err := a.printTailEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	// The payload column (here "-") starts at the same rune on each line.
	var starts []int
	for _, l := range lines {
		r := []rune(l)
		starts = append(starts, len(r)-1)
		if r[len(r)-1] != '-' {
			t.Fatalf("line %q does not end with the empty payload", l)
		}
	}
	if starts[0] != starts[1] || starts[1] != starts[2] {
		t.Errorf("the payload starts at runes %v:\n%s", starts, out.String())
	}
	if !strings.Contains(lines[2], "…") {
		t.Errorf("the long actor is not cut with an ellipsis: %q", lines[2])
	}
}
