package events_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// The fleet's and the host's transition tables, written from
// docs/architecture.md ("Aggregates and the event catalogue") independently
// of the package's own tables (as gameServerMatrix is for the game server). Each row is an event, each column the status it
// arrives in; a cell is "-" when the event is refused, "=" when it is taken
// and the status stays, otherwise the status it leads to.

const fleetMatrix = `
                        ABSENT ACTIVE DELETED ACTIVE_FAILING ACTIVE_BLOCKED ACTIVE_ROLLING ACTIVE_PAUSED
FleetCreated            ACTIVE -      -       -              -              -              -
FleetUpdated            -      =      -       =              =              =              =
FleetStartFailing       -      ACTIVE_FAILING - =            ACTIVE_FAILING ACTIVE_FAILING ACTIVE_FAILING
FleetStartRecovered     -      -      -       ACTIVE         -              -              -
FleetPlacementBlocked   -      ACTIVE_BLOCKED - ACTIVE_FAILING ACTIVE_BLOCKED ACTIVE_BLOCKED ACTIVE_BLOCKED
FleetPlacementUnblocked -      -      -       -              ACTIVE         -              -
FleetAutoscaled         -      =      -       =              =              =              =
FleetAutoscaleFailed    -      =      -       =              =              =              =
FleetAutoscaleRecovered -      -      -       -              -              -              -
FleetRolloutStarted     -      ACTIVE_ROLLING - ACTIVE_FAILING ACTIVE_BLOCKED ACTIVE_ROLLING ACTIVE_ROLLING
FleetRolloutProgressed  -      -      -       -              -              ACTIVE_ROLLING -
FleetRolloutCompleted   -      -      -       -              -              ACTIVE         -
FleetRolloutPaused      -      -      -       -              -              ACTIVE_PAUSED  -
FleetRolloutHalted      -      -      -       -              -              ACTIVE_PAUSED  -
FleetRolloutResumed     -      -      -       -              -              -              ACTIVE_ROLLING
FleetRolledBack         -      -      -       -              -              ACTIVE_ROLLING ACTIVE_PAUSED
FleetDeleted            -      DELETED -      DELETED        DELETED        DELETED        DELETED
`

// fleetIn returns a fleet in a matrix column's status.
func fleetIn(column string) *eventsv1.FleetState {
	switch column {
	case "ABSENT":
		return nil
	case "ACTIVE":
		return &eventsv1.FleetState{Name: fleetName, Spec: minimalSpec()}
	case "DELETED":
		return &eventsv1.FleetState{Name: fleetName, Spec: minimalSpec(), Deleted: true}
	case "ACTIVE_FAILING":
		return &eventsv1.FleetState{Name: fleetName, Spec: minimalSpec(), StartFailing: &eventsv1.FleetStartFailing{ConsecutiveFailures: 2}}
	case "ACTIVE_BLOCKED":
		return &eventsv1.FleetState{Name: fleetName, Spec: minimalSpec(), PlacementBlocked: &eventsv1.FleetPlacementBlocked{Waiting: 2, Reason: events.NoMatchingHost}}
	case "ACTIVE_ROLLING", "ACTIVE_PAUSED":
		st := eventsv1.RolloutState_ROLLOUT_STATE_PROGRESSING
		if column == "ACTIVE_PAUSED" {
			st = eventsv1.RolloutState_ROLLOUT_STATE_PAUSED
		}
		return &eventsv1.FleetState{Name: fleetName, Spec: minimalSpec(), Revision: 2,
			Revisions: []*eventsv1.FleetRevision{{Revision: 1, Template: minimalSpec().GetTemplate()}, {Revision: 2, Template: minimalSpec().GetTemplate()}},
			Rollout:   &eventsv1.FleetRollout{Revision: 2, FromRevision: 1, State: st}}
	}
	return nil
}

