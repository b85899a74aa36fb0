package apiserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// ReasonRequestIDReused is the ErrorInfo reason of a request whose request
// id was already used by a request with another content.
const ReasonRequestIDReused = "REQUEST_ID_REUSED"

// This file holds the checks every request gets before its handler, over
// gRPC and (through the gateway) REST alike: no field this server does not
// know, no enum number its enum does not declare, no NUL byte in a string,
// nothing over the size limits below. It also fingerprints
// requests that carry a request id, so that a retry can be told from a
// different request reusing the id. An allocation's own checks are here
// too (parseAllocation, which its handler runs), so that all of an
// allocation's validation is in one place.

// Size limits of a request.
const (
	// maxEventBytes is the event store's limit on one stored event: NATS's
	// default max_payload.
	maxEventBytes = 1 << 20
	// maxRequestBytes bounds a request's encoded size. What a request
	// carries (a fleet's spec, a player's data) is written into an event,
	// with an envelope around it: a larger request could only fail later,
	// as an internal error of the store.
	maxRequestBytes = maxEventBytes - 64<<10
)

// checkRequest returns an INVALID_ARGUMENT field error for a request too
// large to store, or for the first unknown field or undeclared enum value
// in it.
func checkRequest(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if n := proto.Size(m); n > maxRequestBytes {
		return invalidField(largestField(m.ProtoReflect(), ""), fmt.Sprintf(
			"the request takes %d bytes; at most %d fit in an event of the event store (%d bytes with its envelope)", n, maxRequestBytes, maxEventBytes))
	}
	if err := checkMinSequence(m.ProtoReflect()); err != nil {
		return err
	}
	if err := checkRequestID(m.ProtoReflect()); err != nil {
		return err
	}
	if err := checkMessage(m.ProtoReflect(), ""); err != nil {
		return err
	}
	return checkSizes(req)
}

// checkRequestID refuses a request id over MaxRequestIDBytes.
func checkRequestID(m protoreflect.Message) error {
	fd := m.Descriptor().Fields().ByName("request_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind {
		return nil
	}
	if n := len(m.Get(fd).String()); n > MaxRequestIDBytes {
		return invalidField("request_id", fmt.Sprintf("is %d bytes; at most %d (a UUID is 36)", n, MaxRequestIDBytes))
	}
	return nil
}

// checkMinSequence refuses a negative min_sequence, which reads clamped to
// 0 (no wait) and so answered from views of any age.
func checkMinSequence(m protoreflect.Message) error {
	fd := m.Descriptor().Fields().ByName("min_sequence")
	if fd == nil || fd.Kind() != protoreflect.Int64Kind {
		return nil
	}
	if n := m.Get(fd).Int(); n < 0 {
		return invalidField("min_sequence", fmt.Sprintf("must not be negative, got %d", n))
	}
	return nil
}

// largestField returns the path of the field that takes most of a
// message's size, descending through singular message fields.
func largestField(m protoreflect.Message, path string) string {
	var best protoreflect.FieldDescriptor
	bestSize := -1
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		only := m.New()
		only.Set(fd, v)
		if n := proto.Size(only.Interface()); n > bestSize {
			best, bestSize = fd, n
		}
		return true
	})
	if best == nil {
		return orRequest(path)
	}
	path = joinPath(path, string(best.Name()))
	if best.Kind() == protoreflect.MessageKind && !best.IsList() && !best.IsMap() {
		return largestField(m.Get(best).Message(), path)
	}
	return path
}

// checkMessage walks a message: its unknown fields, then its set fields.
// path is the message's field path in the request ("" for the request).
func checkMessage(m protoreflect.Message, path string) error {
	if raw := m.GetUnknown(); len(raw) > 0 {
		num, _, _ := protowire.ConsumeField(raw)
		at := path
		if at == "" {
			at = string(m.Descriptor().FullName())
		}
		return invalidField(at, fmt.Sprintf("unknown field number %d: this server's %s has no such field (is the client built from a newer API?)",
			num, m.Descriptor().FullName()))
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		err = checkField(fd, v, joinPath(path, string(fd.Name())))
		return err == nil
	})
	return err
}

