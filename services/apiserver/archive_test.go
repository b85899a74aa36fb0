package apiserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/archive"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/archiver"
)

// archiveT0 is when the archive tests' scenario happened: long enough
// before archiveNow for a week's retention.
var (
	archiveT0  = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	archiveNow = archiveT0.Add(8 * 24 * time.Hour)
)

// The archive scenario's aggregates.
var (
	arFleet   = events.FleetName("arena")
	arGone    = events.FleetName("gone")
	arServer  = events.GameServerName("arena", "gs-old")
	arSession = events.GameSessionName("gsess-old")
	arPlayer  = events.PlayerSessionName("gsess-old", "ps-2")
	arLive    = events.GameServerName("arena", "gs-live")
)

// archiveScenario is a history in which a game server is allocated,
// terminated, its session ended, and a fleet deleted, interleaved with
// aggregates that stay live; every event is a second after the last.
type archiveScenario struct {
	s    *stack
	at   time.Time
	seqs []uint64 // every event's, in order
	spec *eventsv1.FleetSpec
}

func (a *archiveScenario) add(name string, msgs ...proto.Message) {
	a.s.t.Helper()
	for _, m := range msgs {
		a.at = a.at.Add(time.Second)
		e := events.New(name, a.at, m)
		e.Producer = "tests"
		seq, err := a.s.Store.Append(a.s.Ctx, events.MustSubject(name), events.AnySequence, e)
		if err != nil {
			a.s.t.Fatalf("append to %s: %v", name, err)
		}
		a.seqs = append(a.seqs, seq)
	}
}

func (a *archiveScenario) run() {
	spec := &eventsv1.FleetSpec{Replicas: 2, Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
	events.NormalizeFleetSpec(spec)
	a.spec = spec
	ready := []proto.Message{
		&eventsv1.GameServerScheduled{Host: "hosts/h1", Template: spec.Template, Health: spec.Health},
		&eventsv1.ProcessStarted{Pid: 1000, Address: "127.0.0.1", Attempt: 1, Ports: []*eventsv1.Port{{Name: "game", Port: 7000}}},
		&eventsv1.SdkConnected{Transport: "grpc-stream"},
		&eventsv1.GameServerReady{},
	}
	a.add("hosts/h1", &eventsv1.HostRegistered{Capacity: 100, Address: "127.0.0.1"})
	a.add(arFleet, &eventsv1.FleetCreated{Spec: spec})
	a.add(arGone, &eventsv1.FleetCreated{Spec: spec})
	a.add(arServer, ready...)
	a.add(arLive, ready[:2]...)
	a.add(arServer, &eventsv1.GameServerAllocated{GameSession: arSession})
	a.add(arSession, &eventsv1.GameSessionCreated{GameServer: arServer, Host: "hosts/h1",
		Players: []*eventsv1.PlayerSeat{{PlayerSession: "ps-1", PlayerId: "p1"}}})
	a.add(arLive, ready[2:]...)
	a.add(arSession, &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "ps-2", PlayerId: "p2"}})
	a.add(arGone, &eventsv1.FleetDeleted{})
	a.add(arServer, &eventsv1.ShutdownRequested{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API},
		&eventsv1.ProcessExited{Signal: "terminated"})
	a.add(arLive, &eventsv1.LabelsChanged{Set: map[string]string{"mode": "ranked"}})
	a.add(arServer, &eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API})
	a.add(arSession, &eventsv1.GameSessionEnded{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED})
	a.add(arFleet, &eventsv1.FleetUpdated{Spec: spec})
	a.s.waitApplied(a.seqs[len(a.seqs)-1])
}

// storedAt is when the stream stored the event at seq (read before it is
// purged).
func (s *stack) storedAt(seq uint64) time.Time {
	s.t.Helper()
	m, err := s.Store.Stream().GetMsg(s.Ctx, seq)
	if err != nil {
		s.t.Fatal(err)
	}
	return m.Time
}

