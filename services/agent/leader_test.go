package agent

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/natsstack"
)

// reads is how many aggregates each test below reads with a replica
// behind: one answering a direct get from its past escapes a test with
// odds of 1 in 2^reads.
const reads = 10

// behindStore is an event store whose stream has a replica behind it,
// answering about half of its direct gets (natsstack.Base.BehindReplica):
// that replica shows none of the aggregates a test creates.
func behindStore(t *testing.T) *natsjs.Store { return behindStack(t).Store }

// behindStack is the stack of behindStore.
func behindStack(t *testing.T) *natsstack.Base {
	t.Helper()
	k := natsstack.Start(t, natsstack.Options{})
	k.BehindReplica(t)
	return k
}

// scheduleOn stores a game server scheduled on host, as the controller
// does, and returns its name.
func scheduleOn(t *testing.T, store *natsjs.Store, i int, host string) string {
	t.Helper()
	name := events.GameServerName("arena", fmt.Sprintf("gs-%d", i))
	env := events.New(name, time.Now(), &eventsv1.GameServerScheduled{Host: host})
	env.Producer = "controllers/c1"
	if _, err := store.Append(context.Background(), events.MustSubject(name), 0, env); err != nil {
		t.Fatal(err)
	}
	return name
}

// A player's call is decided on the game session as the stream's leader
// has it: a replica behind it that does not hold the session yet would
// have the player refused (no such game session).
func TestSessionCallsAreNotRefusedByAReplicaBehind(t *testing.T) {
	ctx := context.Background()
	store := behindStore(t)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	a := &Agent{opts: Options{Store: store, Clock: clockwork.NewFakeClockAt(now)}, producer: "hosts/h1"}
	for i := range reads {
		name := events.GameSessionName(fmt.Sprintf("gsess-%d", i))
		created := events.New(name, now, &eventsv1.GameSessionCreated{
			GameServer: events.GameServerName("arena", fmt.Sprintf("gs-%d", i)), Policy: &eventsv1.GameSessionPolicy{ReconnectWindowSeconds: 10},
			Players: []*eventsv1.PlayerSeat{{PlayerSession: "ps-1", PlayerId: "p", ReservationDeadline: timestamppb.New(now.Add(time.Minute))}},
		})
		created.Producer = "apiservers/a1"
		if _, err := store.Append(ctx, events.MustSubject(name), 0, created); err != nil {
			t.Fatal(err)
		}
		_, msgs, err := a.decideSession(ctx, name, events.AcceptPlayer{PlayerSession: "ps-1", Now: now}, nil)
		if err != nil {
			t.Fatalf("%s: the player's accept was refused: %v", name, err)
		}
		if len(msgs) != 1 || events.TypeOf(msgs[0]) != "PlayerAccepted" {
			t.Fatalf("%s: the accept recorded %v, want PlayerAccepted", name, msgs)
		}
	}
}

// A restarted agent terminates an orphaned process's server as the
// stream's leader has it: a replica behind it that does not hold the
// server would have it judged "never ours" and left as it was.
func TestOrphansAreJudgedOnTheLeadersHistory(t *testing.T) {
	ctx := context.Background()
	store := behindStore(t)
	a := &Agent{opts: Options{Store: store, Clock: clockwork.NewRealClock()}, host: "hosts/h1", producer: "hosts/h1", log: slog.New(slog.DiscardHandler)}
	for i := range reads {
		name := scheduleOn(t, store, i, "hosts/h1")
		rec := processRecord{GameServer: name, Pid: 1000 + i, Agent: "earlier"}
		if err := a.terminateOrphan(ctx, rec, false); err != nil {
			t.Fatal(err)
		}
		hist, err := store.CurrentHistory(ctx, events.MustSubject(name), 0) // the test's own read must not be answered from the past either
		if err != nil {
			t.Fatal(err)
		}
		last := hist[len(hist)-1]
		term, isTerm := last.Data.(*eventsv1.GameServerTerminated)
		if !isTerm || term.GetReason() != eventsv1.Reason_REASON_AGENT_RESTARTED {
			t.Fatalf("%s: the orphan's server was left %s, want terminated AGENT_RESTARTED", name, last.Type)
		}
	}
}

// A server whose events went through the outbox is rebuilt from the
// stream leader's history: a replica behind it would leave the agent
// knowing nothing of the server it supervises.
func TestRebuildReadsTheLeadersHistory(t *testing.T) {
	ctx := context.Background()
	store := behindStore(t)
	box, err := openOutbox(t.TempDir(), 10)
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{opts: Options{Store: store}, outbox: box}
	for i := range reads {
		name := scheduleOn(t, store, i, "hosts/h1")
		gs := &gameServer{a: a, name: name, subject: events.MustSubject(name), changed: make(chan struct{}), resync: true}
		if err := gs.rebuild(ctx); err != nil {
			t.Fatal(err)
		}
		if gs.state.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_SCHEDULED || gs.seq == 0 {
			t.Fatalf("%s: rebuilt as %v at sequence %d, want SCHEDULED with its event's sequence", name, gs.state.GetLifecycle(), gs.seq)
		}
	}
}

// allocatedBehindCopy stores a game server scheduled on h1, started, READY
// and then allocated to game session gsess, and returns the server as the
// agent's copy holds it before the allocation reached it (READY), as after
// an allocation whose notice is still on its way.
func allocatedBehindCopy(t *testing.T, a *Agent, i int, gsess string) *gameServer {
	t.Helper()
	ctx := context.Background()
	store := a.opts.Store
	name := events.GameServerName("arena", fmt.Sprintf("gs-%d", i))
	subject := events.MustSubject(name)
	var state *eventsv1.GameServerState
	var seq uint64
	for _, data := range []proto.Message{
		&eventsv1.GameServerScheduled{Host: "hosts/h1"},
		&eventsv1.ProcessStarted{Pid: 4242},
		&eventsv1.GameServerReady{},
		&eventsv1.GameServerAllocated{GameSession: gsess, MaxPlayers: 2},
	} {
		env := events.New(name, time.Now(), data)
		got, err := store.Append(ctx, subject, seq, env)
		if err != nil {
			t.Fatal(err)
		}
		if _, allocated := data.(*eventsv1.GameServerAllocated); allocated {
			break // the copy has not seen it
		}
		env.Sequence, seq = got, got
		if state, err = events.ApplyGameServer(state, env); err != nil {
			t.Fatal(err)
		}
	}
	return &gameServer{a: a, name: name, subject: subject, state: state, seq: seq, changed: make(chan struct{}), log: slog.New(slog.DiscardHandler)}
}

// A player's call is refused ("not allocated") only on the server as the
// stream's leader has it, not on the agent's copy, which may not show the
// allocation yet. With a replica behind the leader answering half the
// reads, ten servers.
func TestPlayerCallsAreResolvedOnTheLeadersServer(t *testing.T) {
	k := behindStack(t)
	a := &Agent{opts: Options{Store: k.Store, JetStream: k.JS}}
	for i := range reads {
		gsess := events.GameSessionName(fmt.Sprintf("gsess-%d", i))
		gs := allocatedBehindCopy(t, a, i, gsess)
		got, ps, err := gs.playerSession(context.Background(), "ps-1")
		if err != nil || got != gsess || ps != "ps-1" {
			t.Fatalf("%s: a player of its new game session resolved to (%q, %q), %v; want %s", gs.name, got, ps, err, gsess)
		}
	}
}
