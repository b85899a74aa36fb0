package apiserver

import (
	"context"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
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
		resp.Hosts = append(resp.Hosts, hostToAPI(r))
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
	return hostToAPI(row), nil
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
	}
}