// checkField checks one set field: each element of a list, each value of
// a map, or the value itself.
func checkField(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) error {
	switch {
	case fd.IsList():
		l := v.List()
		for i := range l.Len() {
			if err := checkValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case fd.IsMap():
		var err error
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			if err = checkString(k.String(), path); err != nil {
				return false
			}
			err = checkValue(fd.MapValue(), mv, fmt.Sprintf("%s[%s]", path, k.String()))
			return err == nil
		})
		return err
	default:
		return checkValue(fd, v, path)
	}
	return nil
}

// checkValue checks a single value of an enum, message or string field.
func checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) error {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		return checkEnum(fd.Enum(), v.Enum(), path)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkMessage(v.Message(), path)
	case protoreflect.StringKind:
		return checkString(v.String(), path)
	}
	return nil
}

// checkString refuses a NUL byte in any string of a request: PostgreSQL's
// text and jsonb cannot hold one, so a request id, a label or a selector
// with one failed as an internal error, or stopped the projector, instead
// of being refused. No field of the API needs one.
func checkString(s, path string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return invalidField(path, "contains a NUL byte, which Tether cannot store")
	}
	return nil
}

// checkEnum refuses an enum number its enum does not declare.
func checkEnum(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber, path string) error {
	if ed.Values().ByNumber(n) != nil {
		return nil
	}
	return invalidField(path, fmt.Sprintf("%d is not a value of %s; use one of %s", n, ed.Name(), enumValueNames(ed)))
}

// enumValueNames lists an enum's values but its zero (unspecified) one.
func enumValueNames(ed protoreflect.EnumDescriptor) string {
	var names []string
	for i := range ed.Values().Len() {
		if v := ed.Values().Get(i); v.Number() != 0 {
			names = append(names, string(v.Name()))
		}
	}
	return strings.Join(names, ", ")
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// fingerprintKey is the context key of a request's fingerprint.
type fingerprintKey struct{}

// requestFingerprint returns the fingerprint of the request being served,
// or "" when it carries no request id (or was not served through the
// interceptors, as in unit tests calling a handler directly).
func requestFingerprint(ctx context.Context) string {
	fp, _ := ctx.Value(fingerprintKey{}).(string)
	return fp
}

// notContent are the request fields a fingerprint leaves out: the request
// id itself, and min_sequence, a hint about how fresh the views must be
// that a retry may raise.
var notContent = []protoreflect.Name{"request_id", "min_sequence"}

// fingerprint returns the SHA-256 (hex) of a request's deterministic
// encoding without its request id, or "" for a request with no request id.
func fingerprint(req any) (string, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return "", nil
	}
	fd := m.ProtoReflect().Descriptor().Fields().ByName("request_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind || m.ProtoReflect().Get(fd).String() == "" {
		return "", nil
	}
	c := proto.Clone(m)
	for _, name := range notContent {
		if f := c.ProtoReflect().Descriptor().Fields().ByName(name); f != nil {
			c.ProtoReflect().Clear(f)
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("fingerprint %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// scopeToCaller makes a request's fingerprint its caller's: with
// authentication, a request id another principal used is refused
// (REQUEST_ID_REUSED) instead of answered with that principal's result,
// such as its allocation's connection details. Without authentication
// (no actor) the fingerprint is the content's alone, as before.
func scopeToCaller(fp, actor string) string {
	if actor == "" {
		return fp
	}
	sum := sha256.Sum256([]byte(actor + "\x00" + fp))
	return hex.EncodeToString(sum[:])
}

// checkFingerprint compares the fingerprint stored with a request id's
// first write with the request being served. An event stored without one
// (written before fingerprints existed) is taken as the same request.
func checkFingerprint(ctx context.Context, requestID, stored string) error {
	fp := requestFingerprint(ctx)
	if fp == "" || stored == "" || fp == stored {
		return nil
	}
	return &apiError{code: codes.InvalidArgument, reason: ReasonRequestIDReused, field: "request_id",
		msg: fmt.Sprintf("request_id: %q was already used by a request with a different content, or by another caller; a retry must repeat the request exactly, as the same caller, and a new request needs a new request id", requestID)}
}

// unaryRequests checks each request and records its fingerprint in the
// context; it runs inside unaryErrors, so its errors become statuses there.
func unaryRequests() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := undecodedRequest(ctx); err != nil {
			return nil, err
		}
		if err := checkQueryHeader(ctx); err != nil {
			return nil, err
		}
		if err := checkRequest(req); err != nil {
			return nil, err
		}
		fp, err := fingerprint(req)
		if err != nil {
			return nil, err
		}
		if fp != "" {
			fp = scopeToCaller(fp, events.ActorFrom(ctx))
			ctx = context.WithValue(ctx, fingerprintKey{}, fp)
		}
		return handler(ctx, req)
	}
}

// streamRequests checks the messages a streaming call receives, among
// them those the server's codec could not unmarshal (codec.go).
func streamRequests(undecoded *undecodedRequests) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := checkQueryHeader(ss.Context()); err != nil {
			return err
		}
		return handler(srv, checkedStream{ss, undecoded})
	}
}

