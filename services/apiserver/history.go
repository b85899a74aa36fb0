package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// historyService implements tetherv1.HistoryServiceServer: answers computed
// from the event stream, not from the views, and from the archive for the
// aggregates whose histories were archived (archive.go). ListEvents,
// GetStateAt and Explain are in this file; WatchEvents in watch.go.
type historyService struct {
	tetherv1.UnimplementedHistoryServiceServer
	s *Server
}

// Explain's chain holds at most this many events (the latest).
const maxChain = 50

// resource is a resource name resolved to where its history lives and how
// it folds.
type resource struct {
	name    string
	subject string
	// player is the player session id when the resource is a player
	// session: its events are those of its game session that concern it.
	player string
	kind   string
}

// resolve maps a resource name to its history; a game server's is on its
// own subject, as the views show it (Server.subjectOf).
func (h *historyService) resolve(ctx context.Context, name string) (resource, error) {
	r, err := resolve(name)
	if err != nil || r.kind != events.KindGameServer {
		return r, err
	}
	if r.subject, err = h.s.subjectOf(ctx, name); err != nil {
		return r, err
	}
	return r, nil
}

// resolve maps a resource name to its history, on events.Subject of its
// name.
func resolve(name string) (resource, error) {
	r := resource{name: name}
	switch {
	case strings.HasPrefix(name, "gameSessions/") && strings.Contains(name, "/playerSessions/"):
		gsess, ps, err := events.ParsePlayerSessionName(name)
		if err != nil {
			return r, invalidField("name", err.Error())
		}
		r.subject, r.player, r.kind = events.MustSubject(events.GameSessionName(gsess)), ps, events.KindPlayerSession
		return r, nil
	}
	subject, err := events.Subject(name)
	if err != nil {
		return r, invalidField("name", err.Error())
	}
	r.subject = subject
	r.kind = events.KindOf(subject)
	return r, nil
}

// concerns reports whether an event of the resource's subject is about it
// (always, except for a player session within its game session's history).
func (r resource) concerns(e events.Envelope) bool {
	if r.player == "" {
		return true
	}
	switch d := e.Data.(type) {
	case *eventsv1.GameSessionCreated:
		return slices.ContainsFunc(d.GetPlayers(), func(p *eventsv1.PlayerSeat) bool { return p.GetPlayerSession() == r.player })
	case *eventsv1.PlayerSessionReserved:
		return d.GetSeat().GetPlayerSession() == r.player
	case *eventsv1.GameSessionEnded:
		return true // completes every seat still held
	}
	id, ok := events.PlayerSessionOf(e.Data)
	return ok && id == r.player
}

// history is a resource's events, oldest first, and the archive segments
// those read from the archive came from.
type history struct {
	evs      []events.Envelope
	segments map[uint64]string // sequence → segment; nil when all came from the stream
	// ends are the last sequences of the archived stretches: each ended
	// one life of the aggregate, and an event after it starts the next (a
	// fleet created again under an archived fleet's name).
	ends []uint64
}

// life returns the events of the life that evs[i] belongs to, up to it:
// what its state folds from (the views folded each life from nothing, its
// row gone with the archived one).
func (h history) life(evs []events.Envelope, i int) []events.Envelope {
	start := 0
	for j := i; j > 0; j-- {
		if slices.ContainsFunc(h.ends, func(end uint64) bool { return evs[j-1].Sequence <= end && end < evs[j].Sequence }) {
			start = j
			break
		}
	}
	return evs[start : i+1]
}

// segmentsOf returns the distinct segments evs were read from, in order.
func (h history) segmentsOf(evs []events.Envelope) []string {
	var out []string
	for _, e := range evs {
		if seg := h.segments[e.Sequence]; seg != "" && !slices.Contains(out, seg) {
			out = append(out, seg)
		}
	}
	return out
}

// toAPI converts an event of the history for the API, saying the segment
// it was read from.
func (h history) toAPI(e events.Envelope) (*tetherv1.Event, error) {
	ev, err := eventToAPI(e)
	if err != nil {
		return nil, err
	}
	ev.ArchiveSegment = h.segments[e.Sequence]
	return ev, nil
}

