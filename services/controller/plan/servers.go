package plan

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// shutdown decides a server's shutdown with ShutdownGrace to stop, and the
// stop command for its agent.
func (p Planner) shutdown(now time.Time, r projections.Row[*eventsv1.GameServerState], reason eventsv1.Reason, detail string, out *Plan) {
	name := r.State.GetName()
	deadline := now.Add(p.ShutdownGrace)
	ev := proto.CloneOf(r.State.GetEvidence())
	if ev == nil {
		ev = &eventsv1.Evidence{}
	}
	ev.RequestedBy, ev.Detail = p.Producer, detail
	msgs, err := events.DecideGameServer(name, r.State, events.RequestShutdown{Reason: reason, Evidence: ev, Deadline: deadline})
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("shut down %s: %w", name, err))
		return
	}
	if len(msgs) == 0 {
		return
	}
	hostID, err := events.ParseHostName(r.State.GetHost())
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("shut down %s: %w", name, err))
		return
	}
	subject, err := events.SubjectOf(r.State)
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("shut down %s: %w", name, err))
		return
	}
	out.Decisions = append(out.Decisions, Decision{Action: ActShutdown, Name: name, Subject: subject, Guard: r.Sequence, Events: msgs,
		Host: hostID, Command: &agentv1.Command{Action: &agentv1.Command_Stop{Stop: &agentv1.StopGameServer{
			GameServer: name, Reason: reason, Deadline: timestamppb.New(deadline),
		}}},
		Say: "game server shutdown requested", Attrs: []any{"game_server", name, "reason", events.ReasonName(reason)}})
}

// terminate decides that the controller ends a game server itself, with a
// reason and evidence; nil if the domain refuses (recorded in out).
func (p Planner) terminate(r projections.Row[*eventsv1.GameServerState], reason eventsv1.Reason, detail, say string, out *Plan) *Decision {
	name := r.State.GetName()
	ev := &eventsv1.Evidence{RequestedBy: p.Producer, Detail: detail}
	msgs, err := events.DecideGameServer(name, r.State, events.Terminate{Reason: reason, Evidence: ev})
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("terminate %s (%s): %w", name, events.ReasonName(reason), err))
		return nil
	}
	subject, err := events.SubjectOf(r.State)
	if err != nil {
		out.Refused = append(out.Refused, fmt.Errorf("terminate %s (%s): %w", name, events.ReasonName(reason), err))
		return nil
	}
	return &Decision{Action: ActTerminate, Name: name, Subject: subject, Guard: r.Sequence, Events: msgs,
		Say: say, Attrs: []any{"game_server", name, "host", r.State.GetHost(), "pid", r.State.GetPid(), "reason", events.ReasonName(reason)}}
}
