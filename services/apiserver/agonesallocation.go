package apiserver

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	agonesallocation "github.com/tetherhq/tether/proto/allocation"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// agonesFleetLabel is the label by which an Agones allocation names a
// fleet.
const agonesFleetLabel = "agones.dev/fleet"

// agonesSource is the answer's source: Agones' word for "allocated by the
// installation asked", multi-cluster allocation being out of scope.
const agonesSource = "local"

// agonesAllocationService serves Agones' allocation API
// (allocation.AllocationService/Allocate, REST POST /gameserverallocation)
// on Tether's allocator: each of the request's selectors, in order, is one
// AllocateGameServer (its agones.dev/fleet label the parent, its other
// labels the selector, the metadata set with the allocation), and the first
// that finds a server answers. docs/agones.md, "Allocation", says what is
// served and what is refused.
type agonesAllocationService struct {
	agonesallocation.UnimplementedAllocationServiceServer
	alloc *allocationService
}

// Allocate allocates the first server a selector matches, or answers
// RESOURCE_EXHAUSTED when none does.
func (g *agonesAllocationService) Allocate(ctx context.Context, req *agonesallocation.AllocationRequest) (*agonesallocation.AllocationResponse, error) {
	if err := checkAgonesUnserved(req); err != nil {
		return nil, err
	}
	meta := req.GetMetadata()
	if meta == nil {
		meta = req.GetMetaPatch()
	}
	scheduling := "PACKED"
	if req.GetScheduling() == agonesallocation.AllocationRequest_Distributed {
		scheduling = "DISTRIBUTED"
	}
	for i, sel := range agonesSelectors(req) {
		if sel.GetGameServerState() == agonesallocation.GameServerSelector_ALLOCATED {
			continue // allocation into ALLOCATED servers is not served yet: it matches none
		}
		labels := maps.Clone(sel.GetMatchLabels())
		parent := "fleets/-"
		if fleet, ok := labels[agonesFleetLabel]; ok {
			delete(labels, agonesFleetLabel)
			if err := events.CheckID(fleet); err != nil {
				return nil, invalidField(fmt.Sprintf("gameServerSelectors[%d].matchLabels[%s]", i, agonesFleetLabel), err.Error())
			}
			parent = events.FleetName(fleet)
		}
		treq := &tetherv1.AllocateGameServerRequest{
			Parent: parent, Selector: &tetherv1.LabelSelector{MatchLabels: labels}, Scheduling: scheduling,
			Labels: meta.GetLabels(), Annotations: meta.GetAnnotations(),
		}
		if err := checkAllocationSizes(treq); err != nil {
			return nil, err
		}
		resp, err := g.alloc.AllocateGameServer(ctx, treq)
		if err == nil {
			return agonesAllocationResponse(resp), nil
		}
		if !matchesNone(err) {
			return nil, err
		}
	}
	return nil, &apiError{code: codes.ResourceExhausted, reason: ReasonNoReadyGameServer,
		msg: "no READY game server matches any of the request's selectors"}
}

// checkAgonesUnserved refuses what Tether's allocator does not serve yet,
// rather than allocate a server the request would not have matched:
// multi-cluster allocation (out of scope), priorities, counter and list
// actions, and player, counter and list selectors.
func checkAgonesUnserved(req *agonesallocation.AllocationRequest) error {
	unserved := func(field, what string) error {
		return &apiError{code: codes.Unimplemented, reason: ReasonInvalidArgument, field: field,
			msg: what + " in an Agones allocation is not served by Tether yet (docs/agones.md)"}
	}
	switch {
	case req.GetMultiClusterSetting().GetEnabled():
		return invalidField("multiClusterSetting.enabled", "multi-cluster allocation is out of Tether's scope: ask each installation")
	case len(req.GetPriorities()) > 0:
		return unserved("priorities", "ordering by a counter or a list")
	case len(req.GetCounters()) > 0:
		return unserved("counters", "a counter action")
	case len(req.GetLists()) > 0:
		return unserved("lists", "a list action")
	}
	for i, sel := range agonesSelectors(req) {
		switch {
		case sel.GetPlayers() != nil:
			return unserved(fmt.Sprintf("gameServerSelectors[%d].players", i), "a player selector")
		case len(sel.GetCounters()) > 0:
			return unserved(fmt.Sprintf("gameServerSelectors[%d].counters", i), "a counter selector")
		case len(sel.GetLists()) > 0:
			return unserved(fmt.Sprintf("gameServerSelectors[%d].lists", i), "a list selector")
		}
	}
	return nil
}

// agonesSelectors are the request's selectors in order: gameServerSelectors,
// else the older required and preferred ones, else one that matches any
// server.
func agonesSelectors(req *agonesallocation.AllocationRequest) []*agonesallocation.GameServerSelector {
	if s := req.GetGameServerSelectors(); len(s) > 0 {
		return s
	}
	var out []*agonesallocation.GameServerSelector
	if r := req.GetRequiredGameServerSelector(); r != nil { //nolint:staticcheck // Agones' older field, still sent by older matchmakers
		out = append(out, r)
	}
	out = append(out, req.GetPreferredGameServerSelectors()...) //nolint:staticcheck // as above
	if len(out) == 0 {
		out = []*agonesallocation.GameServerSelector{{}}
	}
	return out
}

// matchesNone reports whether an allocation's error means that its
// selector matched no server (then the next is tried): no READY server,
// or a fleet that does not exist.
func matchesNone(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.code == codes.ResourceExhausted || ae.code == codes.NotFound
	}
	return errors.Is(err, projections.ErrNotFound)
}

// agonesAllocationResponse is Tether's allocation as Agones answers it.
func agonesAllocationResponse(resp *tetherv1.AllocateGameServerResponse) *agonesallocation.AllocationResponse {
	gs := resp.GetGameServer()
	_, id, _ := events.ParseGameServerName(gs.GetName()) // the allocator's own name: valid
	host := gs.GetHost()
	if h, err := events.ParseHostName(host); err == nil {
		host = h
	}
	out := &agonesallocation.AllocationResponse{
		GameServerName: id,
		Address:        resp.GetEndpoint().GetAddress(),
		NodeName:       host,
		Source:         agonesSource,
		Metadata: &agonesallocation.AllocationResponse_GameServerMetadata{
			Labels: gs.GetLabels(), Annotations: gs.GetAnnotations(),
		},
	}
	if a := out.Address; a != "" {
		out.Addresses = []*agonesallocation.AllocationResponse_GameServerStatusAddress{{Type: "InternalIP", Address: a}}
	}
	for _, p := range resp.GetEndpoint().GetPorts() {
		out.Ports = append(out.Ports, &agonesallocation.AllocationResponse_GameServerStatusPort{Name: p.GetName(), Port: p.GetPort()})
	}
	for name, c := range gs.GetCounters() {
		if out.Counters == nil {
			out.Counters = map[string]*agonesallocation.AllocationResponse_CounterStatus{}
		}
		out.Counters[name] = &agonesallocation.AllocationResponse_CounterStatus{
			Count: wrapperspb.Int64(c.GetCount()), Capacity: wrapperspb.Int64(c.GetCapacity()),
		}
	}
	for name, l := range gs.GetLists() {
		if out.Lists == nil {
			out.Lists = map[string]*agonesallocation.AllocationResponse_ListStatus{}
		}
		out.Lists[name] = &agonesallocation.AllocationResponse_ListStatus{Values: l.GetValues(), Capacity: wrapperspb.Int64(l.GetCapacity())}
	}
	return out
}
