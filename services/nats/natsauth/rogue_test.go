package natsauth_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/dev/natsembed"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/nats/hostlogs"
	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/nats/replicas"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/testkit/freeport"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// principal is one identity's connection, with a store that signs as it
// and verifies what it reads.
type principal struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store *natsjs.Store
	// errs collects the connection's asynchronous errors (permission
	// violations).
	mu   sync.Mutex
	errs []string
}

func (p *principal) violations() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.errs, "\n")
}

// join connects as name with its credentials; the store verifies with the
// signers file. A host agent's store does not wait out an unavailable
// stream (its outbox keeps the events); the others' do, as in production.
func join(t *testing.T, ctx context.Context, dir string, srv *natsembed.Server, name string, verify *natsjs.Verifier) *principal {
	t.Helper()
	creds, err := natsauth.LoadCredentials(natsauth.CredsPath(dir, name), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &principal{}
	nc, err := nats.Connect(srv.ClientURL(), append(creds.NATSOptions(), nats.Name(name),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			p.mu.Lock()
			p.errs = append(p.errs, err.Error())
			p.mu.Unlock()
		}))...)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	p.nc = nc
	if p.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	wait := time.Duration(0) // the default
	if name == natsauth.HostPrincipal("b") {
		wait = -1
	}
	if p.store, err = natsjs.New(ctx, p.js, natsjs.Options{Signer: creds, Verifier: verify, UnavailableWait: wait}); err != nil {
		t.Fatalf("%s opens the event store: %v", name, err)
	}
	return p
}