// checkedStream refuses received messages that do not decode, and those
// that checkRequest refuses.
type checkedStream struct {
	grpc.ServerStream
	undecoded *undecodedRequests
}

// RecvMsg receives a message and checks it.
func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.undecoded.take(m); err != nil {
		return err
	}
	return checkRequest(m)
}

// Limits on what a request may carry into the events and views, so that
// no event nears the event store's limit (NATS's 1 MiB max_payload) and no
// listing, view row or index entry grows without bound. Each is checked
// before the handler runs, and a request over one is refused with
// INVALID_ARGUMENT naming the field and the limit; nothing is stored. A
// label's key and value are bounded by events.MaxLabelKeyBytes and
// events.MaxLabelValueBytes; the exec limits of a template
// (MAX_ARG_STRLEN, ARG_MAX) are checked by checkTemplate.
const (
	// MaxRequestIDBytes bounds a request id. Request ids are indexed in the
	// views, whose index entries cannot exceed a few KiB: a longer one
	// stopped the projector for good.
	MaxRequestIDBytes = 256
	// MaxLabels bounds the labels of a fleet or a standalone game server,
	// and the match_labels of one allocation selector (events.MaxLabels:
	// the agent's SDK holds a server's labels to it too).
	MaxLabels = events.MaxLabels
	// MaxSelectors bounds an allocation's selectors: each one is a query of
	// the views.
	MaxSelectors = 32
	// MaxProperties bounds a game session's properties (events.MaxProperties,
	// which a self-allocation through the SDK keeps too), and the next two
	// their keys and values.
	MaxProperties         = events.MaxProperties
	MaxPropertyKeyBytes   = events.MaxPropertyKeyBytes
	MaxPropertyValueBytes = events.MaxPropertyValueBytes
	// MaxPlayerIDBytes bounds a player id.
	MaxPlayerIDBytes = 256
	// MaxPlayerDataBytes bounds one player's opaque player data.
	MaxPlayerDataBytes = 4 << 10
	// MaxGameSessionBytes bounds what an allocation writes into its game
	// session, players and properties together (their encoded size): the
	// session's events add ids, slots and times per player on top.
	MaxGameSessionBytes = 256 << 10
	// MaxCommandBytes bounds a template's command (Linux's PATH_MAX).
	MaxCommandBytes = 4 << 10
	// MaxArgs bounds a template's arguments.
	MaxArgs = 256
	// MaxEnv bounds a template's environment variables.
	MaxEnv = 128
	// MaxEnvNameBytes bounds an environment variable's name.
	MaxEnvNameBytes = 256
	// MaxEnvValueBytes bounds an environment variable's value.
	MaxEnvValueBytes = 4 << 10
	// MaxFleetSpecBytes bounds a fleet's (or a standalone game server's)
	// encoded spec, which every FleetCreated and FleetUpdated event
	// carries whole, and every listing of fleets returns.
	MaxFleetSpecBytes = 256 << 10
	// MaxShutdownDetailBytes bounds the free text of a shutdown, kept in
	// the server's evidence.
	MaxShutdownDetailBytes = 1 << 10
	// MaxCounters and MaxLists bound a template's counters and lists
	// (events.MaxCounters, events.MaxLists), MaxCounterNameBytes the name
	// of one (events.MaxCounterNameBytes).
	MaxCounters         = events.MaxCounters
	MaxLists            = events.MaxLists
	MaxCounterNameBytes = events.MaxCounterNameBytes
	// MaxListValues bounds the values of one list in a template, and those
	// one UpdateGameServerList adds or removes: a list's capacity
	// (events.MaxListCapacity).
	MaxListValues = events.MaxListCapacity
	// MaxListValueBytes bounds a list's value (events.MaxListValueBytes).
	MaxListValueBytes = events.MaxListValueBytes
)

