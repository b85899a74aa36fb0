package apiserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	agonesallocation "github.com/tetherhq/tether/proto/allocation"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// agonesFleetLabel is the label by which an Agones allocation names a
// fleet.
const agonesFleetLabel = "agones.dev/fleet"

// DefaultInstallation is Options.Installation's default, the source of an
// Agones allocation's answer: Agones' word for "allocated by the
// installation asked", multi-cluster allocation being out of scope.
const DefaultInstallation = "local"

// agonesAllocationService serves Agones' allocation API
// (allocation.AllocationService/Allocate, REST POST /gameserverallocation)
// on Tether's allocator: each of the request's selectors, in order, is one
// AllocateGameServer (its agones.dev/fleet label the parent, its other
// labels the selector, the metadata set with the allocation), and the first
// that finds a server answers. docs/agones.md, "Allocation", says what is
// served and what is refused.
type agonesAllocationService struct {
	agonesallocation.UnimplementedAllocationServiceServer
	alloc  *allocationService
	source string // Options.Installation
}

// Allocate allocates the first server a selector matches, or answers
// RESOURCE_EXHAUSTED when none does.
func (g *agonesAllocationService) Allocate(ctx context.Context, req *agonesallocation.AllocationRequest) (*agonesallocation.AllocationResponse, error) {
	treqs, err := agonesRequests(req)
	if err != nil {
		return nil, err
	}
	for _, treq := range treqs {
		resp, err := g.alloc.AllocateGameServer(ctx, treq)
		if err == nil {
			return agonesAllocationResponse(resp, g.source), nil
		}
		if !matchesNone(err) {
			return nil, err
		}
	}
	return nil, &apiError{code: codes.ResourceExhausted, reason: ReasonNoReadyGameServer,
		msg: "no game server matches any of the request's selectors with room for the allocation"}
}

// agonesRequests are an Agones allocation request as Tether's, one per
// selector in order, each checked for size (checkAllocationSizes), or why
// the request is refused.
func agonesRequests(req *agonesallocation.AllocationRequest) ([]*tetherv1.AllocateGameServerRequest, error) {
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
	priorities, counters, lists := agonesRooms(req)
	var out []*tetherv1.AllocateGameServerRequest
	for i, sel := range agonesSelectors(req) {
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
			Parent: parent, Selector: agonesSelector(sel, labels), Scheduling: scheduling,
			Labels: meta.GetLabels(), Annotations: meta.GetAnnotations(),
			Priorities: priorities, CounterActions: counters, ListActions: lists,
		}
		if err := checkAllocationSizes(treq); err != nil {
			return nil, err
		}
		out = append(out, treq)
	}
	return out, nil
}

// agonesSelector is an Agones selector as Tether's, its fleet label taken
// out (labels).
func agonesSelector(sel *agonesallocation.GameServerSelector, labels map[string]string) *tetherv1.LabelSelector {
	out := &tetherv1.LabelSelector{MatchLabels: labels}
	if sel.GetGameServerState() == agonesallocation.GameServerSelector_ALLOCATED {
		out.GameServerState = "ALLOCATED"
	}
	for name, c := range sel.GetCounters() {
		if out.Counters == nil {
			out.Counters = map[string]*tetherv1.CounterSelector{}
		}
		out.Counters[name] = &tetherv1.CounterSelector{MinCount: c.GetMinCount(), MaxCount: c.GetMaxCount(),
			MinAvailable: c.GetMinAvailable(), MaxAvailable: c.GetMaxAvailable()}
	}
	for name, l := range sel.GetLists() {
		if out.Lists == nil {
			out.Lists = map[string]*tetherv1.ListSelector{}
		}
		out.Lists[name] = &tetherv1.ListSelector{ContainsValue: l.GetContainsValue(), MinAvailable: l.GetMinAvailable(), MaxAvailable: l.GetMaxAvailable()}
	}
	if p := sel.GetPlayers(); p != nil {
		// Agones' bounds are unsigned; a server tracks at most
		// events.MaxTrackedPlayers, so a larger min matches none and a
		// larger max bounds nothing.
		out.Players = &tetherv1.PlayerSelector{MinAvailable: int64(min(p.GetMinAvailable(), events.MaxTrackedPlayers+1))}
		if m := p.GetMaxAvailable(); m <= events.MaxTrackedPlayers {
			out.Players.MaxAvailable = int64(m)
		}
	}
	return out
}

// agonesRooms are an Agones request's priorities and counter and list
// actions as Tether's. Agones' action words ("Increment", "Decrement")
// are taken in any case.
func agonesRooms(req *agonesallocation.AllocationRequest) ([]*tetherv1.AllocationPriority, map[string]*tetherv1.CounterAction, map[string]*tetherv1.ListAction) {
	var priorities []*tetherv1.AllocationPriority
	for _, p := range req.GetPriorities() {
		tp := &tetherv1.AllocationPriority{Type: "COUNTER", Key: p.GetKey(), Order: "ASCENDING"}
		if p.GetType() == agonesallocation.Priority_List {
			tp.Type = "LIST"
		}
		if p.GetOrder() == agonesallocation.Priority_Descending {
			tp.Order = "DESCENDING"
		}
		priorities = append(priorities, tp)
	}
	var counters map[string]*tetherv1.CounterAction
	for name, c := range req.GetCounters() {
		if counters == nil {
			counters = map[string]*tetherv1.CounterAction{}
		}
		ta := &tetherv1.CounterAction{Action: strings.ToUpper(c.GetAction().GetValue()), Amount: c.GetAmount().GetValue()}
		if c.GetCapacity() != nil {
			ta.Capacity = proto.Int64(c.GetCapacity().GetValue())
		}
		counters[name] = ta
	}
	var lists map[string]*tetherv1.ListAction
	for name, l := range req.GetLists() {
		if lists == nil {
			lists = map[string]*tetherv1.ListAction{}
		}
		ta := &tetherv1.ListAction{AddValues: l.GetAddValues(), DeleteValues: l.GetDeleteValues()}
		if l.GetCapacity() != nil {
			ta.Capacity = proto.Int64(l.GetCapacity().GetValue())
		}
		lists[name] = ta
	}
	return priorities, counters, lists
}

// checkAgonesUnserved refuses what Tether's allocator does not serve,
// rather than allocate a server the request would not have matched:
// multi-cluster allocation (out of scope).
func checkAgonesUnserved(req *agonesallocation.AllocationRequest) error {
	if req.GetMultiClusterSetting().GetEnabled() {
		return invalidField("multiClusterSetting.enabled", "multi-cluster allocation is out of Tether's scope: ask each installation")
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
func agonesAllocationResponse(resp *tetherv1.AllocateGameServerResponse, source string) *agonesallocation.AllocationResponse {
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
		Source:         source,
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