// TestRogueAgentCannotTouchAnotherHost runs host b's agent with a real
// game server, the projector, and the controller's scheduling, each with
// its own credentials; then an agent of host a, with a's credentials,
// tries everything against b: its heartbeat, its commands, its host and
// its game server. NATS refuses what the subjects name; the signatures
// refuse the rest, and nothing changes: b's views, b's process, b's beat
// and b's commands.
func TestRogueAgentCannotTouchAnotherHost(t *testing.T) {
	dir, srv := startAuthServer(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	signers, err := natsauth.LoadSigners(filepath.Join(dir, natsauth.SignersFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	verify := natsjs.NewVerifier(signers)
	_, setup := connectAs(t, dir, srv, natsauth.Admin)
	if err := migrate.NATS(ctx, setup, migrate.Options{}); err != nil {
		t.Fatal(err)
	}
	admin := join(t, ctx, dir, srv, natsauth.Admin, verify)

	// The projector, with its own credentials, verifying writers.
	proj := join(t, ctx, dir, srv, natsauth.Projector, verify)
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	logs := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	projector, err := postgres.NewProjector(postgres.ProjectorOptions{Pool: pool, JetStream: proj.js, Verifier: verify, Logger: logs})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() { stop(); running.Wait() }()
	running.Go(func() {
		if err := projector.Run(runCtx); err != nil && runCtx.Err() == nil {
			t.Errorf("projector: %v", err)
		}
	})

	// Host b's agent.
	b := join(t, ctx, dir, srv, natsauth.HostPrincipal("b"), verify)
	bBus, err := commands.New(ctx, b.js)
	if err != nil {
		t.Fatal(err)
	}
	ports := freeport.Block(t, 4)
	ag, err := agent.New(agent.Options{
		HostID: "b", JetStream: b.js, Store: b.store, Commands: bBus, LogDir: t.TempDir(),
		SDKAddr: "127.0.0.1:0", SDKHTTPAddr: "127.0.0.1:0", PortMin: ports, PortMax: ports + 3,
		KillProcessesOnExit: true, Logger: logs, SyncInterval: 100 * time.Millisecond,
		AllowedCommands: []string{"/bin"}, // its game server runs /bin/sleep
	})
	if err != nil {
		t.Fatal(err)
	}
	running.Go(func() {
		if err := ag.Run(runCtx); err != nil && runCtx.Err() == nil {
			t.Errorf("agent b: %v", err)
		}
	})

	// The controller schedules a game server on b.
	ctl := join(t, ctx, dir, srv, natsauth.Controller, verify)
	ctlBus, err := commands.New(ctx, ctl.js)
	if err != nil {
		t.Fatal(err)
	}
	const gs = "fleets/arena/gameServers/gs-b1"
	// No health contract: /bin/sleep never beats, and the rogue's refused
	// tries take seconds.
	spec := &eventsv1.FleetSpec{Template: &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}},
		Health: &eventsv1.HealthPolicy{Disabled: true}}
	events.NormalizeFleetSpec(spec)
	msgs, err := events.DecideGameServer(gs, nil, events.ScheduleGameServer{Host: "hosts/b", Spec: spec, HostSubject: true})
	if err != nil {
		t.Fatal(err)
	}
	gsSubject, err := events.GameServerSubject(gs, "hosts/b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.store.Append(ctx, gsSubject, 0, events.New(gs, time.Now(), msgs[0])); err != nil {
		t.Fatalf("the controller schedules: %v", err)
	}
	start := &agentv1.Command{Action: &agentv1.Command_Start{Start: &agentv1.StartGameServer{GameServer: gs, Template: spec.Template, Health: spec.Health, Subject: gsSubject}}}
	if err := ctlBus.Send(ctx, "b", "controller", start); err != nil {
		t.Fatalf("the controller sends the start: %v", err)
	}
	views := postgres.NewViews(pool)
	var before *eventsv1.GameServerState
	wait.For(t, 30*time.Second, "b's game server running in the views", func() bool {
		row, err := views.GameServer(ctx, gs)
		if err == nil && row.State.GetPid() > 0 {
			before = row.State
		}
		return before != nil
	})
	hostBefore, err := views.Host(ctx, "hosts/b")
	if err != nil {
		t.Fatal(err)
	}
	cmdsBefore := streamMsgs(t, ctx, admin.js, commands.StreamName)

	// The rogue: an agent of host a, with a's credentials.
	rogue := join(t, ctx, dir, srv, natsauth.HostPrincipal("a"), verify)
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }

	// 1. b's heartbeat.
	kv, err := hostbeat.Open(ctx, rogue.js)
	if err != nil {
		t.Fatalf("the rogue cannot even open the heartbeat bucket for its own beat: %v", err)
	}
	forgedBeat, _ := json.Marshal(hostbeat.Beat{Time: time.Now().Add(time.Hour)})
	c, done := short()
	if _, err := kv.Put(c, "b", forgedBeat); err == nil {
		t.Error("the rogue beat b's heartbeat")
	}
	done()
	// 2. b's commands: its durable consumer, a consumer of its own on b's
	// subject, a command sent to b, b's replies.
	c, done = short()
	if _, err := rogue.js.CreateOrUpdateConsumer(c, commands.StreamName, jetstream.ConsumerConfig{Durable: "agent-b", FilterSubject: commands.Subject("b"), AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
		t.Error("the rogue took b's command consumer")
	}
	done()
	c, done = short()
	if _, err := rogue.js.CreateOrUpdateConsumer(c, commands.StreamName, jetstream.ConsumerConfig{Durable: "agent-a", FilterSubject: commands.Subject("b"), AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
		t.Error("the rogue made a consumer of b's commands")
	}
	done()
	stopB := &agentv1.Command{Action: &agentv1.Command_Stop{Stop: &agentv1.StopGameServer{GameServer: gs}}}
	data, _ := proto.Marshal(stopB)
	c, done = short()
	if _, err := rogue.js.Publish(c, commands.Subject("b"), data); err == nil {
		t.Error("the rogue sent b a command")
	}
	done()
	if _, err := rogue.nc.SubscribeSync(natsauth.InboxPrefix("hosts/b") + ".>"); err != nil {
		t.Fatal(err)
	}
	cmdStream, err := rogue.js.Stream(ctx, commands.StreamName)
	if err != nil {
		t.Fatalf("the rogue cannot look up the commands stream its own commands come from: %v", err)
	}
	c, done = short()
	if _, err := cmdStream.GetLastMsgForSubject(c, commands.Subject("b")); err == nil {
		t.Error("the rogue read b's last command")
	}
	done()
	// 3. b's host: a forged loss.
	c, done = short()
	lost := events.New("hosts/b", time.Now(), &eventsv1.HostLost{LastHeartbeatTime: nil})
	if _, err := rogue.store.Append(c, events.MustSubject("hosts/b"), events.AnySequence, lost); err == nil {
		t.Error("the rogue wrote b's host events")
	}
	done()
	// 4. b's game server. Its subject names b: NATS refuses the rogue
	// there, and junk too. On a's own subject of the same name, and on the
	// subject of servers before host subjects, the views refuse it: not the
	// server's subject.
	exited := events.New(gs, time.Now(), &eventsv1.GameServerTerminated{Reason: eventsv1.Reason_REASON_PROCESS_EXITED})
	c, done = short()
	if _, err := rogue.js.Publish(c, gsSubject, []byte("not an envelope")); err == nil {
		t.Error("the rogue published on b's game server's subject")
	}
	done()
	c, done = short()
	if _, err := rogue.js.Publish(c, events.MustSubject(gs), []byte("not an envelope")); err == nil {
		t.Error("the rogue published on the subject of servers before host subjects")
	}
	done()
	ownSubject, err := events.GameServerSubject(gs, "hosts/a")
	if err != nil {
		t.Fatal(err)
	}
	firstRogue, err := rogue.store.Append(ctx, ownSubject, events.AnySequence, exited)
	if err != nil {
		t.Fatalf("the rogue's signed event on its own subject was not stored, so the test shows nothing: %v", err)
	}
	unsigned := events.New(gs, time.Now(), &eventsv1.ShutdownRequested{Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API})
	unsigned.Producer, unsigned.Actor = "controller", "controller"
	raw, err := unsigned.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rogueSeqs := []uint64{firstRogue}
	ack, err := rogue.js.PublishMsg(ctx, &nats.Msg{Subject: ownSubject, Data: raw, Header: nats.Header{jetstream.MsgIDHeader: {unsigned.ID}}})
	if err != nil {
		t.Fatalf("the rogue's unsigned event was not stored: %v", err)
	}
	rogueSeqs = append(rogueSeqs, ack.Sequence)
	if ack, err = rogue.js.Publish(ctx, ownSubject, []byte("not an envelope")); err != nil {
		t.Fatalf("the rogue's junk on its own subject was not stored: %v", err)
	}
	rogueSeqs = append(rogueSeqs, ack.Sequence)
	// 5. The streams themselves.
	c, done = short()
	if err := rogue.js.DeleteStream(c, events.StreamName); err == nil {
		t.Error("the rogue deleted the events stream")
	}
	done()
	// 6. b's game server logs: the API reads them from b's agent, which
	// answers it; the rogue can neither ask b nor take b's requests.
	api := join(t, ctx, dir, srv, natsauth.APIServer, verify)
	wait.For(t, 10*time.Second, "the API to read b's game server's logs from b's agent", func() bool {
		reply, err := hostlogs.NewClient(api.nc).Read(ctx, "b", &agentv1.LogsRequest{GameServer: gs})
		return err == nil && reply.GetError() == agentv1.LogsReply_ERROR_UNSPECIFIED
	})
	// 7. The set of live API replicas: the API keeps its key there, the
	// rogue cannot add one (which would take a slice of the allocations).
	member, err := replicas.Join(ctx, api.js, "api-1", nil)
	if err != nil {
		t.Fatalf("the API joins the replica set: %v", err)
	}
	rctx, stopMember := context.WithCancel(ctx)
	memberDone := make(chan error, 1)
	go func() { memberDone <- member.Run(rctx) }()
	c, done = short()
	if kv, err := rogue.js.KeyValue(c, replicas.Bucket); err == nil {
		if _, err := kv.PutString(c, "api-rogue", "api-rogue"); err == nil {
			t.Error("the rogue joined the API replica set")
		}
	}
	done()
	stopMember()
	if err := <-memberDone; err != nil {
		t.Errorf("the API's membership of the replica set: %v", err)
	}
	if _, err := rogue.nc.SubscribeSync(hostlogs.Subject("b")); err != nil {
		t.Fatal(err)
	}
	c, done = short()
	if _, err := hostlogs.NewClient(rogue.nc).Read(c, "b", &agentv1.LogsRequest{GameServer: gs}); err == nil {
		t.Error("the rogue read b's game server logs")
	}
	done()

	// Nothing changed. The views caught up with everything the rogue stored.
	last, err := admin.store.StreamLastSequence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the views to reach the stream's end", func() bool { return projector.Checkpoint() >= last })
	after, err := views.GameServer(ctx, gs)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(rogueSeqs, after.Sequence) {
		t.Errorf("b's game server's row is at sequence %d, one of the rogue's %v", after.Sequence, rogueSeqs)
	}
	if after.State.GetLifecycle() != before.GetLifecycle() || after.State.GetPid() != before.GetPid() || after.State.GetReason() != before.GetReason() {
		t.Errorf("b's game server changed: %s pid %d %s, was %s pid %d", after.State.GetLifecycle(), after.State.GetPid(), after.State.GetReason(),
			before.GetLifecycle(), before.GetPid())
	}
	if err := syscall.Kill(int(before.GetPid()), 0); err != nil {
		t.Errorf("b's game server process %d: %v", before.GetPid(), err)
	}
	hostAfter, err := views.Host(ctx, "hosts/b")
	if err != nil {
		t.Fatal(err)
	}
	if hostAfter.State.GetStatus() != hostBefore.State.GetStatus() {
		t.Errorf("host b is %s, was %s", hostAfter.State.GetStatus(), hostBefore.State.GetStatus())
	}
	adminKV, err := hostbeat.Open(ctx, admin.js)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := adminKV.Get(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	var beat hostbeat.Beat
	if err := json.Unmarshal(entry.Value(), &beat); err != nil || beat.Time.After(time.Now()) {
		t.Errorf("b's heartbeat is not b's: %s", entry.Value())
	}
	if got := streamMsgs(t, ctx, admin.js, commands.StreamName); got != cmdsBefore {
		t.Errorf("the commands stream holds %d messages, %d before the rogue", got, cmdsBefore)
	}
	// The three messages NATS let through are dead letters: not the
	// server's subject, not an event.
	rows, err := pool.Query(ctx, `SELECT error FROM dead_letters ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			t.Fatal(err)
		}
		refused = append(refused, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(refused) != 3 || !strings.Contains(refused[0], "another subject than its game server's") ||
		!strings.Contains(refused[1], "another subject than its game server's") || !strings.Contains(refused[2], "undecodable") {
		t.Errorf("dead letters: %q", refused)
	}
	if v := rogue.violations(); !strings.Contains(v, "Permissions Violation for Publish to \""+gsSubject+"\"") ||
		!strings.Contains(v, "Permissions Violation for Publish to \""+events.MustSubject(gs)+"\"") {
		t.Errorf("the rogue's publishes on b's game server's subjects were not refused: %s", v)
	}
	if v := rogue.violations(); !strings.Contains(v, "Permissions Violation for Subscription to \""+natsauth.InboxPrefix("hosts/b")) {
		t.Errorf("the rogue's subscription to b's replies was not refused: %s", v)
	}
	if v := rogue.violations(); !strings.Contains(v, "Permissions Violation for Subscription to \""+hostlogs.Subject("b")) ||
		!strings.Contains(v, "Permissions Violation for Publish to \""+hostlogs.Subject("b")) {
		t.Errorf("the rogue's subscription to b's log reads, or its read of b's logs, was not refused: %s", v)
	}
}

// streamMsgs is the number of messages a stream holds.
func streamMsgs(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
