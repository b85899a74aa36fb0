package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// fleetService implements tetherv1.FleetServiceServer.
type fleetService struct {
	tetherv1.UnimplementedFleetServiceServer
	s *Server
}

func (f *fleetService) CreateFleet(ctx context.Context, req *tetherv1.CreateFleetRequest) (*tetherv1.Fleet, error) {
	if err := events.CheckID(req.GetFleetId()); err != nil {
		return nil, invalidField("fleet_id", err.Error())
	}
	if req.GetFleetId() == events.StandaloneFleet {
		return nil, invalidField("fleet_id", fmt.Sprintf("%q is reserved for game servers that belong to no fleet", events.StandaloneFleet))
	}
	if err := checkTemplate("fleet", req.GetFleet().GetTemplate()); err != nil {
		return nil, err
	}
	if err := f.s.checkHostPorts(ctx, "fleet", req.GetFleet().GetTemplate()); err != nil {
		return nil, err
	}
	name := events.FleetName(req.GetFleetId())
	spec := specFromAPI(req.GetFleet())
	return f.writeFleet(ctx, name, req.GetRequestId(), "", func(state *eventsv1.FleetState) ([]proto.Message, error) {
		if state != nil && state.GetName() != "" {
			return nil, &apiError{code: codes.AlreadyExists, reason: ReasonAlreadyExists, msg: fmt.Sprintf("%s already exists", name)}
		}
		return events.DecideFleet(name, state, events.CreateFleet{Spec: spec})
	})
}

func (f *fleetService) UpdateFleet(ctx context.Context, req *tetherv1.UpdateFleetRequest) (*tetherv1.Fleet, error) {
	name := req.GetFleet().GetName()
	if _, err := events.ParseFleetName(name); err != nil {
		return nil, invalidField("fleet.name", err.Error())
	}
	paths, err := fleetPaths(req.GetUpdateMask().GetPaths())
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 || slices.Contains(paths, "template") {
		if err := checkTemplate("fleet", req.GetFleet().GetTemplate()); err != nil {
			return nil, err
		}
		if err := f.s.checkHostPorts(ctx, "fleet", req.GetFleet().GetTemplate()); err != nil {
			return nil, err
		}
	}
	spec := specFromAPI(req.GetFleet())
	return f.writeFleet(ctx, name, req.GetRequestId(), req.GetFleet().GetEtag(), func(state *eventsv1.FleetState) ([]proto.Message, error) {
		if err := liveFleet(name, state); err != nil {
			return nil, err
		}
		return events.DecideFleet(name, state, events.UpdateFleet{Spec: spec, Paths: paths})
	})
}

func (f *fleetService) DeleteFleet(ctx context.Context, req *tetherv1.DeleteFleetRequest) (*tetherv1.Fleet, error) {
	name := req.GetName()
	if _, err := events.ParseFleetName(name); err != nil {
		return nil, invalidField("name", err.Error())
	}
	return f.writeFleet(ctx, name, req.GetRequestId(), req.GetEtag(), func(state *eventsv1.FleetState) ([]proto.Message, error) {
		if err := liveFleet(name, state); err != nil {
			return nil, err
		}
		return events.DecideFleet(name, state, events.DeleteFleet{})
	})
}

