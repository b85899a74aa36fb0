package events

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// An Aggregate describes one kind of event-sourced aggregate, once: how its
// resources are named, which events it folds, how to fold them, and how its
// state reads in words. Code that treats every kind alike (the projector and
// its dead-letter retry, history and explain) looks kinds up here instead of
// switching on them, and registry_test.go fails for a kind or an event type
// that is not registered.
type Aggregate struct {
	// Kind is the subject token: tether.ev.<Kind>.….
	Kind string
	// Name is the resource name pattern, e.g. "fleets/{fleet}".
	Name string
	// Events are the types of the events it folds.
	Events []string
	// Apply folds an event into a state; a nil state is "none yet".
	Apply func(state proto.Message, e Envelope) (proto.Message, error)
	// Status says where a state stands, e.g. "READY" or "ONLINE".
	Status func(state proto.Message) string
	// Reason says why it stands there, e.g. "HOST_LOST"; "" for none.
	Reason func(state proto.Message) string
	// Evidence is the facts behind the reason; nil for none.
	Evidence func(state proto.Message) proto.Message
}

// aggregates is the registry, in the order views are listed.
var aggregates = []Aggregate{
	{
		Kind: KindFleet, Name: "fleets/{fleet}",
		Events:   tableEvents(fleetTransitions),
		Apply:    applyAs(ApplyFleet),
		Status:   func(s proto.Message) string { return fleetStatus(s.(*eventsv1.FleetState)) },
		Reason:   func(proto.Message) string { return "" },
		Evidence: func(proto.Message) proto.Message { return nil },
	},
	{
		Kind: KindHost, Name: "hosts/{host}",
		Events: tableEvents(hostTransitions),
		Apply:  applyAs(ApplyHost),
		Status: func(s proto.Message) string {
			return trimEnumPrefix(s.(*eventsv1.HostState).GetStatus().String(), "HOST_STATUS_")
		},
		Reason:   func(proto.Message) string { return "" },
		Evidence: func(proto.Message) proto.Message { return nil },
	},
	{
		Kind: KindGameServer, Name: "fleets/{fleet}/gameServers/{id}",
		Events: tableEvents(gameServerTransitions),
		Apply:  applyAs(ApplyGameServer),
		Status: func(s proto.Message) string { return LifecycleName(s.(*eventsv1.GameServerState).GetLifecycle()) },
		Reason: func(s proto.Message) string { return ReasonName(s.(*eventsv1.GameServerState).GetReason()) },
		Evidence: func(s proto.Message) proto.Message {
			if ev := s.(*eventsv1.GameServerState).GetEvidence(); ev != nil {
				return ev
			}
			return nil
		},
	},
	{
		Kind: KindGameSession, Name: "gameSessions/{id}",
		Events: gameSessionEvents,
		Apply:  applyAs(ApplyGameSession),
		Status: func(s proto.Message) string { return GameSessionStatusName(s.(*eventsv1.GameSessionState).GetStatus()) },
		Reason: func(s proto.Message) string {
			st := s.(*eventsv1.GameSessionState)
			if st.GetEndReason() == eventsv1.GameSessionEndReason_GAME_SESSION_END_REASON_UNSPECIFIED {
				return ""
			}
			r := strings.TrimPrefix(st.GetEndReason().String(), "GAME_SESSION_END_REASON_")
			if sr := ReasonName(st.GetServerReason()); sr != "" {
				r += "(" + sr + ")"
			}
			return r
		},
		Evidence: func(proto.Message) proto.Message { return nil },
	},
}

// Aggregates lists every registered aggregate kind. A player session
// (KindPlayerSession) is not one: its events are its game session's, on
// the game session's subject, and its name only addresses a part of it.
func Aggregates() []Aggregate { return slices.Clone(aggregates) }

// AggregateOf returns the registered aggregate of a kind.
func AggregateOf(kind string) (Aggregate, bool) {
	i := slices.IndexFunc(aggregates, func(a Aggregate) bool { return a.Kind == kind })
	if i < 0 {
		return Aggregate{}, false
	}
	return aggregates[i], true
}

// KindOf returns the kind token of an event subject ("" if it is not one).
func KindOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix+".")
	if !ok {
		return ""
	}
	kind, _, _ := strings.Cut(rest, ".")
	return kind
}

// Fold folds events, in order, into the aggregate's state from none. An
// event its writer may not write, or an undecodable message (Skipped), is
// left out, as the projector leaves it out of the views.
func (a Aggregate) Fold(evs []Envelope) (proto.Message, error) {
	var state proto.Message
	for _, e := range evs {
		next, err := a.Apply(state, e)
		if Skipped(err) {
			continue
		}
		state = next
		if err != nil {
			return nil, fmt.Errorf("fold %s at %d: %w", e.Aggregate, e.Sequence, err)
		}
	}
	return state, nil
}

// applyAs adapts a typed Apply to the registry's: a nil state stays a nil
// S, and the result is nil (not a typed nil) only if there is none.
func applyAs[S proto.Message](apply func(S, Envelope) (S, error)) func(proto.Message, Envelope) (proto.Message, error) {
	return func(state proto.Message, e Envelope) (proto.Message, error) {
		var s S
		if state != nil {
			typed, ok := state.(S)
			if !ok {
				return nil, fmt.Errorf("events: %s is not the state of %s", state.ProtoReflect().Descriptor().Name(), e.Aggregate)
			}
			s = typed
		}
		next, err := apply(s, e)
		if err != nil {
			return nil, err
		}
		return next, nil
	}
}

// tableEvents are the event types of a transition table: its rows.
func tableEvents[T any](table map[string]T) []string {
	return slices.Sorted(maps.Keys(table))
}