// dialAPI dials a replica's gRPC address.
func dialAPI(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// histories is what the history API says of the scenario's archived
// aggregates.
type histories struct {
	server, session, player, gone []*tetherv1.Event
	stateAt                       *tetherv1.StateAt
	explainServer, explainSession *tetherv1.Explanation
	export, exportFleet           []*tetherv1.Event
}

// readHistories reads every answer the test compares before and after
// archiving.
func readHistories(t *testing.T, hc tetherv1.HistoryServiceClient, stateSeq uint64, export *tetherv1.WatchEventsRequest) histories {
	t.Helper()
	ctx := t.Context()
	list := func(name string) []*tetherv1.Event {
		t.Helper()
		var out []*tetherv1.Event
		req := &tetherv1.ListEventsRequest{Name: name, PageSize: 3} // pages across the archive and the stream
		for {
			resp, err := hc.ListEvents(ctx, req)
			if err != nil {
				t.Fatalf("list events of %s: %v", name, err)
			}
			out = append(out, resp.GetEvents()...)
			var want []string
			for _, e := range resp.GetEvents() {
				if seg := e.GetArchiveSegment(); seg != "" && !slices.Contains(want, seg) {
					want = append(want, seg)
				}
			}
			if !slices.Equal(resp.GetArchiveSegments(), want) {
				t.Fatalf("list events of %s: the page says segments %v, its events %v", name, resp.GetArchiveSegments(), want)
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				return out
			}
		}
	}
	watch := func(req *tetherv1.WatchEventsRequest) []*tetherv1.Event {
		t.Helper()
		stream, err := hc.WatchEvents(ctx, proto.Clone(req).(*tetherv1.WatchEventsRequest))
		if err != nil {
			t.Fatal(err)
		}
		var out []*tetherv1.Event
		for {
			ev, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				t.Fatalf("export: %v", err)
			}
			out = append(out, ev)
		}
	}
	var h histories
	h.server, h.session, h.player, h.gone = list(arServer), list(arSession), list(arPlayer), list(arGone)
	var err error
	if h.stateAt, err = hc.GetStateAt(ctx, &tetherv1.GetStateAtRequest{Name: arServer, Sequence: int64(stateSeq)}); err != nil {
		t.Fatal(err)
	}
	if h.explainServer, err = hc.Explain(ctx, &tetherv1.ExplainRequest{Name: arServer}); err != nil {
		t.Fatal(err)
	}
	if h.explainSession, err = hc.Explain(ctx, &tetherv1.ExplainRequest{Name: arSession}); err != nil {
		t.Fatal(err)
	}
	h.export = watch(export)
	fleet := proto.Clone(export).(*tetherv1.WatchEventsRequest)
	fleet.Fleet = arFleet
	h.exportFleet = watch(fleet)
	return h
}

// diff describes how two messages differ, "" when they are equal.
func diff[M proto.Message](before, after M) string {
	if proto.Equal(before, after) {
		return ""
	}
	return "before: " + protojson.Format(before) + "\nafter: " + protojson.Format(after)
}

// withoutSegments returns copies of evs without their archive segments.
func withoutSegments(evs []*tetherv1.Event) []*tetherv1.Event {
	out := make([]*tetherv1.Event, len(evs))
	for i, e := range evs {
		out[i] = proto.Clone(e).(*tetherv1.Event)
		out[i].ArchiveSegment = ""
	}
	return out
}

// sameEvents fails unless after holds before's events (their archive
// segments aside), and each of after's is from segment exactly when
// archived says its sequence was archived.
func sameEvents(t *testing.T, what string, before, after []*tetherv1.Event, segment string, archived func(seq int64) bool) {
	t.Helper()
	if len(before) == 0 {
		t.Fatalf("%s: no events before archiving", what)
	}
	if len(before) != len(after) {
		seqs := func(evs []*tetherv1.Event) (out []int64) {
			for _, e := range evs {
				out = append(out, e.GetSequence())
			}
			return out
		}
		t.Fatalf("%s: %d events before archiving (%v), %d after (%v)", what, len(before), seqs(before), len(after), seqs(after))
	}
	for i, e := range withoutSegments(after) {
		if d := diff(before[i], e); d != "" {
			t.Fatalf("%s: event %d differs after archiving:\n%s", what, i, d)
		}
	}
	for _, e := range after {
		if want := archived(e.GetSequence()); (e.GetArchiveSegment() == segment) != want || (!want && e.GetArchiveSegment() != "") {
			t.Fatalf("%s: event %d (%s) read from %q; archived: %v, segment %s", what, e.GetSequence(), e.GetType(), e.GetArchiveSegment(), want, segment)
		}
	}
}

