package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/archive"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/archiver"
	kit "github.com/tetherhq/tether/services/testkit/stack"
)

// archiveStack is a stack whose API reads the archive in dir, with an
// archiver over it whose clock is a week and a day past the events the
// test writes at archiveT0.
type archiveStack struct {
	*stack
	k   *kit.Stack
	dir *archive.Dir
	at  time.Time // the time of the last event written
}

// archiveT0 is when the test's events happened, by their producers' clocks.
var archiveT0 = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)

func newArchiveStack(t *testing.T) *archiveStack {
	t.Helper()
	dir, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := kit.New(t, kit.WithProjector(), kit.WithAPI(1, func(k *kit.Stack, o *apiserver.Options) {
		o.ProjectionPool, o.JetStream, o.Archive = k.Pool, k.JS, dir
	}))
	return &archiveStack{stack: &stack{t: t, ctx: k.Ctx, addr: k.APIs[0].GRPCAddr(), store: k.Store, js: k.JS}, k: k, dir: dir, at: archiveT0}
}

// add appends events to an aggregate, a second apart, and returns the
// last one's sequence.
func (s *archiveStack) add(name string, msgs ...proto.Message) string {
	s.t.Helper()
	var seq uint64
	for _, m := range msgs {
		s.at = s.at.Add(time.Second)
		var err error
		if seq, err = s.store.Append(s.ctx, events.MustSubject(name), events.AnySequence, events.New(name, s.at, m)); err != nil {
			s.t.Fatal(err)
		}
	}
	return strconv.FormatUint(seq, 10)
}

// archive runs one archiving pass a week and a day after the events.
func (s *archiveStack) archive() archiver.Result {
	s.t.Helper()
	a, err := archiver.New(archiver.Options{Stream: s.store, Pool: s.k.Pool, Segments: s.dir, Retention: 7 * 24 * time.Hour,
		Now: func() time.Time { return archiveT0.Add(8 * 24 * time.Hour) }, Logger: s.k.Logger})
	if err != nil {
		s.t.Fatal(err)
	}
	res, err := a.RunOnce(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}

// TestArchiveCommands: once a terminated game server is archived, audit
// history, explain and export read it from the archive and say so;
// archive status counts it; archive verify passes, and fails, naming the
// segment, once the segment's file is altered.
func TestArchiveCommands(t *testing.T) {
	s := newArchiveStack(t)
	if out := s.ok("archive", "status"); !strings.Contains(out, "0 done") || !strings.Contains(out, "none recorded") {
		t.Fatalf("status of an empty archive:\n%s", out)
	}
	spec := &eventsv1.FleetSpec{Replicas: 1, Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
	events.NormalizeFleetSpec(spec)
	gs := events.GameServerName("arena", "gs-old")
	s.add("hosts/h1", &eventsv1.HostRegistered{Capacity: 10, Address: "127.0.0.1"})
	s.add(events.FleetName("arena"), &eventsv1.FleetCreated{Spec: spec})
	last := s.add(gs, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: spec.Template, Health: spec.Health},
		&eventsv1.ProcessStarted{Pid: 1000, Address: "127.0.0.1", Attempt: 1},
		&eventsv1.ProcessExited{ExitCode: proto.Int32(3)},
		&eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_PROCESS_CRASHED_BEFORE_READY})
	s.ok("gameservers", "get", "arena/gs-old", "--min-sequence", last)
	if res := s.archive(); res.Segments != 1 || res.Aggregates != 1 {
		t.Fatalf("archive pass: %+v", res)
	}
	infos, err := s.dir.List(s.ctx, "")
	if err != nil || len(infos) != 1 {
		t.Fatalf("segments: %v, %v", infos, err)
	}
	segment := infos[0].Name

	if r := s.run("gameservers", "get", "arena/gs-old"); r.code == 0 || !strings.Contains(r.stderr, "was archived") || !strings.Contains(r.stderr, segment) {
		t.Fatalf("get an archived server: exit %d\n%s", r.code, r.stderr)
	}
	if out := s.ok("audit", "history", "arena/gs-old"); !strings.Contains(out, "GameServerTerminated") ||
		!strings.Contains(out, "4 of these 4 events were read from archive segment "+segment) {
		t.Fatalf("history of the archived server:\n%s", out)
	}
	if out := s.ok("audit", "explain", "arena/gs-old"); !strings.Contains(out, "is TERMINATED") ||
		!strings.Contains(out, "PROCESS_CRASHED_BEFORE_READY") || !strings.Contains(out, "Archived:  read from archive segment "+segment) {
		t.Fatalf("explain the archived server:\n%s", out)
	}
	if out := s.ok("audit", "state", "arena/gs-old", "--sequence", last); !strings.Contains(out, "read from archive segment "+segment) {
		t.Fatalf("state of the archived server:\n%s", out)
	}
	var archived []string
	for l := range strings.Lines(s.ok("audit", "export", "--from", "1h", "--fleet", "arena")) {
		var e struct{ Type, Aggregate, ArchiveSegment string }
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("export line %q: %v", l, err)
		}
		if e.Aggregate == gs && e.ArchiveSegment == segment {
			archived = append(archived, e.Type)
		} else if e.ArchiveSegment != "" || e.Aggregate == gs {
			t.Fatalf("export line %q", l)
		}
	}
	if strings.Join(archived, " ") != "GameServerScheduled ProcessStarted ProcessExited GameServerTerminated" {
		t.Fatalf("exported from the archive: %v", archived)
	}

	var st struct {
		Segments                  struct{ Done string }
		Aggregates, Events, Bytes string
		Retention, LastPassTime   string
		SegmentsReadable          bool
	}
	if err := json.Unmarshal([]byte(s.ok("-o", "json", "archive", "status")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Segments.Done != "1" || st.Aggregates != "1" || st.Events != "4" || st.Bytes == "" || st.Retention != "604800s" ||
		st.LastPassTime != "2026-10-09T12:00:00Z" || !st.SegmentsReadable {
		t.Fatalf("archive status: %+v", st)
	}
	if out := s.ok("archive", "status"); !strings.Contains(out, "1 done") || !strings.Contains(out, "1 aggregates, 4 events") ||
		!strings.Contains(out, "168h0m0s") {
		t.Fatalf("archive status:\n%s", out)
	}
	if out := s.ok("archive", "verify"); !strings.Contains(out, segment) || !strings.Contains(out, "verified 1 segments: 0 failed") {
		t.Fatalf("verify:\n%s", out)
	}

	// Alter a byte in the middle of the segment: verify exits 1 naming it.
	path := filepath.Join(s.dir.Path(), segment)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"archive", "verify"}, {"archive", "verify", segment}} {
		r := s.run(args...)
		if r.code != 1 || !strings.Contains(r.stdout, "FAILED") || !strings.Contains(r.stderr, "1 of 1 archive segments failed verification: "+segment) {
			t.Fatalf("%v of an altered segment: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := s.run("archive", "verify", "events-nothing.seg"); r.code != 1 || !strings.Contains(r.stderr, "events-nothing.seg not found") {
		t.Fatalf("verify of an unknown segment: exit %d\n%s", r.code, r.stderr)
	}
}

func TestArchiveSegmentMetadataKey(t *testing.T) {
	if archiveSegmentMetadata != apiserver.ArchiveSegmentMetadata {
		t.Fatalf("tetherctl reads %q, the API sends %q", archiveSegmentMetadata, apiserver.ArchiveSegmentMetadata)
	}
}