func fleetPayload(typ string) proto.Message {
	switch typ {
	case "FleetCreated":
		return &eventsv1.FleetCreated{Spec: minimalSpec()}
	case "FleetUpdated":
		return &eventsv1.FleetUpdated{Spec: minimalSpec(), ChangedFields: []string{"replicas"}}
	case "FleetStartFailing":
		return &eventsv1.FleetStartFailing{ConsecutiveFailures: 3, FailureSequence: 9}
	case "FleetStartRecovered":
		return &eventsv1.FleetStartRecovered{GameServer: "fleets/arena/gameServers/gs-1"}
	case "FleetPlacementBlocked":
		return &eventsv1.FleetPlacementBlocked{Waiting: 1, Reason: events.NoHostWithRoom}
	case "FleetPlacementUnblocked":
		return &eventsv1.FleetPlacementUnblocked{}
	case "FleetAutoscaled":
		return &eventsv1.FleetAutoscaled{FromReplicas: 1, ToReplicas: 3}
	case "FleetAutoscaleFailed":
		return &eventsv1.FleetAutoscaleFailed{Policy: "webhook http://x", Error: "timeout"}
	case "FleetAutoscaleRecovered":
		return &eventsv1.FleetAutoscaleRecovered{}
	case "FleetRolloutStarted":
		return &eventsv1.FleetRolloutStarted{Revision: 3, FromRevision: 2}
	case "FleetRolloutProgressed":
		return &eventsv1.FleetRolloutProgressed{Revision: 2, Updated: 1, Outdated: 2}
	case "FleetRolloutCompleted":
		return &eventsv1.FleetRolloutCompleted{Revision: 2}
	case "FleetRolloutPaused":
		return &eventsv1.FleetRolloutPaused{Revision: 2}
	case "FleetRolloutHalted":
		return &eventsv1.FleetRolloutHalted{Revision: 2}
	case "FleetRolloutResumed":
		return &eventsv1.FleetRolloutResumed{Revision: 2}
	case "FleetRolledBack":
		return &eventsv1.FleetRolledBack{FromRevision: 2, ToRevision: 1}
	case "FleetDeleted":
		return &eventsv1.FleetDeleted{}
	}
	return nil
}

func TestApplyFleetTransitionTable(t *testing.T) {
	checkMatrix(t, fleetMatrix, events.KindFleet, func(t *testing.T, event, column string) (string, error) {
		next, err := events.ApplyFleet(fleetIn(column), events.New(fleetName, at(1), fleetPayload(event)))
		if err != nil {
			return "", err
		}
		status := map[bool]string{true: "DELETED", false: "ACTIVE"}[next.GetDeleted()]
		switch {
		case status == "ACTIVE" && next.GetStartFailing() != nil:
			status = "ACTIVE_FAILING"
		case status == "ACTIVE" && next.GetPlacementBlocked() != nil:
			status = "ACTIVE_BLOCKED"
		case status == "ACTIVE" && events.RolloutActive(next):
			status = "ACTIVE_ROLLING"
		case status == "ACTIVE" && events.RolloutOpen(next):
			status = "ACTIVE_PAUSED"
		}
		return status, nil
	})
}

const hostMatrix = `
                   ABSENT ONLINE DRAINING DRAINED UNREACHABLE LOST DEREGISTERED UNREACHABLE_DRAINING UNREACHABLE_DRAINED
HostRegistered     ONLINE =      =        =       ONLINE      ONLINE ONLINE     DRAINING             DRAINED
HostOnline         -      =      =        =       ONLINE      ONLINE -          DRAINING             DRAINED
HostUnreachable    -      UNREACHABLE UNREACHABLE UNREACHABLE - - -             -                    -
HostLost           -      -      -        -       LOST        -    -            LOST                 LOST
HostDrainRequested -      DRAINING =      =       =           =    -            =                    =
HostCordoned       -      =      =        =       =           =    -            =                    =
HostUncordoned     -      =      ONLINE   ONLINE  =           =    -            =                    =
HostDrained        -      -      DRAINED  -       -           -    -            -                    -
HostDeregistered   -      DEREGISTERED DEREGISTERED DEREGISTERED DEREGISTERED DEREGISTERED - DEREGISTERED DEREGISTERED
`

