package archiver_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/archiver"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashStepEnv) != "" {
		// A crash test's child: it uses its parent's PostgreSQL.
		os.Exit(m.Run())
	}
	pgtest.Main(m)
}

// t0 is when the scenario starts; its events are a second apart.
var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// retention is the tests' retention window.
const retention = 7 * 24 * time.Hour

// afterRetention is a clock reading past the retention window of the
// scenario's old aggregates, but not of its recent ones (recentAt).
var afterRetention = t0.Add(retention + 12*time.Hour)

// recentAt is when the scenario's recent aggregates end: a day after the
// old ones, inside the window at afterRetention.
var recentAt = t0.Add(24 * time.Hour)

// world is a stack with the projector, a scenario in the stream and the
// views, and an archive directory.
type world struct {
	t   testing.TB
	k   *kit.Stack
	ctx context.Context
	dir *archive.Dir
	at  time.Time
}

func newWorld(t testing.TB) *world {
	t.Helper()
	k := kit.New(t, kit.WithProjector())
	dir, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, k: k, ctx: k.Ctx, dir: dir, at: t0}
}

// archiver returns an archiver of the world at clock now; configure
// changes its options.
func (w *world) archiver(now time.Time, configure ...func(*archiver.Options)) *archiver.Archiver {
	w.t.Helper()
	o := archiver.Options{Stream: w.k.Store, Pool: w.k.Pool, Segments: w.dir, Retention: retention,
		Now: func() time.Time { return now }, Logger: w.k.Logger}
	for _, f := range configure {
		f(&o)
	}
	a, err := archiver.New(o)
	if err != nil {
		w.t.Fatal(err)
	}
	return a
}

// append writes payloads to an aggregate, guarded, each a second after
// the last.
func (w *world) append(name string, payloads ...proto.Message) uint64 {
	w.t.Helper()
	subject := events.MustSubject(name)
	last, err := w.k.Store.LastSequence(w.ctx, subject)
	if err != nil {
		w.t.Fatal(err)
	}
	var envs []events.Envelope
	for _, p := range payloads {
		w.at = w.at.Add(time.Second)
		e := events.New(name, w.at, p)
		e.Producer = "tests"
		envs = append(envs, e)
	}
	seq, err := w.k.Store.Append(w.ctx, subject, last, envs...)
	if err != nil {
		w.t.Fatalf("append to %s: %v", name, err)
	}
	return seq
}

var spec = func() *eventsv1.FleetSpec {
	s := &eventsv1.FleetSpec{Replicas: 2, Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
	events.NormalizeFleetSpec(s)
	return s
}()

// ready brings a new game server to READY.
func (w *world) ready(gs string) {
	w.t.Helper()
	w.append(gs, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: spec.Template, Health: spec.Health},
		&eventsv1.ProcessStarted{Pid: 1000, Address: "127.0.0.1", Attempt: 1, Ports: []*eventsv1.Port{{Name: "game", Port: 7000}}},
		&eventsv1.SdkConnected{Transport: "grpc-stream"},
		&eventsv1.GameServerReady{})
}

// allocate allocates a READY game server to a new game session with a
// player.
func (w *world) allocate(gs, gsess string) {
	w.t.Helper()
	w.append(gs, &eventsv1.GameServerAllocated{GameSession: gsess})
	w.append(gsess, &eventsv1.GameSessionCreated{GameServer: gs, Host: "hosts/h1",
		Players: []*eventsv1.PlayerSeat{{PlayerSession: "ps-1", PlayerId: "p1"}}})
	w.append(gsess, &eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{PlayerSession: "ps-2", PlayerId: "p2"}})
}

// terminate ends a live game server.
func (w *world) terminate(gs string) {
	w.t.Helper()
	w.append(gs, &eventsv1.ShutdownRequested{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API},
		&eventsv1.ProcessExited{Signal: "terminated"},
		&eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API})
}

// endSession ends a game session after its server ended.
func (w *world) endSession(gsess string) {
	w.t.Helper()
	w.append(gsess, &eventsv1.GameSessionEnded{Reason: eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_SERVER_ENDED})
}