// checkSizes refuses a request over one of the size limits above. An
// update is checked on the fields its mask writes only, so that a fleet
// stored before the limits can still be scaled.
func checkSizes(req any) error {
	switch r := req.(type) {
	case *tetherv1.CreateFleetRequest:
		return checkFleetSizes("fleet", r.GetFleet(), true, true)
	case *tetherv1.UpdateFleetRequest:
		template, labels := maskWrites(r.GetUpdateMask().GetPaths())
		return checkFleetSizes("fleet", r.GetFleet(), template, labels)
	case *tetherv1.CreateGameServerRequest:
		return checkFleetSizes("spec", r.GetSpec(), true, true)
	case *tetherv1.AllocateGameServerRequest:
		return checkAllocationSizes(r)
	case *tetherv1.CreatePlayerSessionRequest:
		return checkPlayerSizes("player_session", r.GetPlayerSession().GetPlayerId(), r.GetPlayerSession().GetPlayerData())
	case *tetherv1.ShutdownGameServerRequest:
		if n := len(r.GetDetail()); n > MaxShutdownDetailBytes {
			return invalidField("detail", fmt.Sprintf("is %d bytes; at most %d", n, MaxShutdownDetailBytes))
		}
	case *tetherv1.UpdateGameServerCounterRequest:
		return checkNameSize("counter", r.GetCounter())
	case *tetherv1.UpdateGameServerListRequest:
		if err := checkNameSize("list", r.GetList()); err != nil {
			return err
		}
		if err := checkValueSizes("add_values", r.GetAddValues()); err != nil {
			return err
		}
		return checkValueSizes("remove_values", r.GetRemoveValues())
	}
	return nil
}

// checkNameSize refuses a counter's or a list's name over
// MaxCounterNameBytes.
func checkNameSize(field, name string) error {
	if n := len(name); n > MaxCounterNameBytes {
		return invalidField(field, fmt.Sprintf("is %d bytes; at most %d", n, MaxCounterNameBytes))
	}
	return nil
}

// checkValueSizes refuses more list values than MaxListValues, or one over
// MaxListValueBytes; field is their field path.
func checkValueSizes(field string, values []string) error {
	if n := len(values); n > MaxListValues {
		return invalidField(field, fmt.Sprintf("%d values; at most %d (a list's most)", n, MaxListValues))
	}
	for i, v := range values {
		if n := len(v); n > MaxListValueBytes {
			return invalidField(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("is %d bytes; at most %d", n, MaxListValueBytes))
		}
	}
	return nil
}

// checkCounterSizes checks how many counters and lists a template has,
// their names, and the values of its lists; path is the template's field
// path.
func checkCounterSizes(path string, t *tetherv1.GameServerTemplate) error {
	if n := len(t.GetCounters()); n > MaxCounters {
		return invalidField(path+".counters", fmt.Sprintf("%d counters; at most %d", n, MaxCounters))
	}
	if n := len(t.GetLists()); n > MaxLists {
		return invalidField(path+".lists", fmt.Sprintf("%d lists; at most %d", n, MaxLists))
	}
	for _, k := range slices.Sorted(maps.Keys(t.GetCounters())) {
		if len(k) > MaxCounterNameBytes {
			return invalidField(path+".counters", fmt.Sprintf("a counter's name is %d bytes; at most %d", len(k), MaxCounterNameBytes))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.GetLists())) {
		if len(k) > MaxCounterNameBytes {
			return invalidField(path+".lists", fmt.Sprintf("a list's name is %d bytes; at most %d", len(k), MaxCounterNameBytes))
		}
		if err := checkValueSizes(fmt.Sprintf("%s.lists[%s].values", path, k), t.GetLists()[k].GetValues()); err != nil {
			return err
		}
	}
	return nil
}

