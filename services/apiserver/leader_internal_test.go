package apiserver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/platform/migrate"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/pgtest"
)

// behindEventStore is an event store over a NATS server of its own whose
// stream has a replica behind it answering about half its direct gets
// (natstest.BehindReplica), holding another fleet's events only. (The
// shared kit stack imports this package, so these tests cannot use it.)
func behindEventStore(t *testing.T) *natsjs.Store {
	t.Helper()
	ctx := context.Background()
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	if err := migrate.NATS(ctx, js, migrate.Options{}); err != nil {
		t.Fatal(err)
	}
	store, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other := events.FleetName("other")
	if _, err := store.Append(ctx, events.MustSubject(other), 0, events.New(other, time.Now(), &eventsv1.FleetCreated{})); err != nil {
		t.Fatal(err)
	}
	natstest.BehindReplica(t, js, events.StreamName, events.MustSubject(other))
	return store
}

// A reconnect is decided on the game session as the stream's leader has
// it, the views' row completed from the leader: a replica behind the
// leader that does not hold the session would have the player told that
// their seat does not exist. The views here hold nothing yet (a projector
// behind), as they would right after an allocation. Ten sessions: a read
// answered from the replica's past escapes with odds of 1 in 1,024.
func TestReconnectStateIsTheLeaders(t *testing.T) {
	ctx := context.Background()
	store := behindEventStore(t)
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	g := &gameSessionService{s: &Server{opts: Options{Store: store, Views: postgres.NewViews(pool)}}}

	for i := range 10 {
		gsess := events.GameSessionName(fmt.Sprintf("gsess-%d", i))
		created := events.New(gsess, time.Now(), &eventsv1.GameSessionCreated{
			GameServer: events.GameServerName("arena", fmt.Sprintf("gs-%d", i)), Policy: &eventsv1.GameSessionPolicy{ReconnectWindowSeconds: 60},
			Players: []*eventsv1.PlayerSeat{{PlayerSession: "ps-1", PlayerId: "p", ReservationDeadline: timestamppb.New(time.Now().Add(time.Minute))}},
		})
		created.Producer = "apiservers/a1"
		seq, err := store.Append(ctx, events.MustSubject(gsess), 0, created)
		if err != nil {
			t.Fatal(err)
		}
		state, last, err := g.current(ctx, gsess, events.MustSubject(gsess))
		if err != nil {
			t.Fatal(err)
		}
		if events.FindPlayer(state, "ps-1") == nil || last != seq {
			t.Fatalf("%s read at sequence %d with seats %v; want its seat, at %d", gsess, last, state.GetPlayers(), seq)
		}
	}
}

// A fleet-filtered watch tells a session's events apart by the session's
// fleet: from the views, else from the session's first event in the
// stream. When neither can be read it says so (the watch ends, to be
// resumed) instead of dropping the event as another fleet's; a session
// neither holds (archived before the watch's range) is not the fleet's.
func TestSessionFleetsNeverDropsWhatItCannotRead(t *testing.T) {
	ctx := context.Background()
	unreadable := errors.New("no stream leader")
	notInViews := func(context.Context, string) (projections.Row[*eventsv1.GameSessionState], error) {
		return projections.Row[*eventsv1.GameSessionState]{}, projections.ErrNotFound
	}
	created := events.New("gameSessions/g1", time.Now(), &eventsv1.GameSessionCreated{GameServer: events.GameServerName("arena", "gs-1")})
	ended := events.New("gameSessions/g1", time.Now(), &eventsv1.GameSessionEnded{})
	for name, tc := range map[string]struct {
		lookup func(context.Context, string) (projections.Row[*eventsv1.GameSessionState], error)
		first  func(context.Context, string) (events.Envelope, bool, error)
		keep   bool
		err    error
	}{
		"in the stream only": {notInViews, func(context.Context, string) (events.Envelope, bool, error) { return created, true, nil }, true, nil},
		"nowhere":            {notInViews, func(context.Context, string) (events.Envelope, bool, error) { return events.Envelope{}, false, nil }, false, nil},
		"the stream unreadable": {notInViews, func(context.Context, string) (events.Envelope, bool, error) {
			return events.Envelope{}, false, unreadable
		}, false, unreadable},
		"the views unreadable": {func(context.Context, string) (projections.Row[*eventsv1.GameSessionState], error) {
			return projections.Row[*eventsv1.GameSessionState]{}, unreadable
		}, nil, false, unreadable},
	} {
		s := &sessionFleets{fleet: events.FleetName("arena"), lookup: tc.lookup, first: tc.first, known: map[string]bool{}}
		keep, err := s.keeps(ctx, ended)
		if keep != tc.keep || !errors.Is(err, tc.err) {
			t.Errorf("%s: keep %v, %v; want %v, %v", name, keep, err, tc.keep, tc.err)
		}
	}
}