// The scenario's aggregates.
var (
	arena, doomed, gone = events.FleetName("arena"), events.FleetName("doomed"), events.FleetName("gone")
	gsLive              = events.GameServerName("arena", "gs-live")
	gsOld               = events.GameServerName("arena", "gs-old")
	gsBusy              = events.GameServerName("arena", "gs-busy")
	gsRecent            = events.GameServerName("arena", "gs-recent")
	gsGone              = events.GameServerName("gone", "gs-1")
	sessOld             = events.GameSessionName("gsess-old")
	sessBusy            = events.GameSessionName("gsess-busy")
	sessLive            = events.GameSessionName("gsess-live")
	sessRecent          = events.GameSessionName("gsess-recent")
)

// archivedAtFirst are the aggregates the scenario has ended before the
// retention window at afterRetention; archivedLater those that end
// inside it (at recentAt).
var (
	archivedAtFirst = []string{gsOld, sessOld, doomed, gsGone, gone}
	archivedLater   = []string{gsRecent, sessRecent}
	// neverArchived are live, or still named by something live: gs-busy
	// is terminated, but its session still runs.
	neverArchived = []string{arena, "hosts/h1", gsLive, gsBusy, sessBusy, sessLive}
)

// scenario writes fleets, game servers and sessions, live and ended, and
// waits until the views have all of it.
func (w *world) scenario() {
	w.t.Helper()
	w.append("hosts/h1", &eventsv1.HostRegistered{Capacity: 100, Address: "127.0.0.1"})
	w.append(arena, &eventsv1.FleetCreated{Spec: spec})
	w.append(doomed, &eventsv1.FleetCreated{Spec: spec})
	w.append(gone, &eventsv1.FleetCreated{Spec: spec})
	for _, gs := range []string{gsLive, gsOld, gsBusy, gsRecent} {
		w.ready(gs)
	}
	w.append(gsGone, &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: spec.Template, Health: spec.Health})
	w.allocate(gsOld, sessOld)
	w.allocate(gsBusy, sessBusy)
	w.allocate(gsLive, sessLive)
	w.terminate(gsOld)
	w.endSession(sessOld)
	w.terminate(gsBusy) // its session still runs: the controller would end it
	w.append(gsGone, &eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_FLEET_DELETED})
	w.append(doomed, &eventsv1.FleetDeleted{})
	w.append(gone, &eventsv1.FleetDeleted{})

	w.at = recentAt
	w.allocate(gsRecent, sessRecent)
	w.terminate(gsRecent)
	w.endSession(sessRecent)
	w.waitProjected()
	var dead int
	if err := w.k.Pool.QueryRow(w.ctx, `SELECT count(*) FROM dead_letters`).Scan(&dead); err != nil || dead != 0 {
		w.t.Fatalf("the scenario has %d dead letters (%v)", dead, err)
	}
}