// maskWrites reports whether an update mask writes a fleet's template and
// its labels (an empty mask writes every field).
func maskWrites(mask []string) (template, labels bool) {
	if len(mask) == 0 {
		return true, true
	}
	paths, err := fleetPaths(mask)
	if err != nil {
		return false, false // refused by the handler
	}
	return slices.Contains(paths, "template"), slices.Contains(paths, "labels")
}

// checkFleetSizes checks the template and the labels of a fleet (or a
// standalone server's spec) under prefix, those that the request writes,
// and then their encoded size with the rest of the spec.
func checkFleetSizes(prefix string, f *tetherv1.Fleet, template, labels bool) error {
	if labels {
		if n := len(f.GetLabels()); n > MaxLabels {
			return invalidField(prefix+".labels", fmt.Sprintf("%d labels; at most %d", n, MaxLabels))
		}
	}
	if template {
		if err := checkTemplateSizes(prefix+".template", f.GetTemplate()); err != nil {
			return err
		}
	}
	// The spec as the events carry it: the fields written, without the
	// output-only ones a client may have sent back.
	written := &tetherv1.Fleet{
		Replicas: f.GetReplicas(), Health: f.GetHealth(), SdkDisconnectGraceSeconds: f.GetSdkDisconnectGraceSeconds(),
		PlayerSessions: f.GetPlayerSessions(), Scheduling: f.GetScheduling(),
	}
	if template {
		written.Template = f.GetTemplate()
	}
	if labels {
		written.Labels = f.GetLabels()
	}
	if n := proto.Size(specFromAPI(written)); n > MaxFleetSpecBytes {
		return invalidField(largestField(written.ProtoReflect(), prefix), fmt.Sprintf(
			"the spec takes %d bytes encoded; at most %d (every fleet event carries it whole)", n, MaxFleetSpecBytes))
	}
	return nil
}

// checkTemplateSizes checks a template's command, arguments and
// environment against their limits; path is the template's field path.
func checkTemplateSizes(path string, t *tetherv1.GameServerTemplate) error {
	if n := len(t.GetCommand()); n > MaxCommandBytes {
		return invalidField(path+".command", fmt.Sprintf("is %d bytes; at most %d", n, MaxCommandBytes))
	}
	if n := len(t.GetArgs()); n > MaxArgs {
		return invalidField(path+".args", fmt.Sprintf("%d arguments; at most %d", n, MaxArgs))
	}
	if n := len(t.GetEnv()); n > MaxEnv {
		return invalidField(path+".env", fmt.Sprintf("%d variables; at most %d", n, MaxEnv))
	}
	for _, k := range slices.Sorted(maps.Keys(t.GetEnv())) {
		switch v := t.GetEnv()[k]; {
		case len(k) > MaxEnvNameBytes:
			return invalidField(path+".env", fmt.Sprintf("a variable's name is %d bytes; at most %d", len(k), MaxEnvNameBytes))
		case len(v) > MaxEnvValueBytes:
			return invalidField(fmt.Sprintf("%s.env[%s]", path, k), fmt.Sprintf("is %d bytes; at most %d", len(v), MaxEnvValueBytes))
		}
	}
	return checkCounterSizes(path, t)
}