// After a conflict, an allocation folds what was appended to the server
// since the sequence it tried, as the stream's leader has it: a replica
// behind the leader that shows nothing new would have it try the same
// sequence again, conflict again, and spend the call's attempts. Twenty
// catch-ups, each of which a replica would answer with nothing new about
// half the time.
func TestCatchUpAfterAConflictReadsWhatTheConflictProves(t *testing.T) {
	ctx := context.Background()
	store := behindEventStore(t)
	a := &allocationService{s: &Server{opts: Options{Store: store}}}
	for i := range 20 {
		name := events.GameServerName("arena", fmt.Sprintf("gs-%d", i))
		subject := events.MustSubject(name)
		var state *eventsv1.GameServerState
		var seq uint64
		var err error
		for _, data := range []proto.Message{&eventsv1.GameServerScheduled{Host: "hosts/h1"}, &eventsv1.ProcessStarted{Pid: 1}, &eventsv1.GameServerReady{}} {
			env := events.New(name, time.Now(), data)
			if seq, err = store.Append(ctx, subject, seq, env); err != nil {
				t.Fatal(err)
			}
			env.Sequence = seq
			if state, err = events.ApplyGameServer(state, env); err != nil {
				t.Fatal(err)
			}
		}
		// Another writer's event after the one the allocation tried on.
		newer, err := store.Append(ctx, subject, seq, events.New(name, time.Now(), &eventsv1.LabelsChanged{Set: map[string]string{"k": "v"}}))
		if err != nil {
			t.Fatal(err)
		}
		got, gotSeq, err := a.catchUp(ctx, name, state, seq, true)
		if err != nil {
			t.Fatal(err)
		}
		if gotSeq != newer || got.GetLabels()["k"] != "v" {
			t.Fatalf("%s caught up to %d with labels %v; want %d, with the other writer's label", name, gotSeq, got.GetLabels(), newer)
		}
	}
}

// A server readied and allocated again by other writers since the
// sequence an allocation into its rooms tried may still have a room:
// catchUp folds their events for a query of ALLOCATED servers, rather
// than say from the last event's type alone (GameServerAllocated) that
// the server is taken, which holds only for a query of READY servers.
func TestCatchUpFoldsAnotherMatchOnAnAllocatedServer(t *testing.T) {
	ctx := context.Background()
	store := behindEventStore(t)
	a := &allocationService{s: &Server{opts: Options{Store: store}}}
	name := events.GameServerName("arena", "gs-1")
	subject := events.MustSubject(name)
	rooms := func(count int64) []*eventsv1.CounterChanged {
		return []*eventsv1.CounterChanged{{Name: "rooms", Count: count, Capacity: 4, CountDiff: 1}}
	}
	var state *eventsv1.GameServerState
	var seq uint64
	for _, data := range []proto.Message{
		&eventsv1.GameServerScheduled{Host: "hosts/h1", Template: &eventsv1.GameServerTemplate{Command: "/bin/game",
			Counters: map[string]*eventsv1.Counter{"rooms": {Capacity: 4}}}},
		&eventsv1.ProcessStarted{Pid: 1}, &eventsv1.GameServerReady{},
		&eventsv1.GameServerAllocated{GameSession: "gameSessions/g1", Counters: rooms(1)},
	} {
		env := events.New(name, time.Now(), data)
		var err error
		if seq, err = store.Append(ctx, subject, seq, env); err != nil {
			t.Fatal(err)
		}
		env.Sequence = seq
		if state, err = events.ApplyGameServer(state, env); err != nil {
			t.Fatal(err)
		}
	}
	// The match ends, the server is READY for the next, and another
	// replica allocates it.
	newer, err := store.Append(ctx, subject, seq,
		events.New(name, time.Now(), &eventsv1.GameServerReady{}),
		events.New(name, time.Now(), &eventsv1.GameServerAllocated{GameSession: "gameSessions/g2", Counters: rooms(2)}))
	if err != nil {
		t.Fatal(err)
	}
	got, gotSeq, err := a.catchUp(ctx, name, state, seq, false)
	if err != nil {
		t.Fatal(err)
	}
	if gotSeq != newer || got.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_ALLOCATED || got.GetCounters()["rooms"].GetCount() != 2 {
		t.Fatalf("caught up to %d: %v, rooms %v; want %d, ALLOCATED with 2 rooms taken", gotSeq, got.GetLifecycle(), got.GetCounters()["rooms"], newer)
	}
	// For a query of READY servers the last event's type still decides.
	if got, _, err := a.catchUp(ctx, name, state, seq, true); err != nil || got.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_READY {
		t.Fatalf("a READY query's catch-up: %v, %v", got.GetLifecycle(), err)
	}
}
