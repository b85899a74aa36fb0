package agent

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events"
	agonessdkbeta "github.com/tetherhq/tether/proto/agones/dev/sdk/beta"
)

// agonesCounters serves the counters and lists of Agones' SDK
// (agones.dev.sdk.beta.SDK) on a game server's Agones endpoint, beside
// agonesServer, whose interceptors identify the caller. Each change is
// the game server's UpdateCounter or UpdateList: an event of the server,
// refused as Agones refuses it (NOT_FOUND for a name the template does
// not declare or a value not in the list, ALREADY_EXISTS for a value in
// it, OUT_OF_RANGE past a bound), with nothing changed.
type agonesCounters struct {
	agonessdkbeta.UnimplementedSDKServer
	ops sdkOps
}

// GetCounter is one counter as it is now.
func (s *agonesCounters) GetCounter(ctx context.Context, req *agonessdkbeta.GetCounterRequest) (*agonessdkbeta.Counter, error) {
	c, ok := s.ops.GameServer(callerIn(ctx)).GetCounters()[req.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s: the game server has no counter %.70q", events.RefusedCounterNotFound, req.GetName())
	}
	return &agonessdkbeta.Counter{Name: req.GetName(), Count: c.GetCount(), Capacity: c.GetCapacity()}, nil
}

// UpdateCounter sets a counter's capacity, then its count, then moves the
// count by countDiff, as one change.
func (s *agonesCounters) UpdateCounter(ctx context.Context, req *agonessdkbeta.UpdateCounterRequest) (*agonessdkbeta.Counter, error) {
	r := req.GetCounterUpdateRequest()
	if r == nil {
		return nil, status.Error(codes.InvalidArgument, "counterUpdateRequest is required")
	}
	u := events.UpdateCounter{Name: r.GetName(), CountDiff: r.GetCountDiff()}
	if r.GetCount() != nil {
		n := r.GetCount().GetValue()
		u.Count = &n
	}
	if r.GetCapacity() != nil {
		n := r.GetCapacity().GetValue()
		u.Capacity = &n
	}
	c, err := s.ops.UpdateCounter(ctx, callerIn(ctx), u)
	if err != nil {
		return nil, counterError(err)
	}
	return &agonessdkbeta.Counter{Name: u.Name, Count: c.GetCount(), Capacity: c.GetCapacity()}, nil
}

// GetList is one list as it is now.
func (s *agonesCounters) GetList(ctx context.Context, req *agonessdkbeta.GetListRequest) (*agonessdkbeta.List, error) {
	l, ok := s.ops.GameServer(callerIn(ctx)).GetLists()[req.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s: the game server has no list %.70q", events.RefusedListNotFound, req.GetName())
	}
	return &agonessdkbeta.List{Name: req.GetName(), Capacity: l.GetCapacity(), Values: l.GetValues()}, nil
}

// UpdateList replaces the fields of a list its mask names: "capacity"
// and "values" (a value given twice is kept once, at its first place).
// A missing mask, or one that names another field, is INVALID_ARGUMENT; an
// empty one changes nothing and answers the list, as Agones' SDK server
// does. (Agones' Node.js SDK sends an empty mask for setListCapacity: it
// builds the mask from an object where its protobuf library takes an
// array, so its capacity never reaches Agones either.)
func (s *agonesCounters) UpdateList(ctx context.Context, req *agonessdkbeta.UpdateListRequest) (*agonessdkbeta.List, error) {
	list := req.GetList()
	if list == nil {
		return nil, status.Error(codes.InvalidArgument, "list is required")
	}
	if req.GetUpdateMask() == nil {
		return nil, status.Error(codes.InvalidArgument, "update_mask is required: it names the fields to change, capacity, values or both")
	}
	paths := req.GetUpdateMask().GetPaths()
	u := events.UpdateList{Name: list.GetName()}
	for _, p := range paths {
		switch p {
		case "capacity":
			n := list.GetCapacity()
			u.Capacity = &n
		case "values":
			u.SetValues = true
			u.Values = distinct(list.GetValues())
		default:
			return nil, status.Errorf(codes.InvalidArgument, "update_mask names %.70q: a list's fields to update are capacity and values", p)
		}
	}
	return s.updateList(ctx, u)
}

// AddListValue adds one value at the end of a list.
func (s *agonesCounters) AddListValue(ctx context.Context, req *agonessdkbeta.AddListValueRequest) (*agonessdkbeta.List, error) {
	return s.updateList(ctx, events.UpdateList{Name: req.GetName(), Add: []string{req.GetValue()}})
}

// RemoveListValue takes one value out of a list.
func (s *agonesCounters) RemoveListValue(ctx context.Context, req *agonessdkbeta.RemoveListValueRequest) (*agonessdkbeta.List, error) {
	return s.updateList(ctx, events.UpdateList{Name: req.GetName(), Remove: []string{req.GetValue()}})
}

// updateList makes one list change and answers the list it left.
func (s *agonesCounters) updateList(ctx context.Context, u events.UpdateList) (*agonessdkbeta.List, error) {
	l, err := s.ops.UpdateList(ctx, callerIn(ctx), u)
	if err != nil {
		return nil, counterError(err)
	}
	return &agonessdkbeta.List{Name: u.Name, Capacity: l.GetCapacity(), Values: l.GetValues()}, nil
}

// counterError is a refused counter or list change as Agones' SDK answers
// it; any other error as sdkError says.
func counterError(err error) error {
	var ce *events.CounterError
	if !errors.As(err, &ce) {
		return sdkError(err)
	}
	code := codes.OutOfRange
	switch {
	case errors.Is(ce, events.ErrMissing):
		code = codes.NotFound
	case errors.Is(ce, events.ErrAlreadyExists):
		code = codes.AlreadyExists
	}
	return status.Error(code, ce.Reason+": "+ce.Msg)
}

// distinct is values without repeats, each at its first place.
func distinct(values []string) []string {
	out := make([]string, 0, len(values))
	seen := make(map[string]bool, len(values))
	for _, v := range values {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