// TestArchivedHistoryIsServedFromTheArchive: once the archiver has moved a
// terminated game server, its ended session (with its player sessions) and
// a deleted fleet out of the stream, their histories, states at a
// sequence, explanations and a time-range export (with and without a
// fleet filter) are what they were before, read from the archive and
// saying so, merged in sequence order with the stream's live events; a GET
// says where an archived resource went; a name created again has its
// archived history and then its new one; a replica that does not read the
// archive refuses rather than answer with a gap.
func TestArchivedHistoryIsServedFromTheArchive(t *testing.T) {
	dir, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{archive: dir, replicas: 2})
	sc := &archiveScenario{s: s, at: archiveT0}
	sc.run()
	conn := dialAPI(t, s.grpcAddrs[0])
	hc := tetherv1.NewHistoryServiceClient(conn)

	// The export starts after the session's GameSessionCreated (seqs[10]),
	// so its fleet filter must learn the archived session's fleet from the
	// archive.
	export := &tetherv1.WatchEventsRequest{StartTime: timestamppb.New(s.storedAt(sc.seqs[11])),
		EndTime: timestamppb.New(s.storedAt(sc.seqs[len(sc.seqs)-1]))}
	stateSeq := sc.seqs[6] // the server READY
	before := readHistories(t, hc, stateSeq, export)

	a, err := archiver.New(archiver.Options{Stream: s.Store, Pool: s.Pool, Segments: dir, Retention: 7 * 24 * time.Hour,
		Now: func() time.Time { return archiveNow }, Logger: s.Logger})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := a.RunOnce(s.Ctx); err != nil || res.Segments != 1 || res.Aggregates != 3 {
		t.Fatalf("archive pass: %+v, %v; want the server, its session and the deleted fleet in one segment", res, err)
	}
	infos, err := dir.List(s.Ctx, "")
	if err != nil || len(infos) != 1 {
		t.Fatalf("segments: %v, %v", infos, err)
	}
	segment := infos[0].Name
	archivedSubjects := map[string]bool{events.MustSubject(arServer): true, events.MustSubject(arSession): true, events.MustSubject(arGone): true}
	archivedSeqs := map[int64]bool{}
	for _, e := range append(append(slices.Clone(before.server), before.session...), before.gone...) {
		archivedSeqs[e.GetSequence()] = true
	}
	for subject := range archivedSubjects {
		if last, err := s.Store.LastSequence(s.Ctx, subject); err != nil || last != 0 {
			t.Fatalf("%s still has events in the stream (%d, %v)", subject, last, err)
		}
	}
	archived := func(seq int64) bool { return archivedSeqs[seq] }

	after := readHistories(t, hc, stateSeq, export)
	all := func(int64) bool { return true }
	sameEvents(t, "the server's history", before.server, after.server, segment, all)
	sameEvents(t, "the session's history", before.session, after.session, segment, all)
	sameEvents(t, "the player session's history", before.player, after.player, segment, all)
	sameEvents(t, "the deleted fleet's history", before.gone, after.gone, segment, all)
	sameEvents(t, "the export", before.export, after.export, segment, archived)
	sameEvents(t, "the fleet's export", before.exportFleet, after.exportFleet, segment, archived)
	if !slices.ContainsFunc(after.export, func(e *tetherv1.Event) bool { return e.GetArchiveSegment() == "" }) ||
		!slices.ContainsFunc(after.exportFleet, func(e *tetherv1.Event) bool { return e.GetAggregate() == arPlayer || e.GetAggregate() == arSession }) {
		t.Fatalf("the export mixes no live events, or the fleet's export lost its archived session: %v", after.exportFleet)
	}

	if !slices.Equal(after.stateAt.GetArchiveSegments(), []string{segment}) {
		t.Fatalf("state at %d: archive segments %v", stateSeq, after.stateAt.GetArchiveSegments())
	}
	after.stateAt.ArchiveSegments = nil
	if d := diff(before.stateAt, after.stateAt); d != "" {
		t.Fatalf("state at %d differs after archiving:\n%s", stateSeq, d)
	}
	for _, x := range []struct{ before, after *tetherv1.Explanation }{{before.explainServer, after.explainServer}, {before.explainSession, after.explainSession}} {
		if !slices.Equal(x.after.GetArchiveSegments(), []string{segment}) {
			t.Fatalf("explanation of %s: archive segments %v", x.after.GetName(), x.after.GetArchiveSegments())
		}
		x.after.ArchiveSegments = nil
		x.after.Events = withoutSegments(x.after.GetEvents())
		if d := diff(x.before, x.after); d != "" {
			t.Fatalf("explanation of %s differs after archiving:\n%s", x.before.GetName(), d)
		}
	}
	if x := after.explainServer; x.GetState() != "TERMINATED" || x.GetReason() != "SHUTDOWN_REQUESTED_BY_API" {
		t.Fatalf("the archived termination is explained as %s, %s", x.GetState(), x.GetReason())
	}

	// REST says it too.
	r := s.do(http.MethodGet, "/v1/"+arServer+"/events", nil)
	evs, _ := r.body["events"].([]any)
	if r.status != http.StatusOK || len(evs) != len(before.server) || evs[0].(map[string]any)["archiveSegment"] != segment {
		t.Fatalf("REST history of %s: %d %v", arServer, r.status, r.body)
	}

	// A GET says where the archived resources went.
	for _, name := range []string{arServer, arSession, arPlayer, arGone} {
		r := s.do(http.MethodGet, "/v1/"+name, nil)
		if msg := r.str("message"); r.status != http.StatusNotFound || r.reason() != "NOT_FOUND" || !strings.Contains(msg, "was archived") ||
			!strings.Contains(msg, segment) || r.metadata(apiserver.ArchiveSegmentMetadata) != segment {
			t.Errorf("GET %s: %d %v; want NOT_FOUND naming its segment", name, r.status, r.body)
		}
	}

	// A fleet created again under the archived one's name: its archived
	// history, then its new one, in sequence order.
	sc.add(arGone, &eventsv1.FleetCreated{Spec: sc.spec})
	again := sc.seqs[len(sc.seqs)-1]
	s.waitApplied(again)
	gone := readHistories(t, hc, stateSeq, export).gone
	if len(gone) != len(before.gone)+1 {
		t.Fatalf("the recreated fleet's history: %v", gone)
	}
	sameEvents(t, "the recreated fleet's archived history", before.gone, gone[:len(before.gone)], segment, all)
	if last := gone[len(gone)-1]; last.GetSequence() != int64(again) || last.GetArchiveSegment() != "" {
		t.Fatalf("the recreated fleet's new event: %v", last)
	}
	// Its state is its new life's, folded from nothing as the views did;
	// at a point of its archived life, that life's.
	if x, err := hc.Explain(t.Context(), &tetherv1.ExplainRequest{Name: arGone}); err != nil || x.GetHistoryLength() != 1 ||
		x.GetState() != "ACTIVE" || len(x.GetArchiveSegments()) != 0 {
		t.Fatalf("explain the recreated fleet: %v, %v", x, err)
	}
	if st, err := hc.GetStateAt(t.Context(), &tetherv1.GetStateAtRequest{Name: arGone, Sequence: int64(again) - 1}); err != nil ||
		st.GetEventCount() != int32(len(before.gone)) || st.GetState().GetFields()["deleted"].GetBoolValue() != true ||
		!slices.Equal(st.GetArchiveSegments(), []string{segment}) {
		t.Fatalf("the recreated fleet's state before it was created again: %v, %v", st, err)
	}
	if st, err := hc.GetStateAt(t.Context(), &tetherv1.GetStateAtRequest{Name: arGone, Sequence: int64(again)}); err != nil ||
		st.GetEventCount() != 1 || st.GetState().GetFields()["deleted"].GetBoolValue() || len(st.GetArchiveSegments()) != 0 {
		t.Fatalf("the recreated fleet's state: %v, %v", st, err)
	}
	if r := s.do(http.MethodGet, "/v1/"+arGone, nil); r.status != http.StatusOK {
		t.Fatalf("GET the recreated fleet: %d %v", r.status, r.body)
	}

	// The second replica reads no archive: it refuses what needs it.
	off := tetherv1.NewHistoryServiceClient(dialAPI(t, s.grpcAddrs[1]))
	if _, err := off.ListEvents(t.Context(), &tetherv1.ListEventsRequest{Name: arServer}); reasonOf(err) != "ARCHIVE_NOT_READ" ||
		status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("history of an archived server from a replica without the archive: %v", err)
	}
	stream, err := off.WatchEvents(t.Context(), export)
	if err == nil {
		_, err = stream.Recv()
	}
	if reasonOf(err) != "ARCHIVE_NOT_READ" {
		t.Fatalf("export from a replica without the archive: %v", err)
	}
	if r := s.doAt(s.bases[1], http.MethodGet, "/v1/"+arServer, nil); r.status != http.StatusNotFound ||
		!strings.Contains(r.str("message"), "from an API server that reads the archive") {
		t.Fatalf("GET from a replica without the archive: %d %v", r.status, r.body)
	}
}

