package apiserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// gameServerService implements tetherv1.GameServerServiceServer.
type gameServerService struct {
	tetherv1.UnimplementedGameServerServiceServer
	s *Server
}

func (g *gameServerService) GetGameServer(ctx context.Context, req *tetherv1.GetGameServerRequest) (*tetherv1.GameServer, error) {
	if _, _, err := events.ParseGameServerName(req.GetName()); err != nil {
		return nil, invalidField("name", err.Error())
	}
	if err := g.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	row, err := g.s.opts.Views.GameServer(ctx, req.GetName())
	if err != nil {
		return nil, g.s.archivedNotFound(ctx, req.GetName(), req.GetName(), err)
	}
	out := gameServerToAPI(row.State, row.Sequence)
	g.s.beats.freshenGameServer(out)
	return out, nil
}

func (g *gameServerService) ListGameServers(ctx context.Context, req *tetherv1.ListGameServersRequest) (*tetherv1.ListGameServersResponse, error) {
	q, err := parseGameServerFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	if req.GetParent() != "fleets/-" {
		if _, err := events.ParseFleetName(req.GetParent()); err != nil {
			return nil, invalidField("parent", err.Error())
		}
		q.Fleet = req.GetParent()
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	key := req.GetParent() + "?" + req.GetFilter()
	if q.After, err = decodePageToken(req.GetPageToken(), key); err != nil {
		return nil, err
	}
	if err := g.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	q.Limit = size + 1
	rows, err := g.s.opts.Views.ListGameServers(ctx, q)
	if err != nil {
		return nil, err
	}
	resp := &tetherv1.ListGameServersResponse{}
	bytes := 0
	beats := g.s.beats
	for i, r := range rows {
		if i == size || full(i, bytes) {
			resp.NextPageToken = encodePageToken(rows[i-1].State.GetName(), key)
			break
		}
		g := gameServerToAPI(r.State, r.Sequence)
		beats.freshenGameServer(g)
		resp.GameServers = append(resp.GameServers, g)
		bytes += proto.Size(g)
	}
	if q.Live && req.GetPageToken() == "" {
		ended := q
		ended.Live, ended.State = false, events.LifecycleName(eventsv1.Lifecycle_LIFECYCLE_TERMINATED)
		n, err := g.s.opts.Views.CountGameServers(ctx, ended)
		if err != nil {
			return nil, err
		}
		resp.EndedCount = int32(min(n, math.MaxInt32))
	}
	return resp, nil
}

// filterFields lists the fields ListGameServers filters on, with their
// allowed values (nil: any resource name).
var filterFields = map[string][]string{
	"state":      enumNames(tetherv1.GameServer_State_name),
	"health":     enumNames(tetherv1.HealthStatus_State_name),
	"connection": enumNames(tetherv1.ConnectionStatus_State_name),
	"host":       nil,
	"id":         nil,
	"ended":      {"false", "true"},
}

func enumNames(m map[int32]string) []string {
	var out []string
	for k, v := range m {
		if k != 0 {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// parseGameServerFilter parses the AIP-160 subset "field=value" terms joined
// by " AND ", e.g. "state=READY AND host=hosts/h1".
func parseGameServerFilter(filter string) (projections.GameServerQuery, error) {
	var q projections.GameServerQuery
	if strings.TrimSpace(filter) == "" {
		return q, nil
	}
	seen := map[string]bool{}
	for term := range strings.SplitSeq(filter, " AND ") {
		field, value, ok := strings.Cut(term, "=")
		field, value = strings.TrimSpace(field), strings.Trim(strings.TrimSpace(value), `"`)
		if !ok || field == "" || value == "" {
			return q, invalidField("filter", fmt.Sprintf("term %q is not field=value (terms are joined by ' AND ')", strings.TrimSpace(term)))
		}
		allowed, known := filterFields[field]
		if !known {
			return q, invalidField("filter", fmt.Sprintf("unknown field %q; use state, host, health, connection, id or ended", field))
		}
		if seen[field] {
			return q, invalidField("filter", fmt.Sprintf("field %q appears twice", field))
		}
		seen[field] = true
		if allowed != nil && !slices.Contains(allowed, value) {
			return q, invalidField("filter", fmt.Sprintf("%s=%s: value must be one of %s", field, value, strings.Join(allowed, ", ")))
		}
		switch field {
		case "state":
			q.State = value
		case "health":
			q.Health = value
		case "connection":
			q.Connection = value
		case "host":
			if _, err := events.ParseHostName(value); err != nil {
				return q, invalidField("filter", fmt.Sprintf("host=%s: %v", value, err))
			}
			q.Host = value
		case "id":
			if err := events.CheckID(value); err != nil {
				return q, invalidField("filter", fmt.Sprintf("id=%s: %v", value, err))
			}
			q.ID = value
		case "ended":
			if value == "true" {
				q.State = events.LifecycleName(eventsv1.Lifecycle_LIFECYCLE_TERMINATED)
			} else {
				q.Live = true
			}
		}
	}
	if seen["ended"] && seen["state"] {
		return q, invalidField("filter", "ended and state together: a state says whether the servers ended")
	}
	return q, nil
}

// underSpec names a fleet spec's field error by the standalone server's
// request field: events name the fields of a fleet ("fleet.health…"), and a
// standalone server's spec is "spec".
func underSpec(err error) error {
	var ve *events.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	field, ok := strings.CutPrefix(ve.Field, "fleet.")
	if !ok {
		return err
	}
	return &events.ValidationError{Field: "spec." + field, Reason: ve.Reason}
}

// defaultShutdownGrace is the deadline of an API shutdown that names none.
const defaultShutdownGrace = 30 * time.Second

// CreateGameServer creates a standalone game server (no fleet): it is
// scheduled on a host here, and started by its agent.
func (g *gameServerService) CreateGameServer(ctx context.Context, req *tetherv1.CreateGameServerRequest) (*tetherv1.GameServer, error) {
	s := g.s
	if req.GetParent() != events.FleetName(events.StandaloneFleet) {
		return nil, invalidField("parent", fmt.Sprintf("game servers of a fleet are created by the fleet; standalone ones under %s", events.FleetName(events.StandaloneFleet)))
	}
	if err := events.CheckID(req.GetGameServerId()); err != nil {
		return nil, invalidField("game_server_id", err.Error())
	}
	if s.opts.Commands == nil {
		return nil, &apiError{code: codes.FailedPrecondition, reason: "NO_COMMAND_BUS", msg: "this API replica cannot reach agents (no command bus)"}
	}
	if err := checkTemplate("spec", req.GetSpec().GetTemplate()); err != nil {
		return nil, err
	}
	if err := s.checkHostPorts(ctx, "spec", req.GetSpec().GetTemplate()); err != nil {
		return nil, err
	}
	spec := specFromAPI(req.GetSpec())
	events.NormalizeFleetSpec(spec)
	if err := events.ValidateFleetSpec(spec); err != nil {
		return nil, underSpec(err)
	}
	name := events.GameServerName(events.StandaloneFleet, req.GetGameServerId())
	host, hostSubjects, err := g.placeStandalone(ctx, req.GetHost(), spec.GetTemplate().GetHostSelector())
	if err != nil {
		return nil, err
	}
	subject, err := events.Subject(name)
	if hostSubjects {
		subject, err = events.GameServerSubject(name, host)
	}
	if err != nil {
		return nil, err
	}
	res, err := s.writeOn(ctx, name, subject, req.GetRequestId(), "", func(ctx context.Context, last uint64) ([]proto.Message, error) {
		taken, err := g.nameTaken(ctx, name)
		if err != nil {
			return nil, err
		}
		if last > 0 || taken {
			return nil, &apiError{code: codes.AlreadyExists, reason: ReasonAlreadyExists, msg: fmt.Sprintf("%s already exists", name)}
		}
		return events.DecideGameServer(name, nil, events.ScheduleGameServer{Host: host, Spec: spec, HostSubject: hostSubjects})
	})
	if err != nil {
		return nil, err
	}
	if !res.Replayed {
		hostID, _ := events.ParseHostName(host) // from the hosts view: valid
		cmd := &agentv1.Command{Action: &agentv1.Command_Start{Start: &agentv1.StartGameServer{
			GameServer: name, Template: spec.GetTemplate(), Health: spec.GetHealth(),
			SdkDisconnectGraceSeconds: spec.GetSdkDisconnectGraceSeconds(), Labels: spec.GetLabels(),
			Subject: subject,
		}}}
		if err := s.opts.Commands.Send(ctx, hostID, s.producer, cmd); err != nil {
			return nil, fmt.Errorf("start %s on %s: %w", name, host, err)
		}
		s.log.Info("standalone game server scheduled", "game_server", name, "host", host)
	}
	return g.GetGameServer(ctx, &tetherv1.GetGameServerRequest{Name: name, MinSequence: int64(res.Sequence)})
}

// nameTaken reports whether a game server of this name has events on any
// subject: a host subject of any host, or the subject of servers before
// host subjects. A name has one server.
func (g *gameServerService) nameTaken(ctx context.Context, name string) (bool, error) {
	legacy, err := events.Subject(name)
	if err != nil {
		return false, err
	}
	for _, subject := range []string{legacy, events.GameServerHostSubjects(name)} {
		last, err := g.s.opts.Store.LeaderLastSequence(ctx, subject)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", name, err)
		}
		if last > 0 {
			return true, nil
		}
	}
	return false, nil
}

// placeStandalone picks the host of a standalone server: the one asked for,
// if it is ONLINE, not cordoned and matches the template's host selector;
// else the ONLINE, uncordoned, matching host with the most free slots. It
// says whether the host's agent writes host subjects.
func (g *gameServerService) placeStandalone(ctx context.Context, want string, selector map[string]string) (string, bool, error) {
	if want != "" {
		if _, err := events.ParseHostName(want); err != nil {
			return "", false, invalidField("host", err.Error())
		}
		h, err := g.s.opts.Views.Host(ctx, want)
		if err != nil {
			return "", false, err
		}
		switch {
		case h.State.GetStatus() != eventsv1.HostStatus_HOST_STATUS_ONLINE:
			return "", false, &apiError{code: codes.FailedPrecondition, reason: "HOST_NOT_ONLINE", msg: fmt.Sprintf("%s is not ONLINE", want)}
		case h.State.GetCordoned():
			return "", false, &apiError{code: codes.FailedPrecondition, reason: "HOST_CORDONED", msg: fmt.Sprintf("%s is cordoned: it takes no new game servers", want)}
		case !events.MatchesLabels(h.State.GetLabels(), selector):
			return "", false, &apiError{code: codes.FailedPrecondition, reason: events.NoMatchingHost, msg: fmt.Sprintf("%s does not have the labels of the template's host selector", want)}
		}
		return want, h.State.GetHostSubjects(), nil
	}
	best, room, bestSubjects := "", int32(0), false
	after := ""
	for {
		hosts, err := g.s.opts.Views.Hosts(ctx, after, 500)
		if err != nil {
			return "", false, err
		}
		for _, h := range hosts {
			if free := h.State.GetCapacity() - h.Used; events.Schedulable(h.State) && events.MatchesLabels(h.State.GetLabels(), selector) && free > room {
				best, room, bestSubjects = h.State.GetName(), free, h.State.GetHostSubjects()
			}
		}
		if len(hosts) < 500 {
			break
		}
		after = hosts[len(hosts)-1].State.GetName()
	}
	if best == "" && len(selector) > 0 {
		return "", false, &apiError{code: codes.ResourceExhausted, reason: events.NoMatchingHost, msg: "no ONLINE, uncordoned host with the labels of the template's host selector has a free slot"}
	}
	if best == "" {
		return "", false, &apiError{code: codes.ResourceExhausted, reason: events.NoHostWithRoom, msg: "no ONLINE, uncordoned host has a free slot"}
	}
	return best, bestSubjects, nil
}

// ShutdownGameServer asks a game server to stop by a deadline and tells
// its agent.
func (g *gameServerService) ShutdownGameServer(ctx context.Context, req *tetherv1.ShutdownGameServerRequest) (*tetherv1.GameServer, error) {
	grace := defaultShutdownGrace
	if n := req.GetGraceSeconds(); n < 0 || n > 3600 {
		return nil, invalidField("grace_seconds", "must be 0 to 3600")
	} else if n > 0 {
		grace = time.Duration(n) * time.Second
	}
	return g.shutdown(ctx, req.GetName(), req.GetRequestId(), grace, req.GetDetail())
}

// DeleteGameServer shuts a game server down with the default grace.
func (g *gameServerService) DeleteGameServer(ctx context.Context, req *tetherv1.DeleteGameServerRequest) (*tetherv1.GameServer, error) {
	return g.shutdown(ctx, req.GetName(), req.GetRequestId(), defaultShutdownGrace, "deleted through the API")
}

func (g *gameServerService) shutdown(ctx context.Context, name, requestID string, grace time.Duration, detail string) (*tetherv1.GameServer, error) {
	s := g.s
	if _, _, err := events.ParseGameServerName(name); err != nil {
		return nil, invalidField("name", err.Error())
	}
	deadline := s.opts.Now().Add(grace)
	var host string
	res, err := s.write(ctx, name, requestID, "", func(ctx context.Context, last uint64) ([]proto.Message, error) {
		row, err := s.opts.Views.GameServer(ctx, name)
		if err != nil {
			return nil, err
		}
		host = row.State.GetHost()
		return events.DecideGameServer(name, row.State, events.RequestShutdown{
			Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API, Deadline: deadline,
			Evidence: &eventsv1.Evidence{RequestedBy: requestedBy(ctx, s.producer), Detail: detail},
		})
	})
	if err != nil {
		return nil, err
	}
	if len(res.Events) > 0 && s.opts.Commands != nil {
		hostID, err := events.ParseHostName(host)
		if err != nil {
			return nil, err
		}
		cmd := &agentv1.Command{Action: &agentv1.Command_Stop{Stop: &agentv1.StopGameServer{
			GameServer: name, Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API, Deadline: timestamppb.New(deadline),
		}}}
		if err := s.opts.Commands.Send(ctx, hostID, s.producer, cmd); err != nil {
			// Recorded; the agent's periodic sync stops it.
			s.log.Warn("shutdown: tell the agent", "game_server", name, "err", err)
		}
	}
	return g.GetGameServer(ctx, &tetherv1.GetGameServerRequest{Name: name, MinSequence: int64(res.Sequence)})
}

// UpdateGameServerCounter changes a counter of a game server
// (events.UpdateCounter): refusals out of range are OUT_OF_RANGE, a
// counter the server's template does not name NOT_FOUND.
func (g *gameServerService) UpdateGameServerCounter(ctx context.Context, req *tetherv1.UpdateGameServerCounterRequest) (*tetherv1.GameServer, error) {
	if err := events.CheckCounterName("counter", req.GetCounter()); err != nil {
		return nil, err
	}
	return g.changeCounters(ctx, req.GetName(), req.GetRequestId(), events.UpdateCounter{
		Name: req.GetCounter(), Count: req.Count, CountDiff: req.GetCountDiff(), Capacity: req.Capacity,
	})
}

// UpdateGameServerList changes a list of a game server
// (events.UpdateList): a value added that it holds is ALREADY_EXISTS, one
// removed that it does not hold NOT_FOUND, values past its capacity
// OUT_OF_RANGE.
func (g *gameServerService) UpdateGameServerList(ctx context.Context, req *tetherv1.UpdateGameServerListRequest) (*tetherv1.GameServer, error) {
	if err := events.CheckCounterName("list", req.GetList()); err != nil {
		return nil, err
	}
	return g.changeCounters(ctx, req.GetName(), req.GetRequestId(), events.UpdateList{
		Name: req.GetList(), Capacity: req.Capacity, Add: req.GetAddValues(), Remove: req.GetRemoveValues(),
	})
}

// changeCounters decides a counter or list change on the server's state
// in the views and appends it through the write path, then tells the
// server's agent to re-read the server (in the background), so that its
// game sees the change through WatchGameServer.
func (g *gameServerService) changeCounters(ctx context.Context, name, requestID string, cmd events.GameServerCommand) (*tetherv1.GameServer, error) {
	s := g.s
	if _, _, err := events.ParseGameServerName(name); err != nil {
		return nil, invalidField("name", err.Error())
	}
	var state *eventsv1.GameServerState
	res, err := s.write(ctx, name, requestID, "", func(ctx context.Context, last uint64) ([]proto.Message, error) {
		row, err := s.opts.Views.GameServer(ctx, name)
		if err != nil {
			return nil, err
		}
		state = row.State
		return events.DecideGameServer(name, row.State, cmd)
	})
	if err != nil {
		return nil, err
	}
	if len(res.Events) > 0 {
		s.refreshAgent(ctx, state, "counters")
	}
	return g.GetGameServer(ctx, &tetherv1.GetGameServerRequest{Name: name, MinSequence: int64(res.Sequence)})
}
