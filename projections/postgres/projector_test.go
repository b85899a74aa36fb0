package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// env is a stream with a scenario in it and a way to make fresh views.
type env struct {
	t     testing.TB
	ctx   context.Context
	nc    *nats.Conn
	js    jetstream.JetStream
	store *natsjs.Store
	at    time.Time
}

func newEnv(t testing.TB) *env {
	t.Helper()
	k := kit.New(t)
	return &env{t: t, ctx: k.Ctx, nc: k.Conn, js: k.JS, store: k.Store, at: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
}

// append writes payloads to an aggregate with the sequence guard.
func (e *env) append(name string, payloads ...proto.Message) {
	e.t.Helper()
	subject := events.MustSubject(name)
	last, err := e.store.LastSequence(e.ctx, subject)
	if err != nil {
		e.t.Fatal(err)
	}
	var envs []events.Envelope
	for _, p := range payloads {
		e.at = e.at.Add(time.Second)
		ev := events.New(name, e.at, p)
		ev.Producer = "tests"
		envs = append(envs, ev)
	}
	if _, err := e.store.Append(e.ctx, subject, last, envs...); err != nil {
		e.t.Fatalf("append to %s: %v", name, err)
	}
}

// scenario writes fleets, a host and game servers through their lifecycle,
// interleaved so batches mix aggregates.
func (e *env) scenario(servers int) {
	e.t.Helper()
	spec := &eventsv1.FleetSpec{Replicas: int32(servers), Template: &eventsv1.GameServerTemplate{Command: "/bin/game"}}
	events.NormalizeFleetSpec(spec)
	e.append("fleets/arena", &eventsv1.FleetCreated{Spec: spec})
	e.append("hosts/h1", &eventsv1.HostRegistered{Capacity: 100, Address: "127.0.0.1", Labels: map[string]string{"zone": "a"}})
	e.append("fleets/doomed", &eventsv1.FleetCreated{Spec: spec})
	for i := range servers {
		e.append(fmt.Sprintf("fleets/arena/gameServers/gs-%d", i), &eventsv1.GameServerScheduled{Host: "hosts/h1", Template: spec.Template, Health: spec.Health})
	}
	for i := range servers {
		e.append(fmt.Sprintf("fleets/arena/gameServers/gs-%d", i),
			&eventsv1.ProcessStarted{Pid: int32(1000 + i), Address: "127.0.0.1", Attempt: 1, Ports: []*eventsv1.Port{{Name: "game", Port: int32(7000 + i)}}},
			&eventsv1.SdkConnected{Transport: "grpc-stream"},
			&eventsv1.GameServerReady{})
	}
	updated := proto.CloneOf(spec)
	updated.Replicas = 2
	e.append("fleets/arena", &eventsv1.FleetUpdated{Spec: updated, ChangedFields: []string{"replicas"}})
	for i := 2; i < servers; i++ {
		e.append(fmt.Sprintf("fleets/arena/gameServers/gs-%d", i),
			&eventsv1.ShutdownRequested{Reason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN},
			&eventsv1.ProcessExited{Signal: "terminated"},
			&eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_FLEET_SCALED_DOWN})
	}
	e.append("hosts/h1", &eventsv1.HostUnreachable{}, &eventsv1.HostOnline{})
	e.append("fleets/doomed", &eventsv1.FleetDeleted{})
}