// waitProjected waits until the views have every event of the stream.
func (w *world) waitProjected() {
	w.t.Helper()
	last, err := w.k.Store.StreamLastSequence(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	wait.Until(w.t, 20*time.Second, "the views to reach the stream's end", func() error {
		cp, err := w.k.Views.Checkpoint(w.ctx)
		if err == nil && cp < last {
			err = fmt.Errorf("checkpoint %d, stream at %d", cp, last)
		}
		return err
	})
}

// snapshot is every message of the stream, by sequence.
type snapshot map[uint64]natsjs.StoredMessage

// snapshot reads every message of the stream as stored.
func (w *world) snapshot() snapshot {
	w.t.Helper()
	info, err := w.k.Store.Stream().Info(w.ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		w.t.Fatal(err)
	}
	out := snapshot{}
	for subject := range info.State.Subjects {
		msgs, err := w.k.Store.Stored(w.ctx, subject, 1, info.State.LastSeq)
		if err != nil {
			w.t.Fatal(err)
		}
		for _, m := range msgs {
			out[m.Sequence] = m
		}
	}
	if uint64(len(out)) != info.State.Msgs {
		w.t.Fatalf("read %d messages of %d", len(out), info.State.Msgs)
	}
	return out
}

// rows returns the view rows and events-table rows an aggregate has.
func (w *world) rows(name string) (view, evs int) {
	w.t.Helper()
	table := map[string]string{events.KindFleet: "fleets", events.KindHost: "hosts", events.KindGameServer: "game_servers",
		events.KindGameSession: "game_sessions"}[events.KindOf(events.MustSubject(name))]
	if err := w.k.Pool.QueryRow(w.ctx, `SELECT count(*) FROM `+table+` WHERE name = $1`, name).Scan(&view); err != nil {
		w.t.Fatal(err)
	}
	if err := w.k.Pool.QueryRow(w.ctx, `SELECT count(*) FROM events WHERE aggregate = $1`, name).Scan(&evs); err != nil {
		w.t.Fatal(err)
	}
	return view, evs
}

// catalogRow is one archived aggregate as the catalog records it.
type catalogRow struct {
	aggregate, subject, segment, state string
	first, last, events                int64
	firstTime, lastTime                time.Time
}

// catalog reads the archive catalog.
func (w *world) catalog() (segments map[string][]byte, aggs []catalogRow) {
	w.t.Helper()
	rows, err := w.k.Pool.Query(w.ctx, `SELECT a.aggregate, a.subject, a.segment, s.state, coalesce(a.first_sequence, 0), a.last_sequence, coalesce(a.events, 0),
  coalesce(a.first_time, 'epoch'), coalesce(a.last_time, 'epoch')
FROM archived_aggregates a JOIN archive_segments s ON s.name = a.segment ORDER BY a.aggregate`)
	if err != nil {
		w.t.Fatal(err)
	}
	aggs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalogRow, error) {
		var c catalogRow
		return c, r.Scan(&c.aggregate, &c.subject, &c.segment, &c.state, &c.first, &c.last, &c.events, &c.firstTime, &c.lastTime)
	})
	if err != nil {
		w.t.Fatal(err)
	}
	segments = map[string][]byte{}
	rows, err = w.k.Pool.Query(w.ctx, `SELECT name, coalesce(sha256, '') FROM archive_segments`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var sum []byte
		if err := rows.Scan(&name, &sum); err != nil {
			w.t.Fatal(err)
		}
		segments[name] = sum
	}
	return segments, aggs
}