// checkAllocationSizes checks an allocation's selectors, its game
// session's properties and its players.
func checkAllocationSizes(r *tetherv1.AllocateGameServerRequest) error {
	if n := len(r.GetSelectors()); n > MaxSelectors {
		return invalidField("selectors", fmt.Sprintf("%d selectors; at most %d", n, MaxSelectors))
	}
	if err := checkSelectorSizes("selector", r.GetSelector()); err != nil {
		return err
	}
	for i, sel := range r.GetSelectors() {
		if err := checkSelectorSizes(fmt.Sprintf("selectors[%d]", i), sel); err != nil {
			return err
		}
	}
	if n := len(r.GetLabels()); n > events.MaxLabels {
		return invalidField("labels", fmt.Sprintf("%d labels; a game server holds at most %d", n, events.MaxLabels))
	}
	if n := len(r.GetAnnotations()); n > events.MaxAnnotations {
		return invalidField("annotations", fmt.Sprintf("%d annotations; a game server holds at most %d", n, events.MaxAnnotations))
	}
	props := r.GetGameSession().GetProperties()
	if n := len(props); n > MaxProperties {
		return invalidField("game_session.properties", fmt.Sprintf("%d properties; at most %d", n, MaxProperties))
	}
	for _, k := range slices.Sorted(maps.Keys(props)) {
		switch v := props[k]; {
		case len(k) > MaxPropertyKeyBytes:
			return invalidField("game_session.properties", fmt.Sprintf("a property's key is %d bytes; at most %d", len(k), MaxPropertyKeyBytes))
		case len(v) > MaxPropertyValueBytes:
			return invalidField(fmt.Sprintf("game_session.properties[%s]", k), fmt.Sprintf("is %d bytes; at most %d", len(v), MaxPropertyValueBytes))
		}
	}
	for i, p := range r.GetPlayers() {
		if err := checkPlayerSizes(fmt.Sprintf("players[%d]", i), p.GetPlayerId(), p.GetPlayerData()); err != nil {
			return err
		}
	}
	session := &tetherv1.AllocateGameServerRequest{GameSession: r.GetGameSession(), Players: r.GetPlayers()}
	if n := proto.Size(session); n > MaxGameSessionBytes {
		return invalidField(largestField(session.ProtoReflect(), ""), fmt.Sprintf(
			"the game session's players and properties take %d bytes encoded; at most %d", n, MaxGameSessionBytes))
	}
	return nil
}

// maxAllocPlayers bounds the players of one allocation.
const maxAllocPlayers = 1000

// allocationRequest is what a checked allocation request looks for.
type allocationRequest struct {
	// fleet is the fleet's resource name; "" for any fleet (fleets/-).
	fleet string
	// distributed is true for DISTRIBUTED scheduling, false for PACKED.
	distributed bool
	// priorities rank the servers each query matches (allocationrooms.go).
	priorities []projections.Priority
	// queries are the selectors' views queries, tried in order; there is
	// at least one (an empty selector matches every READY server).
	queries []projections.AllocationQuery
	// counters and lists are changed with the allocation, in name order.
	counters []events.CounterAction
	lists    []events.ListAction
}

// asksForRoom reports whether the allocation selects by, or changes, a
// server's counters, lists or tracked players, or selects ALLOCATED
// servers: then "no READY server" would be the wrong answer, the room is
// what is missing.
func (r allocationRequest) asksForRoom() bool {
	return len(r.counters)+len(r.lists) > 0 || slices.ContainsFunc(r.queries, func(q projections.AllocationQuery) bool {
		return q.Allocated || len(q.Counters)+len(q.Lists) > 0 || q.Players != nil
	})
}

