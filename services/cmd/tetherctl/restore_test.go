package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/projector"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The restore tests prove what docs/operations.md ("Backup and restore")
// tells an operator who has lost PostgreSQL: the event stream is the only
// state, and the views come back from it with `tether migrate` on an empty
// database and `tetherctl projections rebuild`, while the API and the
// projector go on running.

// restoreEnv is the tetherctl stack with the projector run as `tether
// projector` runs it (the service that holds the projector lease), and the
// name of the views' database, which the tests drop.
type restoreEnv struct {
	*stack
	k       *kit.Stack
	db      string
	httpURL string
}

// readWait bounds how long the API lets a read wait for the views to reach
// its min_sequence before it answers PROJECTION_BEHIND.
const readWait = 2 * time.Second

// newRestoreEnv starts the stack: embedded NATS, a database of the test's
// own, one API replica with the projection service; no projector yet.
func newRestoreEnv(t *testing.T) *restoreEnv {
	t.Helper()
	k := kit.New(t, kit.WithAPI(1, func(k *kit.Stack, o *apiserver.Options) {
		o.ProjectionPool, o.JetStream, o.ReadWait = k.Pool, k.JS, readWait
	}))
	u, err := url.Parse(k.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	return &restoreEnv{
		stack: &stack{t: t, ctx: k.Ctx, addr: k.APIs[0].GRPCAddr(), store: k.Store, js: k.JS},
		k:     k, db: strings.TrimPrefix(u.Path, "/"), httpURL: "http://" + k.APIs[0].HTTPAddr(),
	}
}

// startProjector runs a projector instance until the test ends or stop is
// called (what SIGTERM does: it releases the lease); it stops before the
// stack does.
func (e *restoreEnv) startProjector(id string) (svc *projector.Service, stop func()) {
	e.t.Helper()
	svc, err := projector.New(projector.Options{ID: id, Logger: e.k.Logger,
		Projector: postgres.ProjectorOptions{Pool: e.k.Pool, JetStream: e.k.JS, Logger: e.k.Logger}})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			e.t.Errorf("projector %s stopped with an error: %v", id, err)
		}
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	e.t.Cleanup(stop)
	return svc, stop
}

// active waits until svc holds the projector lease, and returns its status
// then (which names its tenure's epoch).
func (e *restoreEnv) active(svc *projector.Service) string {
	e.t.Helper()
	wait.Until(e.t, 20*time.Second, svc.ID()+" to hold the projector lease", func() error {
		if !svc.IsActive() {
			return errors.New(svc.Status())
		}
		return nil
	})
	return svc.Status()
}

// get reads path from the API's REST gateway and returns the status code
// and the body.
func (e *restoreEnv) get(path string) (code int, body string, err error) {
	resp, err := http.Get(e.httpURL + path)
	if err != nil {
		return 0, "", err
	}
	defer func() { err = errors.Join(err, resp.Body.Close()) }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(b), nil
}

// projectionStatus is `tetherctl status -o json`, with 0 for a field JSON
// leaves out.
type projectionStatus struct {
	Checkpoint         string `json:"checkpoint"`
	StreamLastSequence string `json:"streamLastSequence"`
	Lag                string `json:"lag"`
	DeadLetters        string `json:"deadLetters"`
}