// history reads the resource's events from sequence from on, oldest first:
// from the stream, and from the archive when the catalog records stretches
// of its subject there (an ended aggregate archived; or a name that came
// back after its namesake was: the archive's stretches, then the stream's
// events). The stream is read first: an event the archiver purges
// meanwhile was recorded in a stored segment before, so the catalog, read
// after, finds it. It is read as the stream's leader holds it
// (CurrentHistory): an audit must not be answered from a replica's past,
// with a history cut short or "has no history" for a resource that has one.
func (h *historyService) history(ctx context.Context, r resource, from uint64) (history, error) {
	stream, err := h.s.opts.Store.CurrentHistory(ctx, r.subject, from)
	if err != nil {
		return history{}, err
	}
	aggregate, err := events.NameFromSubject(r.subject) // a player session's is its game session
	if err != nil {
		return history{}, err
	}
	archived, ends, err := h.s.archive.history(ctx, r.name, aggregate, from)
	if err != nil {
		return history{}, err
	}
	out := history{ends: ends}
	for _, e := range mergeHistories(stream, archived) {
		if e.Undecodable != nil || !r.concerns(e.Envelope) {
			continue // an undecodable message is no event of the resource (the store logged and counted it)
		}
		out.evs = append(out.evs, e.Envelope)
		if e.segment != "" {
			if out.segments == nil {
				out.segments = map[uint64]string{}
			}
			out.segments[e.Sequence] = e.segment
		}
	}
	return out, nil
}

// folded is a resource's state as a proto message, with what is needed to
// explain it.
type folded struct {
	state    proto.Message // nil before the first event
	status   string
	reason   string
	evidence proto.Message
}

// fold folds events into the resource's state, through the aggregate
// registry (events.Aggregates); a player session is the part of its game
// session's state that is its seat.
func (r resource) fold(evs []events.Envelope) (folded, error) {
	var f folded
	kind := r.kind
	if kind == events.KindPlayerSession {
		kind = events.KindGameSession
	}
	agg, ok := events.AggregateOf(kind)
	if !ok {
		return f, invalidField("name", fmt.Sprintf("%s has no history", r.name))
	}
	s, err := agg.Fold(evs)
	if err != nil || s == nil {
		return f, err
	}
	if r.kind != events.KindPlayerSession {
		f.state, f.status, f.reason, f.evidence = s, agg.Status(s), agg.Reason(s), agg.Evidence(s)
		return f, nil
	}
	if p := events.FindPlayer(s.(*eventsv1.GameSessionState), r.player); p != nil {
		f.state, f.status = p, events.PlayerSessionStatusName(p.GetStatus())
		if p.GetEndReason() != eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_UNSPECIFIED {
			f.reason = strings.TrimPrefix(p.GetEndReason().String(), "PLAYER_SESSION_END_REASON_")
		}
	}
	return f, nil
}

// ListEvents returns a resource's events, oldest first, filtered by time
// and type, a page at a time.
func (h *historyService) ListEvents(ctx context.Context, req *tetherv1.ListEventsRequest) (*tetherv1.ListEventsResponse, error) {
	r, err := h.resolve(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if err := checkEventTypes(req.GetTypes()); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0 || size > 1000:
		return nil, invalidField("page_size", "must be 0 to 1000")
	case size == 0:
		size = 100
	}
	var from uint64
	if tok := req.GetPageToken(); tok != "" {
		after, err := decodePageToken(tok, req.GetName())
		if err != nil {
			return nil, err
		}
		seq, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			return nil, invalidField("page_token", "not a token of this list")
		}
		from = seq + 1
	}
	hist, err := h.history(ctx, r, from)
	if err != nil {
		return nil, err
	}
	resp := &tetherv1.ListEventsResponse{}
	var listed []events.Envelope
	for _, e := range hist.evs {
		if req.GetStartTime() != nil && e.Time.Before(req.GetStartTime().AsTime()) ||
			req.GetEndTime() != nil && !e.Time.Before(req.GetEndTime().AsTime()) ||
			len(req.GetTypes()) > 0 && !slices.Contains(req.GetTypes(), e.Type) {
			continue
		}
		if len(resp.Events) == size {
			resp.NextPageToken = encodePageToken(strconv.FormatInt(resp.Events[size-1].GetSequence(), 10), req.GetName())
			break
		}
		ev, err := hist.toAPI(e)
		if err != nil {
			return nil, err
		}
		resp.Events = append(resp.Events, ev)
		listed = append(listed, e)
	}
	resp.ArchiveSegments = hist.segmentsOf(listed)
	return resp, nil
}