// hostIn returns a host in a matrix column's status; UNREACHABLE_DRAINING
// is an unreachable host that was asked to drain, UNREACHABLE_DRAINED one
// that had drained.
func hostIn(column string) *eventsv1.HostState {
	if column == "ABSENT" {
		return nil
	}
	drained := strings.HasSuffix(column, "DRAINED")
	draining := drained || strings.HasSuffix(column, "DRAINING")
	status, _, _ := strings.Cut(column, "_")
	return &eventsv1.HostState{Name: "hosts/h1", Capacity: 4, Draining: draining, Drained: drained, Cordoned: draining,
		Status: eventsv1.HostStatus(eventsv1.HostStatus_value["HOST_STATUS_"+status])}
}

func hostPayload(typ string) proto.Message {
	switch typ {
	case "HostRegistered":
		return &eventsv1.HostRegistered{Capacity: 4}
	case "HostOnline":
		return &eventsv1.HostOnline{LastHeartbeatTime: tsAt(1)}
	case "HostUnreachable":
		return &eventsv1.HostUnreachable{LastHeartbeatTime: tsAt(1)}
	case "HostLost":
		return &eventsv1.HostLost{LastHeartbeatTime: tsAt(1)}
	case "HostDrainRequested":
		return &eventsv1.HostDrainRequested{}
	case "HostCordoned":
		return &eventsv1.HostCordoned{RequestedBy: "ops"}
	case "HostUncordoned":
		return &eventsv1.HostUncordoned{RequestedBy: "ops"}
	case "HostDrained":
		return &eventsv1.HostDrained{}
	case "HostDeregistered":
		return &eventsv1.HostDeregistered{}
	}
	return nil
}

func TestApplyHostTransitionTable(t *testing.T) {
	checkMatrix(t, hostMatrix, events.KindHost, func(t *testing.T, event, column string) (string, error) {
		next, err := events.ApplyHost(hostIn(column), events.New("hosts/h1", at(1), hostPayload(event)))
		if err != nil {
			return "", err
		}
		return strings.TrimPrefix(next.GetStatus().String(), "HOST_STATUS_"), nil
	})
}

// checkMatrix runs apply on every cell of a matrix and compares: a "-"
// cell must be a TransitionError, "=" the column's own status, any other
// the status named. The rows must be the registry's events of kind.
func checkMatrix(t *testing.T, matrix, kind string, apply func(t *testing.T, event, column string) (string, error)) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(matrix), "\n")
	columns := strings.Fields(lines[0])
	agg, _ := events.AggregateOf(kind)
	var rows []string
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != len(columns)+1 {
			t.Fatalf("row %q has %d cells, want %d", line, len(f)-1, len(columns))
		}
		rows = append(rows, f[0])
		for i, want := range f[1:] {
			event, column := f[0], columns[i]
			t.Run(event+"/from_"+column, func(t *testing.T) {
				got, err := apply(t, event, column)
				switch {
				case want == "-":
					asTransitionError(t, err)
				case err != nil:
					t.Fatalf("refused: %v", err)
				case want == "=" && got != strings.TrimSuffix(strings.TrimSuffix(column, "_DRAINING"), "_DRAINED") && got != column:
					t.Errorf("status %s, want it unchanged (%s)", got, column)
				case want != "=" && got != want:
					t.Errorf("status %s, want %s", got, want)
				}
			})
		}
	}
	if len(rows) != len(agg.Events) {
		t.Fatalf("matrix rows %v, the registry's %s events %v", rows, kind, agg.Events)
	}
	for _, r := range rows {
		if !strings.Contains(" "+strings.Join(agg.Events, " ")+" ", " "+r+" ") {
			t.Fatalf("matrix row %s is not an event of %s (%v)", r, kind, agg.Events)
		}
	}
}
