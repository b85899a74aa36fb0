package apiserver

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// hostService implements tetherv1.HostServiceServer.
type hostService struct {
	tetherv1.UnimplementedHostServiceServer
	s *Server
}

func (h *hostService) ListHosts(ctx context.Context, req *tetherv1.ListHostsRequest) (*tetherv1.ListHostsResponse, error) {
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after, err := decodePageToken(req.GetPageToken(), "hosts")
	if err != nil {
		return nil, err
	}
	if err := h.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	rows, err := h.s.opts.Views.Hosts(ctx, after, size+1)
	if err != nil {
		return nil, err
	}
	resp := &tetherv1.ListHostsResponse{}
	for i, r := range rows {
		if i == size {
			resp.NextPageToken = encodePageToken(rows[i-1].State.GetName(), "hosts")
			break
		}
		host := hostToAPI(r)
		h.s.beats.freshenHost(host)
		resp.Hosts = append(resp.Hosts, host)
	}
	return resp, nil
}

func (h *hostService) GetHost(ctx context.Context, req *tetherv1.GetHostRequest) (*tetherv1.Host, error) {
	if _, err := events.ParseHostName(req.GetName()); err != nil {
		return nil, invalidField("name", err.Error())
	}
	if err := h.s.waitFresh(ctx, uint64(max(req.GetMinSequence(), 0))); err != nil {
		return nil, err
	}
	row, err := h.s.opts.Views.Host(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	host := hostToAPI(row)
	h.s.beats.freshenHost(host)
	return host, nil
}

// CordonHost stops new game servers going to a host.
func (h *hostService) CordonHost(ctx context.Context, req *tetherv1.CordonHostRequest) (*tetherv1.Host, error) {
	return h.writeHost(ctx, req.GetName(), req.GetRequestId(), func(by string) events.HostCommand { return events.CordonHost{By: by} })
}

// UncordonHost lets a host take new game servers again, ending its drain.
func (h *hostService) UncordonHost(ctx context.Context, req *tetherv1.UncordonHostRequest) (*tetherv1.Host, error) {
	return h.writeHost(ctx, req.GetName(), req.GetRequestId(), func(by string) events.HostCommand { return events.UncordonHost{By: by} })
}

// DrainHost cordons a host and has its fleets move its game servers that
// hold no match elsewhere (the controller does it).
func (h *hostService) DrainHost(ctx context.Context, req *tetherv1.DrainHostRequest) (*tetherv1.Host, error) {
	return h.writeHost(ctx, req.GetName(), req.GetRequestId(), func(by string) events.HostCommand { return events.DrainHost{By: by} })
}

// writeHost runs an operator's command on a registered host through
// Server.write, by the caller, and returns the host as the write left it.
func (h *hostService) writeHost(ctx context.Context, name, requestID string, command func(by string) events.HostCommand) (*tetherv1.Host, error) {
	if _, err := events.ParseHostName(name); err != nil {
		return nil, invalidField("name", err.Error())
	}
	var decided projections.HostRow
	by := requestedBy(ctx, h.s.producer)
	res, err := h.s.write(ctx, name, requestID, "", func(ctx context.Context, last uint64) ([]proto.Message, error) {
		decided = projections.HostRow{}
		if last > 0 {
			row, err := h.s.opts.Views.Host(ctx, name)
			if err != nil && !errors.Is(err, projections.ErrNotFound) {
				return nil, err
			}
			decided = row
		}
		switch decided.State.GetStatus() {
		case eventsv1.HostStatus_HOST_STATUS_UNSPECIFIED, eventsv1.HostStatus_HOST_STATUS_DEREGISTERED:
			return nil, &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: fmt.Sprintf("%s not found", name)}
		}
		return events.DecideHost(name, decided.State, command(by))
	})
	if err != nil {
		return nil, err
	}
	if res.Replayed {
		if err := h.s.waitFresh(ctx, res.Sequence); err != nil {
			return nil, err
		}
		row, err := h.s.opts.Views.Host(ctx, name)
		if err != nil {
			return nil, err
		}
		host := hostToAPI(row)
		h.s.beats.freshenHost(host)
		return host, nil
	}
	row := decided
	for _, e := range res.Events {
		if row.State, err = events.ApplyHost(row.State, e); err != nil {
			return nil, fmt.Errorf("fold written event: %w", err)
		}
	}
	row.Sequence = res.Sequence
	// Its last heartbeat as a read shows it: the live beat, when later.
	host := hostToAPI(row)
	h.s.beats.freshenHost(host)
	return host, nil
}

func hostToAPI(r projections.HostRow) *tetherv1.Host {
	s := r.State
	return &tetherv1.Host{
		Name:              s.GetName(),
		State:             tetherv1.Host_State(s.GetStatus()),
		Capacity:          s.GetCapacity(),
		AllocatedSlots:    r.Used,
		Labels:            s.GetLabels(),
		Address:           s.GetAddress(),
		AgentVersion:      s.GetAgentVersion(),
		LastHeartbeatTime: s.GetLastHeartbeatTime(),
		UpdateTime:        s.GetUpdateTime(),
		Sequence:          int64(r.Sequence),
		Cordoned:          s.GetCordoned(),
		CordonedBy:        s.GetCordonedBy(),
		CordonTime:        s.GetCordonTime(),
	}
}