// parseAllocation checks what an allocation request asks for, beyond the
// sizes every request's interceptor checks (checkAllocationSizes): its
// parent, its scheduling, its players (each with an id, none twice, at
// most maxAllocPlayers), seats for them, one of selector and selectors,
// its priorities and its counter and list actions (allocationrooms.go). A
// request with an ALLOCATED selector, whose match joins a running game
// session, creates no session: it may not name players or a session.
func parseAllocation(req *tetherv1.AllocateGameServerRequest) (allocationRequest, error) {
	var out allocationRequest
	if req.GetParent() != "fleets/-" {
		if _, err := events.ParseFleetName(req.GetParent()); err != nil {
			return out, invalidField("parent", err.Error())
		}
		out.fleet = req.GetParent()
	}
	switch req.GetScheduling() {
	case "", "PACKED":
	case "DISTRIBUTED":
		out.distributed = true
	default:
		return out, invalidField("scheduling", fmt.Sprintf("%q: must be PACKED or DISTRIBUTED", req.GetScheduling()))
	}
	players := req.GetPlayers()
	if len(players) > maxAllocPlayers {
		return out, invalidField("players", fmt.Sprintf("at most %d players per allocation", maxAllocPlayers))
	}
	if err := checkPlayerIDs(players); err != nil {
		return out, err
	}
	if n := req.GetGameSession().GetMaxPlayers(); n < 0 || n > 0 && int(n) < len(players) {
		return out, invalidField("game_session.max_players", fmt.Sprintf("%d seats cannot hold %d players", n, len(players)))
	}
	var err error
	if out.counters, out.lists, err = parseActions(req); err != nil {
		return out, err
	}
	if out.priorities, err = parsePriorities(req, out.distributed, out.counters, out.lists); err != nil {
		return out, err
	}
	selectors, path := req.GetSelectors(), "selectors"
	switch {
	case req.GetSelector() != nil && len(req.GetSelectors()) > 0:
		return out, invalidField("selectors", "give selector or selectors, not both")
	case req.GetSelector() != nil:
		selectors, path = []*tetherv1.LabelSelector{req.GetSelector()}, "selector"
	case len(req.GetSelectors()) == 0:
		selectors = []*tetherv1.LabelSelector{{}}
	}
	for i, sel := range selectors {
		f := path
		if path == "selectors" {
			f = fmt.Sprintf("selectors[%d]", i)
		}
		q, err := selectorQuery(f, out, sel)
		if err != nil {
			return out, err
		}
		if q.Allocated {
			switch {
			case len(players) > 0:
				return out, invalidField("players", f+" allocates into a running game session, which an allocation adds no seats to: name the players with a list action")
			case req.GetGameSession() != nil:
				return out, invalidField("game_session", f+" allocates into a running game session: an allocation with an ALLOCATED selector creates none")
			}
		}
		out.queries = append(out.queries, q)
	}
	return out, nil
}

// checkPlayerIDs refuses an allocation's player without an id, and a
// player id given twice: it took two seats.
func checkPlayerIDs(players []*tetherv1.PlayerRequest) error {
	first := make(map[string]int, len(players))
	for i, p := range players {
		field := fmt.Sprintf("players[%d].player_id", i)
		if p.GetPlayerId() == "" {
			return invalidField(field, "must be set")
		}
		if j, seen := first[p.GetPlayerId()]; seen {
			return invalidField(field, fmt.Sprintf("%q is players[%d]'s too: a player takes one seat", p.GetPlayerId(), j))
		}
		first[p.GetPlayerId()] = i
	}
	return nil
}

// checkSelectorSizes refuses a selector with more labels than a game
// server can have, or a label no game server can have.
func checkSelectorSizes(path string, sel *tetherv1.LabelSelector) error {
	labels := sel.GetMatchLabels()
	if n := len(labels); n > MaxLabels {
		return invalidField(path+".match_labels", fmt.Sprintf("%d labels; at most %d", n, MaxLabels))
	}
	for k, v := range labels {
		if len(k) > events.MaxLabelKeyBytes || len(v) > events.MaxLabelValueBytes {
			return invalidField(path+".match_labels", fmt.Sprintf(
				"label keys are at most %d bytes and values at most %d: no game server has this label", events.MaxLabelKeyBytes, events.MaxLabelValueBytes))
		}
	}
	return nil
}

// checkPlayerSizes checks a player's id and data; path is the player's
// field path.
func checkPlayerSizes(path, id, data string) error {
	if n := len(id); n > MaxPlayerIDBytes {
		return invalidField(path+".player_id", fmt.Sprintf("is %d bytes; at most %d", n, MaxPlayerIDBytes))
	}
	if n := len(data); n > MaxPlayerDataBytes {
		return invalidField(path+".player_data", fmt.Sprintf("is %d bytes; at most %d", n, MaxPlayerDataBytes))
	}
	return nil
}