// checkEventTypes refuses a types filter that names no event type, as a
// watch's does: it matched nothing, and the list came back empty.
func checkEventTypes(types []string) error {
	pkg := (&eventsv1.Envelope{}).ProtoReflect().Descriptor().ParentFile().Package()
	for _, t := range types {
		if _, err := protoregistry.GlobalTypes.FindMessageByName(pkg.Append(protoreflect.Name(t))); err != nil || t == "" {
			return invalidField("types", fmt.Sprintf("%q is not an event type", t))
		}
	}
	return nil
}

// GetStateAt folds a resource's history up to a time or a sequence: the
// life it was in then, when its name came back after it was archived.
func (h *historyService) GetStateAt(ctx context.Context, req *tetherv1.GetStateAtRequest) (*tetherv1.StateAt, error) {
	r, err := h.resolve(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	switch {
	case req.GetTime() == nil && req.GetSequence() <= 0:
		return nil, invalidField("time", "give a time or a sequence")
	case req.GetTime() != nil && req.GetSequence() != 0:
		return nil, invalidField("sequence", "give a time or a sequence, not both")
	}
	hist, err := h.history(ctx, r, 0)
	if err != nil {
		return nil, err
	}
	evs := hist.evs
	cut := len(evs)
	for i, e := range evs {
		if req.GetSequence() > 0 && e.Sequence > uint64(req.GetSequence()) || req.GetTime() != nil && e.Time.After(req.GetTime().AsTime()) {
			cut = i
			break
		}
	}
	var folded []events.Envelope // the life of the last event up to the cut
	if cut > 0 {
		folded = hist.life(evs, cut-1)
	}
	f, err := r.fold(folded)
	if err != nil {
		return nil, err
	}
	out := &tetherv1.StateAt{Name: r.name, EventCount: int32(len(folded)), ArchiveSegments: hist.segmentsOf(folded)}
	if cut > 0 {
		last := evs[cut-1]
		out.Sequence, out.Time = int64(last.Sequence), timestamppb.New(last.Time)
	}
	if f.state != nil {
		if out.State, err = toStruct(f.state); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Explain says why a resource is in its state: the reason and evidence of
// its last transition and the events that led there, in its current life
// (its whole history, unless its name came back after it was archived).
func (h *historyService) Explain(ctx context.Context, req *tetherv1.ExplainRequest) (*tetherv1.Explanation, error) {
	r, err := h.resolve(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	hist, err := h.history(ctx, r, 0)
	if err != nil {
		return nil, err
	}
	if len(hist.evs) == 0 {
		return nil, &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: fmt.Sprintf("%s has no history", r.name)}
	}
	evs := hist.life(hist.evs, len(hist.evs)-1) // its current life
	f, err := r.fold(evs)
	if err != nil {
		return nil, err
	}
	out := &tetherv1.Explanation{Name: r.name, State: f.status, Reason: f.reason, HistoryLength: int32(len(evs)),
		ArchiveSegments: hist.segmentsOf(evs)}
	if f.evidence != nil {
		if out.Evidence, err = toStruct(f.evidence); err != nil {
			return nil, err
		}
	}
	led := chain(evs)
	for _, e := range led {
		ev, err := hist.toAPI(e)
		if err != nil {
			return nil, err
		}
		out.Events = append(out.Events, ev)
	}
	out.Decisions = scalingDecisions(evs, maxDecisions)
	out.Summary = summarize(r.name, f, led)
	if len(out.Decisions) > 0 {
		out.Summary += ". Last scaling: " + out.Decisions[0]
	}
	return out, nil
}

// maxDecisions bounds the decisions an explanation lists.
const maxDecisions = 5

// scalingDecisions lists a fleet's last autoscaling decisions and
// failures in words, newest first, at most n.
func scalingDecisions(evs []events.Envelope, n int) []string {
	var out []string
	for i := len(evs) - 1; i >= 0 && len(out) < n; i-- {
		switch d := evs[i].Data.(type) {
		case *eventsv1.FleetAutoscaled:
			out = append(out, scalingInWords(d, evs[i].Time))
		case *eventsv1.FleetAutoscaleFailed:
			out = append(out, fmt.Sprintf("kept %d at %s: %s failed: %s", d.GetReplicas(), evs[i].Time.UTC().Format(time.RFC3339), d.GetPolicy(), d.GetError()))
		}
	}
	return out
}

// settled lists the event types after which a resource was last fine: an
// explanation's chain starts after the last of them.
var settled = []string{
	"GameServerScheduled", "ProcessStarted", "GameServerReady", "GameServerReserved", "GameServerAllocated", "GameServerReallocated", "HealthRecovered",
	"HostRegistered", "HostOnline", "FleetCreated", "FleetStartRecovered", "GameSessionCreated", "PlayerAccepted", "PlayerReconnected", "PlayerTakenOver",
}

// chain returns the events that led to the resource's state: those after
// the last event that left it fine, or that event itself when the resource
// is fine now; at most maxChain, the latest.
func chain(evs []events.Envelope) []events.Envelope {
	start := 0
	for i := len(evs) - 1; i >= 0; i-- {
		if slices.Contains(settled, evs[i].Type) {
			start = i + 1
			if start == len(evs) {
				start = i // fine now: the event that made it so
			}
			break
		}
	}
	return evs[max(start, len(evs)-maxChain):]
}

// summarize says in one sentence why the resource is in its state.
func summarize(name string, f folded, chain []events.Envelope) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is %s", name, f.status)
	if f.reason != "" {
		fmt.Fprintf(&b, " because of %s", f.reason)
	}
	if ev, ok := f.evidence.(*eventsv1.Evidence); ok {
		var facts []string
		if ev.GetMissedPeriods() > 0 {
			facts = append(facts, fmt.Sprintf("%d heartbeat periods of %d s missed (threshold %d)", ev.GetMissedPeriods(), ev.GetPeriodSeconds(), ev.GetFailureThreshold()))
		}
		if ev.GetLastHeartbeatTime() != nil {
			facts = append(facts, "last heartbeat "+ev.GetLastHeartbeatTime().AsTime().Format(time.RFC3339Nano))
		}
		if ev.ExitCode != nil {
			facts = append(facts, fmt.Sprintf("exit code %d", ev.GetExitCode()))
		}
		if ev.GetSignal() != "" {
			facts = append(facts, "signal "+ev.GetSignal())
		}
		if ev.GetRequestedBy() != "" {
			facts = append(facts, "requested by "+ev.GetRequestedBy())
		}
		if ev.GetDetail() != "" {
			facts = append(facts, ev.GetDetail())
		}
		if len(facts) > 0 {
			b.WriteString(": " + strings.Join(facts, "; "))
		}
	}
	if len(chain) > 0 {
		types := make([]string, len(chain))
		for i, e := range chain {
			types[i] = e.Type
			if words := events.ChangeWords(e.Data); words != "" {
				types[i] += " (" + words + ")"
			}
		}
		b.WriteString(". Events: " + strings.Join(types, " → "))
	}
	return b.String()
}

// eventToAPI converts a stored envelope for the API, its payload as JSON.
func eventToAPI(e events.Envelope) (*tetherv1.Event, error) {
	out := &tetherv1.Event{
		Sequence: int64(e.Sequence), Id: e.ID, Type: e.Type, Aggregate: e.Aggregate, Time: timestamppb.New(e.Time),
		Producer: e.Producer, Actor: e.Actor, RequestId: e.RequestID, CorrelationId: e.CorrelationID, CausationId: e.CausationID,
	}
	if e.Data != nil {
		data, err := toStruct(e.Data)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", e.Sequence, err)
		}
		out.Data = data
	}
	return out, nil
}

// toStruct renders a message as its protojson object, its enum values
// spelt as the API's are (renameEnums).
func toStruct(m proto.Message) (*structpb.Struct, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", m, err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("decode %T as JSON: %w", m, err)
	}
	renameEnums(m.ProtoReflect().Descriptor(), s)
	return s, nil
}