// checkArchived checks, after archiving ended on a stream that held
// before, that nothing was lost or duplicated: every event of before is
// either still in the stream or in exactly one segment, byte for byte,
// never both; every segment is recorded once, DONE, verifies, and holds
// exactly its recorded aggregates; exactly the aggregates of want are
// archived, and have neither view rows nor events-table rows; and the
// views are what a replay of the stream makes.
func (w *world) checkArchived(before snapshot, want []string) {
	w.t.Helper()
	t := w.t
	segments, aggs := w.catalog()
	var got []string
	for _, a := range aggs {
		got = append(got, a.aggregate)
		if a.state != "DONE" {
			t.Errorf("%s is in segment %s, %s; want DONE", a.aggregate, a.segment, a.state)
		}
	}
	if slices.Sort(got); !slices.Equal(got, sorted(want)) {
		t.Errorf("archived %v, want %v", got, sorted(want))
	}

	// The store holds the recorded segments and nothing else.
	infos, err := w.dir.List(w.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, i := range infos {
		files = append(files, i.Name)
	}
	if !slices.Equal(files, sorted(slices.Collect(maps.Keys(segments)))) {
		t.Errorf("segment files %v, catalog %v", files, slices.Collect(maps.Keys(segments)))
	}
	if entries, err := os.ReadDir(w.dir.Path()); err != nil || len(entries) != len(files) {
		t.Errorf("the archive directory holds %d files (%v), %d segments: a crashed write was left behind", len(entries), err, len(files))
	}

	archived := map[uint64]string{} // sequence → segment
	for name, sum := range segments {
		r, err := archive.OpenSegment(w.ctx, w.dir, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Verify(); err != nil {
			t.Errorf("segment %s: %v", name, err)
		}
		if s := r.Sum(); !bytes.Equal(s[:], sum) {
			t.Errorf("segment %s: sum %x, catalog %x", name, s, sum)
		}
		var subjects []string
		for a, err := range r.All() {
			if err != nil {
				t.Fatal(err)
			}
			subjects = append(subjects, a.Subject)
			for _, rec := range a.Records {
				if other, ok := archived[rec.Sequence]; ok {
					t.Errorf("event %d is in segments %s and %s", rec.Sequence, other, name)
				}
				archived[rec.Sequence] = name
				b, ok := before[rec.Sequence]
				if !ok {
					t.Errorf("segment %s holds event %d, which the stream never had", name, rec.Sequence)
					continue
				}
				if rec.Subject != b.Subject || !rec.Time.Equal(b.Time) || !bytes.Equal(rec.Data, b.Data) || !sameHeader(rec, b) {
					t.Errorf("segment %s: event %d differs from the stream's", name, rec.Sequence)
				}
			}
		}
		var recorded []string
		for _, a := range aggs {
			if a.segment == name {
				recorded = append(recorded, a.subject)
				info, ok := r.Lookup(a.subject)
				if !ok || int64(info.FirstSequence) != a.first || int64(info.LastSequence) != a.last || int64(info.Events) != a.events {
					t.Errorf("segment %s: %s is %+v in the index, %+v in the catalog", name, a.subject, info, a)
				}
				// PostgreSQL keeps microseconds.
				if recs, err := r.Read(a.subject); err != nil || !recs[0].Time.Truncate(time.Microsecond).Equal(a.firstTime) ||
					!recs[len(recs)-1].Time.Truncate(time.Microsecond).Equal(a.lastTime) {
					t.Errorf("segment %s: %s's events were stored from %s to %s, the catalog says %s to %s (%v)", name, a.subject,
						recs[0].Time, recs[len(recs)-1].Time, a.firstTime, a.lastTime, err)
				}
			}
		}
		if !slices.Equal(subjects, sorted(recorded)) {
			t.Errorf("segment %s holds %v, the catalog records %v", name, subjects, recorded)
		}
		r.Close()
	}

	now := w.snapshot()
	for seq, m := range now {
		b, ok := before[seq]
		if !ok {
			t.Errorf("the stream holds event %d, which it did not before", seq)
		} else if !bytes.Equal(m.Data, b.Data) {
			t.Errorf("event %d changed in the stream", seq)
		}
		if seg, ok := archived[seq]; ok {
			t.Errorf("event %d is both in the stream and in segment %s", seq, seg)
		}
	}
	for seq := range before {
		_, inStream := now[seq]
		_, inArchive := archived[seq]
		if !inStream && !inArchive {
			t.Errorf("event %d (%s) is lost: in neither the stream nor the archive", seq, before[seq].Subject)
		}
	}

	for _, name := range want {
		if v, e := w.rows(name); v != 0 || e != 0 {
			t.Errorf("archived %s keeps %d view rows and %d events rows", name, v, e)
		}
	}
	w.check()
}

// check runs the projection check: the views must be what a replay of the
// stream makes.
func (w *world) check() {
	w.t.Helper()
	w.waitProjected()
	rep, err := postgres.Check(w.ctx, postgres.ReplayOptions{Pool: w.k.Pool, JetStream: w.k.JS, Logger: w.k.Logger})
	if err != nil {
		w.t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		w.t.Errorf("the views differ from a replay: %+v", rep.Differences)
	}
}

// sameHeader reports whether a record kept every header of the stored
// message.
func sameHeader(r archive.Record, m natsjs.StoredMessage) bool {
	if len(r.Header) != len(m.Header) {
		return false
	}
	for k, vs := range m.Header {
		if !slices.Equal(r.Header[k], vs) {
			return false
		}
	}
	return true
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