func (f *fleetService) GetFleet(ctx context.Context, req *tetherv1.GetFleetRequest) (*tetherv1.Fleet, error) {
	if _, err := events.ParseFleetName(req.GetName()); err != nil {
		return nil, invalidField("name", err.Error())
	}
	if err := f.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	row, err := f.s.opts.Views.Fleet(ctx, req.GetName())
	if err != nil {
		return nil, f.s.archivedNotFound(ctx, req.GetName(), req.GetName(), err)
	}
	if err := liveFleet(req.GetName(), row.State); err != nil {
		return nil, err
	}
	out := fleetToAPI(row.State, row.Sequence, row.Counts)
	revs, err := f.s.opts.Views.FleetRevisions(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	for _, r := range revs {
		out.Status.Revisions = append(out.Status.Revisions, &tetherv1.RevisionCount{Revision: r.Revision, Replicas: r.Live,
			ReadyReplicas: r.Ready, AllocatedReplicas: r.Allocated})
	}
	return out, nil
}

// PauseRollout pauses a fleet's progressing rollout.
func (f *fleetService) PauseRollout(ctx context.Context, req *tetherv1.PauseRolloutRequest) (*tetherv1.Fleet, error) {
	return f.rollout(ctx, req.GetName(), req.GetRequestId(), events.PauseRollout{By: requestedBy(ctx, f.s.producer)})
}

// ResumeRollout resumes a fleet's paused or halted rollout.
func (f *fleetService) ResumeRollout(ctx context.Context, req *tetherv1.ResumeRolloutRequest) (*tetherv1.Fleet, error) {
	return f.rollout(ctx, req.GetName(), req.GetRequestId(), events.ResumeRollout{By: requestedBy(ctx, f.s.producer)})
}

// UndoRollout takes a fleet back to its previous revision.
func (f *fleetService) UndoRollout(ctx context.Context, req *tetherv1.UndoRolloutRequest) (*tetherv1.Fleet, error) {
	return f.rollout(ctx, req.GetName(), req.GetRequestId(), events.UndoRollout{By: requestedBy(ctx, f.s.producer)})
}

// rollout runs a rollout command on a live fleet.
func (f *fleetService) rollout(ctx context.Context, name, requestID string, cmd events.FleetCommand) (*tetherv1.Fleet, error) {
	if _, err := events.ParseFleetName(name); err != nil {
		return nil, invalidField("name", err.Error())
	}
	return f.writeFleet(ctx, name, requestID, "", func(state *eventsv1.FleetState) ([]proto.Message, error) {
		if err := liveFleet(name, state); err != nil {
			return nil, err
		}
		return events.DecideFleet(name, state, cmd)
	})
}

func (f *fleetService) ListFleets(ctx context.Context, req *tetherv1.ListFleetsRequest) (*tetherv1.ListFleetsResponse, error) {
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after, err := decodePageToken(req.GetPageToken(), "fleets")
	if err != nil {
		return nil, err
	}
	if err := f.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	rows, err := f.s.opts.Views.ListFleets(ctx, after, size+1)
	if err != nil {
		return nil, err
	}
	resp := &tetherv1.ListFleetsResponse{}
	bytes := 0
	for i, r := range rows {
		if i == size || full(i, bytes) {
			resp.NextPageToken = encodePageToken(rows[i-1].State.GetName(), "fleets")
			break
		}
		f := fleetToAPI(r.State, r.Sequence, r.Counts)
		resp.Fleets = append(resp.Fleets, f)
		bytes += proto.Size(f)
	}
	return resp, nil
}

// writeFleet runs a fleet command through Server.write and returns the fleet
// as the write left it, folded from the state it decided on (so the response
// does not wait for the projector).
func (f *fleetService) writeFleet(ctx context.Context, name, requestID, etag string,
	decide func(*eventsv1.FleetState) ([]proto.Message, error)) (*tetherv1.Fleet, error) {
	var decided *eventsv1.FleetState
	var counts projections.FleetCounts
	res, err := f.s.write(ctx, name, requestID, etag, func(ctx context.Context, last uint64) ([]proto.Message, error) {
		decided, counts = nil, projections.FleetCounts{}
		if last > 0 {
			row, err := f.s.opts.Views.Fleet(ctx, name)
			if err != nil && !errors.Is(err, projections.ErrNotFound) {
				return nil, err
			}
			decided, counts = row.State, row.Counts
		}
		return decide(decided)
	})
	if err != nil {
		return nil, err
	}
	if res.Replayed {
		// A retried request: answer with the fleet as it is now.
		if err := f.s.waitFresh(ctx, res.Sequence); err != nil {
			return nil, err
		}
		row, err := f.s.opts.Views.Fleet(ctx, name)
		if err != nil {
			return nil, err
		}
		return fleetToAPI(row.State, row.Sequence, row.Counts), nil
	}
	state := decided
	for _, e := range res.Events {
		if state, err = events.ApplyFleet(state, e); err != nil {
			return nil, fmt.Errorf("fold written event: %w", err)
		}
	}
	return fleetToAPI(state, res.Sequence, counts), nil
}

// liveFleet returns NOT_FOUND for an absent or deleted fleet.
func liveFleet(name string, state *eventsv1.FleetState) error {
	if state == nil || state.GetName() == "" || state.GetDeleted() {
		return &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: fmt.Sprintf("%s not found", name)}
	}
	return nil
}

// fleetPaths maps update-mask paths, in proto or JSON spelling, to FleetSpec
// paths. Output-only fields are refused.
func fleetPaths(paths []string) ([]string, error) {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		var parts []string
		for part := range strings.SplitSeq(p, ".") {
			parts = append(parts, snakeCase(part))
		}
		sp := strings.Join(parts, ".")
		switch sp {
		case "name", "status", "etag", "sequence", "create_time", "update_time", "delete_time":
			return nil, invalidField("update_mask", fmt.Sprintf("%q is output only", p))
		}
		out = append(out, sp)
	}
	return out, nil
}

func snakeCase(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
