package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/natsstack"
)

// A player reconnecting exactly at the end of their window races the
// controller expiring it, 100 times over real JetStream: the agent's
// AcceptPlayer (at the deadline: still inside) and the controller's
// ExpirePlayers (a nanosecond later) both decide on the same state and
// append guarded by the same sequence. Each race ends ACTIVE or COMPLETED,
// never both, and whoever lost was told so.
func TestReconnectRacesWindowExpiry(t *testing.T) {
	ctx := context.Background()
	store := natsstack.Start(t, natsstack.Options{}).Store
	deadline := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const races = 100
	const ps = "ps-racer"
	names := make([]string, races)
	for i := range names {
		names[i] = events.GameSessionName(fmt.Sprintf("gsess-race-%d", i))
		setup := []events.Envelope{
			events.New(names[i], deadline.Add(-time.Minute), &eventsv1.GameSessionCreated{
				GameServer: "fleets/f/gameServers/gs-1", Policy: &eventsv1.GameSessionPolicy{ReconnectWindowSeconds: 10},
				Players: []*eventsv1.PlayerSeat{{PlayerSession: ps, PlayerId: "p", Slot: 3}},
			}),
			events.New(names[i], deadline.Add(-time.Minute), &eventsv1.PlayerAccepted{PlayerSession: ps}),
			events.New(names[i], deadline.Add(-10*time.Second), &eventsv1.PlayerDisconnected{PlayerSession: ps, ReconnectDeadline: timestamppb.New(deadline)}),
		}
		if _, err := store.Append(ctx, events.MustSubject(names[i]), 0, setup...); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{opts: Options{Store: store, Clock: clockwork.NewFakeClockAt(deadline)}, producer: "hosts/h1"}

	type outcome struct {
		reconnected, refused bool // the agent's answer
		expired              bool // the controller appended the expiry
	}
	results := make([]outcome, races)
	var wg sync.WaitGroup
	for i, name := range names {
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			_, msgs, err := a.decideSession(ctx, name, events.AcceptPlayer{PlayerSession: ps, Now: deadline}, nil)
			var re *events.RefusedError
			switch {
			case err == nil:
				results[i].reconnected = len(msgs) == 1 && events.TypeOf(msgs[0]) == "PlayerReconnected"
			case errors.As(err, &re) && re.Reason == events.RefusedPlayerSessionExpired:
				results[i].refused = true
			default:
				t.Errorf("%s: accept: %v", name, err)
			}
		})
		wg.Go(func() {
			<-start
			results[i].expired = expireAsController(t, store, name, deadline.Add(time.Nanosecond))
		})
		close(start)
	}
	wg.Wait()

	won := map[string]int{}
	for i, name := range names {
		r := results[i]
		h, err := store.History(ctx, events.MustSubject(name), 0)
		if err != nil {
			t.Fatal(err)
		}
		var state *eventsv1.GameSessionState
		reconnects, completions := 0, 0
		for _, e := range h {
			if state, err = events.ApplyGameSession(state, e); err != nil {
				t.Fatalf("%s: stored history does not fold: %v", name, err)
			}
			switch e.Type {
			case "PlayerReconnected":
				reconnects++
			case "PlayerSessionCompleted":
				completions++
			}
		}
		status := events.FindPlayer(state, ps).GetStatus()
		switch {
		case reconnects == 1 && completions == 0 && status == eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_ACTIVE && r.reconnected && !r.expired:
			won["reconnect"]++
		case reconnects == 0 && completions == 1 && status == eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_COMPLETED && r.refused && r.expired:
			won["expiry"]++
		default:
			t.Errorf("%s: %d reconnects, %d completions, final %v; agent reconnected=%v refused=%v, controller expired=%v",
				name, reconnects, completions, status, r.reconnected, r.refused, r.expired)
		}
	}
	t.Logf("outcomes of %d races: %v", races, won)
}

// expireAsController does what the controller does when a deadline is due:
// read the game session, decide ExpirePlayers at now, append guarded by the
// sequence read; on a conflict, decide again on the newer state (the
// controller does so on its next pass). It reports whether it appended.
func expireAsController(t *testing.T, store *natsjs.Store, name string, now time.Time) bool {
	ctx := context.Background()
	for range 10 {
		h, err := store.History(ctx, events.MustSubject(name), 0)
		if err != nil {
			t.Error(err)
			return false
		}
		var state *eventsv1.GameSessionState
		var seq uint64
		for _, e := range h {
			state, _ = events.ApplyGameSession(state, e)
			seq = e.Sequence
		}
		msgs, err := events.DecideGameSession(name, state, events.ExpirePlayers{Now: now})
		if err != nil {
			t.Error(err)
			return false
		}
		if len(msgs) == 0 {
			return false
		}
		envs := make([]events.Envelope, len(msgs))
		for i, m := range msgs {
			envs[i] = events.New(name, now, m)
		}
		_, err = store.Append(ctx, events.MustSubject(name), seq, envs...)
		if errors.Is(err, events.ErrConflict) {
			continue
		}
		if err != nil {
			t.Error(err)
			return false
		}
		return true
	}
	t.Errorf("%s: expiry still conflicting after 10 attempts", name)
	return false
}