// metadata returns a value of the ErrorInfo metadata of an error reply.
func (r response) metadata(key string) string {
	details, _ := r.body["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		if m["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" {
			md, _ := m["metadata"].(map[string]any)
			v, _ := md[key].(string)
			return v
		}
	}
	return ""
}

// reasonOf returns the ErrorInfo reason of a gRPC error.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// TestArchiveStatusAndVerify: the status counts what the archive holds
// and says the archiver's last pass; verification passes, then fails for
// a segment whose file was altered, naming it and what differs.
func TestArchiveStatusAndVerify(t *testing.T) {
	dir, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{archive: dir, replicas: 2})
	if r := s.do(http.MethodGet, "/v1/archive:status", nil); r.status != http.StatusOK || r.body["lastPassTime"] != nil ||
		r.body["segmentsReadable"] != true {
		t.Fatalf("status of an empty archive: %d %v", r.status, r.body)
	}
	sc := &archiveScenario{s: s, at: archiveT0}
	sc.run()
	a, err := archiver.New(archiver.Options{Stream: s.Store, Pool: s.Pool, Segments: dir, Retention: 7 * 24 * time.Hour,
		Now: func() time.Time { return archiveNow }, Logger: s.Logger})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.RunOnce(s.Ctx)
	if err != nil || res.Segments != 1 {
		t.Fatalf("archive pass: %+v, %v", res, err)
	}

	ac := tetherv1.NewArchiveServiceClient(dialAPI(t, s.grpcAddrs[0]))
	st, err := ac.GetArchiveStatus(t.Context(), &tetherv1.GetArchiveStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetSegments().GetDone() != 1 || st.GetAggregates() != 3 || st.GetEvents() != res.Events || st.GetBytes() != res.Bytes ||
		!st.GetLastPassTime().AsTime().Equal(archiveNow) || st.GetRetention().AsDuration() != 7*24*time.Hour || st.GetLastPassError() != "" ||
		st.GetOldestEndTime() == nil || st.GetNewestEndTime().AsTime().Before(st.GetOldestEndTime().AsTime()) ||
		len(st.GetUnfinishedSegments()) != 0 || !st.GetSegmentsReadable() {
		t.Fatalf("status: %v; pass %+v", st, res)
	}
	if r := s.doAt(s.bases[1], http.MethodGet, "/v1/archive:status", nil); r.status != http.StatusOK || r.body["segmentsReadable"] == true {
		t.Fatalf("status from a replica without the archive: %d %v", r.status, r.body)
	}

	r := s.do(http.MethodPost, "/v1/archive:verify", map[string]any{})
	segs, _ := r.body["segments"].([]any)
	if r.status != http.StatusOK || len(segs) != 1 || segs[0].(map[string]any)["ok"] != true || r.body["failed"] != float64(0) {
		t.Fatalf("verify: %d %v", r.status, r.body)
	}
	name := segs[0].(map[string]any)["segment"].(map[string]any)["name"].(string)

	// Alter one byte in the middle of the segment.
	path := filepath.Join(dir.Path(), name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := ac.VerifyArchive(t.Context(), &tetherv1.VerifyArchiveRequest{Segment: name})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetFailed() != 1 || len(resp.GetSegments()) != 1 || resp.GetSegments()[0].GetOk() || len(resp.GetSegments()[0].GetProblems()) == 0 ||
		resp.GetSegments()[0].GetSegment().GetName() != name {
		t.Fatalf("verify of an altered segment: %v", resp)
	}
	for seg, want := range map[string]codes.Code{"events-nothing.seg": codes.NotFound, "../escape": codes.InvalidArgument} {
		if _, err := ac.VerifyArchive(t.Context(), &tetherv1.VerifyArchiveRequest{Segment: seg}); status.Code(err) != want {
			t.Errorf("verify %q: %v, want %s", seg, err, want)
		}
	}
	off := tetherv1.NewArchiveServiceClient(dialAPI(t, s.grpcAddrs[1]))
	if _, err := off.VerifyArchive(t.Context(), &tetherv1.VerifyArchiveRequest{}); reasonOf(err) != "ARCHIVE_NOT_READ" {
		t.Fatalf("verify from a replica without the archive: %v", err)
	}
	// History reads of the altered segment say it cannot be read.
	if _, err := tetherv1.NewHistoryServiceClient(dialAPI(t, s.grpcAddrs[0])).ListEvents(context.Background(),
		&tetherv1.ListEventsRequest{Name: arServer}); status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), name) {
		t.Fatalf("history from an altered segment: %v", err)
	}
}