func (e *env) lastSeq() uint64 {
	e.t.Helper()
	seq, err := e.store.StreamLastSequence(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return seq
}

func (e *env) pool() *pgxpool.Pool {
	e.t.Helper()
	pool, err := pgxpool.New(e.ctx, pgtest.NewDatabase(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	return pool
}

// projector builds a projector with small batches, so a scenario spans
// several; tests that fetch everything unacknowledged need a batch size
// whose ack window (4 batches) covers the stream.
func (e *env) projector(pool *pgxpool.Pool, durable string, ackWait time.Duration, batch int) *postgres.Projector {
	e.t.Helper()
	p, err := postgres.NewProjector(postgres.ProjectorOptions{
		Pool: pool, JetStream: e.js, Durable: durable, AckWait: ackWait, BatchSize: batch, Logger: testLogger(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// run runs a projector until it has applied everything in the stream.
func (e *env) run(p *postgres.Projector) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	want := e.lastSeq()
	wait.For(e.t, 20*time.Second, fmt.Sprintf("checkpoint %d", want), func() bool { return p.Checkpoint() >= want })
	cancel()
	if err := <-done; err != nil {
		e.t.Fatalf("projector: %v", err)
	}
}

// freshReplay builds views from sequence 1 into an empty database.
func (e *env) freshReplay() *pgxpool.Pool {
	e.t.Helper()
	pool := e.pool()
	e.run(e.projector(pool, "fresh-"+events.NewID("p"), time.Minute, 7))
	return pool
}

// dump returns every row of every view table as text, in a stable order.
func dump(t *testing.T, pool *pgxpool.Pool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, table := range []string{"fleets", "hosts", "game_servers", "events", "dead_letters", "projector_checkpoints"} {
		query := fmt.Sprintf(`SELECT (t.*)::text FROM %s t ORDER BY 1`, table)
		if table == "projector_checkpoints" {
			// update_time of the checkpoint row is wall-clock, not derived
			// from events; fence is the writer's lease epoch.
			query = `SELECT (partition, sequence)::text FROM projector_checkpoints ORDER BY 1`
		}
		rows, err := pool.Query(context.Background(), query)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out[table] = append(out[table], s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func assertSameViews(t *testing.T, got, want *pgxpool.Pool) {
	t.Helper()
	g, w := dump(t, got), dump(t, want)
	if len(w["game_servers"]) == 0 || len(w["events"]) == 0 {
		t.Fatalf("reference views are empty: %v", w)
	}
	for table := range w {
		if !slices.Equal(g[table], w[table]) {
			t.Errorf("table %s differs:\n got %d rows: %v\nwant %d rows: %v", table, len(g[table]), g[table], len(w[table]), w[table])
		}
	}
}

// fetchAll reads every message of the stream through the projector's own
// durable consumer, without acknowledging them.
func fetchAll(t *testing.T, e *env, p *postgres.Projector) []jetstream.Msg {
	t.Helper()
	cons, err := p.Consumer(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := int(e.lastSeq())
	deadline := time.Now().Add(20 * time.Second)
	var msgs []jetstream.Msg
	for len(msgs) < want {
		batch, err := cons.Fetch(want-len(msgs), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if len(msgs) < want && time.Now().After(deadline) {
			t.Fatalf("fetched %d of %d messages", len(msgs), want)
		}
	}
	return msgs
}

func TestRedeliveredBatchesChangeNothing(t *testing.T) {
	e := newEnv(t)
	e.scenario(5)
	pool := e.pool()
	p := e.projector(pool, "twice", time.Minute, 100)
	msgs := fetchAll(t, e, p)

	// Overlapping and repeated deliveries, as JetStream may redeliver.
	for _, part := range [][2]int{{0, 10}, {0, 10}, {5, 20}, {0, len(msgs)}, {3, len(msgs)}, {0, len(msgs)}} {
		if err := p.ApplyBatch(e.ctx, msgs[part[0]:part[1]]); err != nil {
			t.Fatalf("apply %v: %v", part, err)
		}
	}
	assertSameViews(t, pool, e.freshReplay())
}

func TestCrashBetweenCommitAndAck(t *testing.T) {
	e := newEnv(t)
	e.scenario(4)
	pool := e.pool()

	// First life: commit a batch, then "crash" before acknowledging it.
	first := e.projector(pool, "crashy", 300*time.Millisecond, 100)
	msgs := fetchAll(t, e, first)
	if err := first.ApplyBatch(e.ctx, msgs); err != nil {
		t.Fatal(err)
	}

	// The restarted projector gets the unacknowledged batch again after
	// AckWait: it must skip it (everything is at or below its checkpoint) and
	// acknowledge it, or it would stall on the duplicates forever.
	second := e.projector(pool, "crashy", 300*time.Millisecond, 7)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- second.Run(ctx) }()
	cons := mustConsumer(t, e, "crashy")
	wait.For(t, 20*time.Second, "the redelivered batch to be acknowledged", func() bool {
		info, err := cons.Info(e.ctx)
		return err == nil && info.AckFloor.Stream >= uint64(len(msgs)) && info.NumRedelivered == 0 && info.NumAckPending == 0
	})

	// New events after the restart are applied as usual.
	e.append("fleets/arena/gameServers/gs-0", &eventsv1.HealthDegraded{MissedPeriods: 1, FailureThreshold: 3})
	e.append("fleets/arena/gameServers/gs-0", &eventsv1.HealthRecovered{})
	want := e.lastSeq()
	wait.For(t, 20*time.Second, "the new events", func() bool { return second.Checkpoint() >= want })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	assertSameViews(t, pool, e.freshReplay())
}

func mustConsumer(t *testing.T, e *env, name string) jetstream.Consumer {
	t.Helper()
	c, err := e.js.Consumer(e.ctx, "TETHER_EVENTS", name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPoisonEventGoesToDeadLetters(t *testing.T) {
	e := newEnv(t)
	e.scenario(2)
	// Undecodable bytes, and a decodable event the game server's state forbids.
	if _, err := e.js.Publish(e.ctx, "tether.ev.gs.arena.gs-0", []byte("not an envelope")); err != nil {
		t.Fatal(err)
	}
	e.append("fleets/arena/gameServers/gs-9", &eventsv1.GameServerReady{}) // never scheduled
	e.append("fleets/arena/gameServers/gs-0", &eventsv1.LabelsChanged{Set: map[string]string{"after": "poison"}})

	pool := e.pool()
	e.run(e.projector(pool, "poison", time.Minute, 7))

	var n int
	if err := pool.QueryRow(e.ctx, `SELECT count(*) FROM dead_letters`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("dead letters = %d, want 2", n)
	}
	var labels string
	if err := pool.QueryRow(e.ctx, `SELECT labels::text FROM game_servers WHERE name = 'fleets/arena/gameServers/gs-0'`).Scan(&labels); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(labels, "poison") {
		t.Fatalf("event after the poison was not applied: labels %s", labels)
	}
}

func TestViewsReadBack(t *testing.T) {
	e := newEnv(t)
	e.scenario(4)
	pool := e.pool()
	e.run(e.projector(pool, "views", time.Minute, 7))
	v := postgres.NewViews(pool)

	f, err := v.Fleet(e.ctx, "fleets/arena")
	if err != nil {
		t.Fatal(err)
	}
	if f.State.GetSpec().GetReplicas() != 2 || f.Counts.Ready != 2 || f.Counts.Live != 2 {
		t.Fatalf("fleet row %+v counts %+v", f.State, f.Counts)
	}
	// FleetState is the same row, uncounted, deleted fleets included.
	fs, err := v.FleetState(e.ctx, "fleets/arena")
	if err != nil || !proto.Equal(fs.State, f.State) || fs.Sequence != f.Sequence {
		t.Fatalf("FleetState %+v (%v), want the fleet's row %+v at %d", fs, err, f.State, f.Sequence)
	}
	if doomed, err := v.FleetState(e.ctx, "fleets/doomed"); err != nil || !doomed.State.GetDeleted() {
		t.Fatalf("FleetState of a deleted fleet: %+v, %v", doomed.State, err)
	}
	if _, err := v.FleetState(e.ctx, "fleets/none"); !errors.Is(err, projections.ErrNotFound) {
		t.Fatalf("FleetState of no fleet: %v, want ErrNotFound", err)
	}
	list, err := v.ListFleets(e.ctx, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].State.GetName() != "fleets/arena" {
		t.Fatalf("live fleets = %d (deleted fleets must not be listed)", len(list))
	}
	ready, err := v.ListGameServers(e.ctx, projections.GameServerQuery{Fleet: "fleets/arena", State: "READY", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 2 {
		t.Fatalf("READY servers = %d, want 2", len(ready))
	}
	gone, err := v.ListGameServers(e.ctx, projections.GameServerQuery{State: "TERMINATED", Host: "hosts/h1", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 2 || gone[0].State.GetReason() != eventsv1.Reason_REASON_FLEET_SCALED_DOWN {
		t.Fatalf("TERMINATED servers = %v", gone)
	}
	hosts, err := v.Hosts(e.ctx, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 1 || hosts[0].State.GetStatus() != eventsv1.HostStatus_HOST_STATUS_ONLINE || hosts[0].Used != 2 {
		t.Fatalf("hosts = %+v", hosts)
	}
}

// A batch that skips an event after the checkpoint (one handed out and
// lost with its pull, which AckAll would acknowledge with what follows) is
// refused whole, and the projector goes on once it has the event.
func TestBatchWithAGapIsRefused(t *testing.T) {
	e := newEnv(t)
	e.scenario(4)
	pool := e.pool()
	p := e.projector(pool, "gappy", time.Minute, 100)
	msgs := fetchAll(t, e, p)
	if len(msgs) < 6 {
		t.Fatalf("%d events, want at least 6", len(msgs))
	}
	if err := p.ApplyBatch(e.ctx, msgs[:3]); err != nil {
		t.Fatal(err)
	}
	before := p.Checkpoint()
	if err := p.ApplyBatch(e.ctx, msgs[4:]); !errors.Is(err, postgres.ErrGap) {
		t.Fatalf("batch skipping event %d: %v, want ErrGap", before+1, err)
	}
	if p.Checkpoint() != before {
		t.Fatalf("checkpoint moved from %d to %d over a gap", before, p.Checkpoint())
	}
	if err := p.ApplyBatch(e.ctx, msgs[3:]); err != nil {
		t.Fatal(err)
	}
	assertSameViews(t, pool, e.freshReplay())
}

// An event whose data PostgreSQL refuses (here a request id too large for
// its index, as an old or foreign writer could store) is dead-lettered
// alone; the rest of its batch, and what follows, is applied. It used to
// stop the projector for good, retrying the batch for ever.
func TestEventPostgreSQLRefusesIsDeadLettered(t *testing.T) {
	e := newEnv(t)
	e.scenario(2)
	subject := events.MustSubject("fleets/arena/gameServers/gs-0")
	last, err := e.store.LastSequence(e.ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	huge := events.New("fleets/arena/gameServers/gs-0", e.at.Add(time.Second), &eventsv1.LabelsChanged{Set: map[string]string{"huge": "request id"}})
	noise := make([]byte, 6<<10)
	_, _ = rand.Read(noise)                    // crypto/rand.Read never fails on supported platforms
	huge.RequestID = hex.EncodeToString(noise) // 12 KiB that do not compress below the index's limit
	if _, err := e.store.Append(e.ctx, subject, last, huge); err != nil {
		t.Fatal(err)
	}
	e.append("fleets/arena/gameServers/gs-1", &eventsv1.LabelsChanged{Set: map[string]string{"after": "refused"}})

	pool := e.pool()
	e.run(e.projector(pool, "refused", time.Minute, 50))

	var seq int64
	var why string
	if err := pool.QueryRow(e.ctx, `SELECT sequence, error FROM dead_letters`).Scan(&seq, &why); err != nil {
		t.Fatalf("dead letters: %v", err)
	}
	if !strings.Contains(why, "PostgreSQL refuses its data") {
		t.Errorf("dead letter %d: %s", seq, why)
	}
	var labels string
	if err := pool.QueryRow(e.ctx, `SELECT labels::text FROM game_servers WHERE name = 'fleets/arena/gameServers/gs-1'`).Scan(&labels); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(labels, "refused") {
		t.Errorf("the event after the refused one was not applied: labels %s", labels)
	}
}