// status runs `tetherctl status -o json`.
func (e *restoreEnv) status() (projectionStatus, error) {
	var st projectionStatus
	r := e.run("status", "-o", "json")
	if r.code != 0 {
		return st, fmt.Errorf("tetherctl status: exit %d: %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		return st, fmt.Errorf("tetherctl status: %w\n%s", err, r.stdout)
	}
	// JSON leaves zeros out.
	for _, f := range []*string{&st.Checkpoint, &st.StreamLastSequence, &st.Lag, &st.DeadLetters} {
		if *f == "" {
			*f = "0"
		}
	}
	return st, nil
}

// caughtUp waits until the views have applied the whole stream, and
// returns the status then.
func (e *restoreEnv) caughtUp() projectionStatus {
	e.t.Helper()
	var st projectionStatus
	wait.Until(e.t, 20*time.Second, "the views to catch up with the stream", func() error {
		var err error
		if st, err = e.status(); err != nil {
			return err
		}
		if st.Lag != "0" || st.Checkpoint != st.StreamLastSequence {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	return st
}

// seed drives a fleet's life as agents and clients do: a fleet, a host,
// three READY game servers and a fourth SCHEDULED, an allocation with two
// players, and a shutdown. It returns the game session's name.
func (e *restoreEnv) seed() string {
	e.t.Helper()
	e.ok("fleets", "create", "-f", writeFile(e.t, "arena.yaml", arenaYAML))
	e.appendEvents(events.HostName("h1"), &eventsv1.HostRegistered{Capacity: 8, Address: "127.0.0.1", Labels: map[string]string{"zone": "a"}})
	for i, id := range []string{"gs-1", "gs-2", "gs-3"} {
		e.seedReady(events.GameServerName("arena", id), "h1", int32(7001+i), map[string]string{"slot": id})
	}
	last := e.appendEvents(events.GameServerName("arena", "gs-4"), &eventsv1.GameServerScheduled{Host: events.HostName("h1")})
	e.ok("gameservers", "list", "--min-sequence", last)
	sum, _ := summary(e.t, e.ok("allocate", "arena", "--selector", "slot=gs-2", "--player", "alice", "--player", "bob",
		"--property", "map=dust", "--request-id", "restore-1"))
	gsess := sum["Game session"]
	if sum["Game server"] != "arena/gs-2 on h1" || !strings.HasPrefix(gsess, "gsess-") {
		e.t.Fatalf("allocation: %v", sum)
	}
	resp, err := http.Post(e.httpURL+"/v1/fleets/arena/gameServers/gs-3:shutdown", "application/json",
		strings.NewReader(`{"graceSeconds": 10}`))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := resp.Body.Close(); err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("shutdown gs-3: %s", resp.Status)
	}
	return gsess
}

// listings is what an operator reads back, as JSON: every fleet, host,
// game server, game session and player session the views hold.
func (e *restoreEnv) listings(gsess string) map[string]string {
	e.t.Helper()
	out := map[string]string{
		"fleets":   e.ok("fleets", "list", "-o", "json"),
		"hosts":    e.ok("hosts", "list", "-o", "json"),
		"sessions": e.ok("sessions", "list", "-o", "json"),
		"players":  e.ok("players", "list", gsess, "-o", "json"),
	}
	for _, id := range []string{"gs-1", "gs-2", "gs-3", "gs-4"} {
		out[id] = e.ok("gameservers", "get", "arena/"+id, "-o", "json")
	}
	return out
}

// dropDatabase drops the views' database under the running components.
func (e *restoreEnv) dropDatabase() {
	e.t.Helper()
	if err := pgtest.Server().DropDatabase(e.ctx, e.db); err != nil {
		e.t.Fatal(err)
	}
}

// awaitNoDatabase waits until the projector, with an event to apply,
// reports the database gone; by then no connection from before the drop
// is left in the pool.
func (e *restoreEnv) awaitNoDatabase(svc *projector.Service) {
	e.t.Helper()
	wait.Until(e.t, 20*time.Second, "the projector to report the database gone", func() error {
		if err := svc.Ready(); err == nil || !strings.Contains(err.Error(), "does not exist (SQLSTATE 3D000)") {
			return fmt.Errorf("projector ready: %v", err)
		}
		return nil
	})
}

// recreateDatabase creates the database empty and runs what `tether
// migrate` runs on it, then waits until the API answers from the empty
// views: checkpoint 0, the whole stream behind.
func (e *restoreEnv) recreateDatabase() {
	e.t.Helper()
	if err := pgtest.Server().CreateDatabase(e.ctx, e.db, ""); err != nil {
		e.t.Fatal(err)
	}
	if err := migrate.Postgres(e.ctx, e.k.DBURL, e.k.Logger); err != nil {
		e.t.Fatal(err)
	}
	wait.Until(e.t, 20*time.Second, "the API to answer from the empty views", func() error {
		st, err := e.status()
		if err != nil {
			return err
		}
		if st.Checkpoint != "0" || st.Lag != st.StreamLastSequence {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}

// checkClean runs `tetherctl projections check` and fails the test unless
// it reports 0 differences.
func (e *restoreEnv) checkClean() {
	e.t.Helper()
	r := e.run("projections", "check")
	if r.code != 0 || !strings.HasSuffix(strings.TrimSpace(r.stdout), ": 0 differences") {
		e.t.Fatalf("projections check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// assertSeeded fails the test unless the listings hold what seed made: the
// comparison after the restore is only as good as what it compares.
func assertSeeded(t *testing.T, l map[string]string, gsess string) {
	t.Helper()
	for k, want := range map[string][]string{
		"fleets":   {`"name": "fleets/arena"`, `"allocatedReplicas": 1`},
		"hosts":    {`"name": "hosts/h1"`},
		"sessions": {`"name": "gameSessions/` + gsess + `"`, `"map": "dust"`},
		"players":  {`"playerId": "alice"`, `"playerId": "bob"`},
		"gs-1":     {`"state": "READY"`},
		"gs-2":     {`"state": "ALLOCATED"`},
		"gs-3":     {`"state": "SHUTTING_DOWN"`},
	} {
		for _, w := range want {
			if !strings.Contains(l[k], w) {
				t.Fatalf("%s before the database was lost lacks %s:\n%s", k, w, l[k])
			}
		}
	}
}

// assertSameListings fails the test for each listing that differs.
func assertSameListings(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s after the restore:\n%s\nbefore the database was lost:\n%s", k, got[k], w)
		}
	}
}

// PostgreSQL is lost under a running API and projector, and restored by
// the procedure of docs/operations.md: an empty database, `tether migrate`,
// `tetherctl projections rebuild`, `tetherctl projections check`. Nothing is
// restarted. An agent's report that arrived while the database was gone is
// in the restored views, and the projector goes on with what follows.
func TestRestoreLostDatabaseWithRebuild(t *testing.T) {
	e := newRestoreEnv(t)
	svc, _ := e.startProjector("proj-1")
	tenure := e.active(svc)
	gsess := e.seed()
	before := e.caughtUp()
	want := e.listings(gsess)
	assertSeeded(t, want, gsess)

	e.dropDatabase()
	// Reads fail while there is no database.
	if r := e.run("gameservers", "list"); r.code == 0 || !strings.HasPrefix(r.stderr, "error: ") {
		t.Fatalf("gameservers list without a database: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The stream takes events meanwhile: gs-4's agent reports its process
	// started.
	during := e.appendEvents(events.GameServerName("arena", "gs-4"), &eventsv1.ProcessStarted{Pid: 4244, Address: "127.0.0.1", Attempt: 1,
		Ports: []*eventsv1.Port{{Name: "game", Port: 7004, Protocol: eventsv1.Protocol_PROTOCOL_UDP}}})
	e.awaitNoDatabase(svc)

	e.recreateDatabase()
	// On the empty views, the projector refuses to go on from where it was
	// (it would skip every event before), and a read that asks for what
	// the views held waits for them instead of answering from empty views.
	wait.Until(t, 20*time.Second, "the projector to refuse the empty views", func() error {
		if err := svc.Ready(); !errors.Is(err, postgres.ErrViewsBehind) {
			return fmt.Errorf("projector ready: %v", err)
		}
		return nil
	})
	wait.Until(t, 20*time.Second, "a read at the old checkpoint to wait for the views", func() error {
		code, body, err := e.get("/v1/fleets/-/gameServers?minSequence=" + before.Checkpoint)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "PROJECTION_BEHIND") {
			return fmt.Errorf("GET game servers at sequence %s on the empty views: %d %s", before.Checkpoint, code, body)
		}
		return nil
	})

	r := e.run("projections", "rebuild", "-q")
	rows := tableRows(t, r.stdout, "PHASE", "CHECKPOINT", "EVENTS/S", "ELAPSED")
	if r.code != 0 || len(rows) != 1 || rows[0][0] != "DONE" || rows[0][1] != during {
		t.Fatalf("projections rebuild: exit %d, want DONE at %s\n%s%s", r.code, during, r.stdout, r.stderr)
	}
	e.checkClean()
	if st := e.caughtUp(); st.Checkpoint != during || st.DeadLetters != "0" {
		t.Fatalf("status after the rebuild: %+v, want checkpoint %s and no dead letters", st, during)
	}
	got := e.listings(gsess)
	var gs4 struct {
		State string `json:"state"`
		Ports []struct {
			Port int `json:"port"`
		} `json:"ports"`
	}
	if err := json.Unmarshal([]byte(got["gs-4"]), &gs4); err != nil || gs4.State != "STARTING" || len(gs4.Ports) != 1 || gs4.Ports[0].Port != 7004 {
		t.Fatalf("gs-4, whose process started while the database was gone: %v\n%s", err, got["gs-4"])
	}
	delete(want, "gs-4")
	assertSameListings(t, got, want)

	// The same projector, never restarted, applies what follows.
	wait.Until(t, 20*time.Second, "the projector to be ready again", svc.Ready)
	if s := svc.Status(); s != tenure {
		t.Fatalf("projector lease %q after the restore, want %q: the projector was restarted", s, tenure)
	}
	e.ok("fleets", "scale", "arena", "5")
	wait.Until(t, 20*time.Second, "the scale to show in the views", func() error {
		if f := decodeFleet(t, e.ok("fleets", "get", "arena", "-o", "json")); f.Replicas != 5 {
			return fmt.Errorf("replicas %d", f.Replicas)
		}
		return nil
	})
	e.caughtUp()
	e.checkClean()
}

// A stream with an event the projector dead-lettered cannot be rebuilt:
// the rebuild stops at the poison event and the (empty) views stay as they
// are. Then the procedure is to restart the projector (here a standby takes
// over from the one stopped, as with SIGTERM): a new tenure projects from
// the views' checkpoint, 0, so from sequence 1, dead-lettering the event
// again, and the views come back whole.
func TestRestoreLostDatabaseWithDeadLetters(t *testing.T) {
	e := newRestoreEnv(t)
	svc, stop := e.startProjector("proj-1")
	e.active(svc)
	standby, _ := e.startProjector("proj-2")
	gsess := e.seed()
	msg := &nats.Msg{Subject: events.MustSubject(events.GameServerName("arena", "gs-1")), Data: []byte(`{"not":"protobuf"}`), Header: nats.Header{}}
	msg.Header.Set(natsjs.HeaderType, "GameServerReady")
	ack, err := e.js.PublishMsg(e.ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	poison := fmt.Sprint(ack.Sequence)
	last := e.appendEvents(events.GameServerName("arena", "gs-4"), &eventsv1.ProcessStarted{Pid: 4243, Address: "127.0.0.1", Attempt: 1})
	before := e.caughtUp()
	if before.DeadLetters != "1" || before.Checkpoint != last {
		t.Fatalf("status before: %+v, want the poison event dead-lettered and checkpoint %s", before, last)
	}
	want := e.listings(gsess)
	assertSeeded(t, want, gsess)
	wantDead := e.ok("projections", "deadletters", "-o", "json")

	e.dropDatabase()
	// gs-4's agent reports its SDK connected while the database is gone.
	during := e.appendEvents(events.GameServerName("arena", "gs-4"), &eventsv1.SdkConnected{Transport: "http"})
	e.awaitNoDatabase(svc)
	e.recreateDatabase()
	r := e.run("projections", "rebuild", "-q")
	if r.code == 0 || !strings.Contains(r.stderr, "poison event at sequence "+poison) || !strings.Contains(r.stderr, "POISON_EVENT") {
		t.Fatalf("projections rebuild over a dead-lettered event: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st, err := e.status(); err != nil || st.Checkpoint != "0" {
		t.Fatalf("status after the refused rebuild: %+v, %v; want the empty views", st, err)
	}

	// SIGTERM to the active projector: the standby takes over.
	stop()
	e.active(standby)
	if st := e.caughtUp(); st.Checkpoint != during || st.DeadLetters != "1" {
		t.Fatalf("status after the projector restart: %+v, want checkpoint %s and the dead letter", st, during)
	}
	wait.Until(t, 20*time.Second, "the new projector to be ready", standby.Ready)
	got := e.listings(gsess)
	if !strings.Contains(got["gs-4"], `"state": "CONNECTED"`) {
		t.Fatalf("gs-4, whose SDK connected while the database was gone:\n%s", got["gs-4"])
	}
	delete(want, "gs-4")
	assertSameListings(t, got, want)
	if got := e.ok("projections", "deadletters", "-o", "json"); !sameDeadLetters(t, got, wantDead) {
		t.Fatalf("dead letters after the restore:\n%s\nbefore:\n%s", got, wantDead)
	}
	e.checkClean()
}

// sameDeadLetters compares two dead-letter listings without their
// createTime, which is when the projector met the event, not part of it.
func sameDeadLetters(t *testing.T, a, b string) bool {
	t.Helper()
	strip := func(s string) string {
		var v struct {
			DeadLetters []map[string]any `json:"deadLetters"`
		}
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("dead letters: %v\n%s", err, s)
		}
		for _, d := range v.DeadLetters {
			delete(d, "createTime")
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	return strip(a) == strip(b)
}
