package events

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Defaults applied to a fleet spec's zero values: the health contract
// (docs/architecture.md, "The failures it is built against"), the SDK
// disconnect grace and the player-session windows.
const (
	DefaultInitialDelaySeconds       = 5
	DefaultPeriodSeconds             = 5
	DefaultFailureThreshold          = 3
	DefaultSDKDisconnectGraceSeconds = 30
	DefaultReservationTimeoutSeconds = 60
	DefaultReconnectWindowSeconds    = 120
	// MaxReplicas bounds a fleet's replica count.
	MaxReplicas = 100_000
)

// Bounds of a fleet's periods and timeouts: a day each. A longer one is a
// mistake no game needs (1e9 seconds, 31 years, was taken), and the
// deadlines computed from them stay far from overflowing.
const (
	// MaxPeriodSeconds bounds the health check's period.
	MaxPeriodSeconds = 24 * 60 * 60
	// MaxSDKDisconnectGraceSeconds bounds how long a server's SDK may be
	// disconnected before it is judged unhealthy.
	MaxSDKDisconnectGraceSeconds = 24 * 60 * 60
	// MaxReservationTimeoutSeconds bounds how long a player's reserved seat
	// waits for the player.
	MaxReservationTimeoutSeconds = 24 * 60 * 60
)

// DefaultReadyTimeoutSeconds is the ready timeout a health policy's 0
// stands for (or the policy's initial delay and threshold × period, if
// longer). It is applied where the timeout is enforced (the agent), not
// written into specs: a fleet stored before the field existed would
// otherwise see its health contract change, and start a rollout, at its
// next update.
const DefaultReadyTimeoutSeconds = 300

// ReadyTimeout is how long after its process starts a server of a health
// policy must have said Ready: the policy's ready timeout, or for 0 the
// default, DefaultReadyTimeoutSeconds or, for a policy whose initial delay
// says its servers load longer, the initial delay and the periods that
// make a silent server unhealthy after it (a server must not be timed out
// before its fleet's health contract would judge it at all).
func ReadyTimeout(p *eventsv1.HealthPolicy) time.Duration {
	return time.Duration(min(readyTimeoutSeconds(p), math.MaxInt64/int64(time.Second))) * time.Second
}

// readyTimeoutSeconds is ReadyTimeout in seconds, in int64: a contract of
// int32 fields can exceed what an int32 holds.
func readyTimeoutSeconds(p *eventsv1.HealthPolicy) int64 {
	if t := p.GetReadyTimeoutSeconds(); t > 0 {
		return int64(t)
	}
	contract := int64(p.GetInitialDelaySeconds()) + int64(p.GetPeriodSeconds())*int64(p.GetFailureThreshold())
	return max(DefaultReadyTimeoutSeconds, contract)
}

// SameHealthContract reports whether two health policies judge servers
// alike: equal but for a ready timeout's 0 and the value it stands for,
// or both disabled (a disabled policy's periods and timeouts judge
// nothing). Such a change starts no rollout, and neither lifts a failing
// fleet's backoff nor makes its earlier start failures stop counting.
func SameHealthContract(a, b *eventsv1.HealthPolicy) bool {
	if proto.Equal(a, b) {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	if a.GetDisabled() && b.GetDisabled() {
		return true
	}
	if readyTimeoutSeconds(a) != readyTimeoutSeconds(b) {
		return false
	}
	ra, rb := proto.CloneOf(a), proto.CloneOf(b)
	ra.ReadyTimeoutSeconds, rb.ReadyTimeoutSeconds = 0, 0
	return proto.Equal(ra, rb)
}

// FleetCommand is a command on a fleet: CreateFleet, UpdateFleet or DeleteFleet.
type FleetCommand interface{ fleetCommand() }

// CreateFleet creates a fleet with a spec; zero values take the defaults.
type CreateFleet struct {
	// Spec is the desired state.
	Spec *eventsv1.FleetSpec
}

// UpdateFleet copies the fields named by Paths from Spec into the fleet's spec.
// Paths are protobuf field paths of FleetSpec ("replicas", "health",
// "health.period_seconds", …); none means every field.
type UpdateFleet struct {
	// Spec holds the new values.
	Spec *eventsv1.FleetSpec
	// Paths names the fields to change.
	Paths []string
}

// DeleteFleet deletes a fleet.
type DeleteFleet struct{}

// StartFailure is a game server of a fleet that ended before it was READY.
type StartFailure struct {
	// GameServer is its resource name.
	GameServer string
	// Reason is why it ended.
	Reason eventsv1.Reason
	// Error says what went wrong, e.g. the exec error.
	Error string
	// Sequence is the stream sequence of the event that shows the failure.
	Sequence uint64
}

// RecordStartFailures records game servers of the fleet that ended before
// READY, in stream order (docs/crash-loops.md). Failures at or before the
// fleet's counted_failure_sequence were counted already and are skipped.
type RecordStartFailures struct {
	// Failures are the failures seen.
	Failures []StartFailure
	// At is now: the backoff runs from it.
	At time.Time
	// Backoff is the policy in force.
	Backoff StartBackoff
}

// RecordStartRecovered records that a game server of a failing fleet,
// scheduled after its failures began, became READY.
type RecordStartRecovered struct {
	// GameServer is its resource name.
	GameServer string
}

// StartBackoff is how long a fleet whose game servers fail before READY
// waits before it starts another: Base after the first failure, doubling
// with each one after, at most Cap.
type StartBackoff struct {
	// Base is the wait after one failure.
	Base time.Duration
	// Cap bounds the wait.
	Cap time.Duration
}

// After returns the wait after n consecutive failures (0 for n < 1).
func (b StartBackoff) After(n int32) time.Duration {
	if n < 1 || b.Base <= 0 {
		return 0
	}
	limit, d := max(b.Cap, b.Base), b.Base
	for i := int32(1); i < n && d < limit; i++ {
		if d > limit/2 {
			d = limit
		} else {
			d *= 2
		}
	}
	return d
}

// RecordPlacementBlocked records that game servers of the fleet wait for a
// host with room; the same wait already recorded (count and reason)
// produces no event.
type RecordPlacementBlocked struct {
	// Waiting is how many game servers the fleet is short of.
	Waiting int
	// Reason is NoMatchingHost or NoHostWithRoom.
	Reason string
	// Message says it for humans.
	Message string
}

// RecordPlacementUnblocked records that the fleet's game servers have
// hosts again; nothing when placement was not blocked.
type RecordPlacementUnblocked struct {
	// At is now.
	At time.Time
}

// Reasons of FleetPlacementBlocked.
const (
	// NoMatchingHost: the template's host selector matches no ONLINE,
	// uncordoned host with room.
	NoMatchingHost = "NO_MATCHING_HOST"
	// NoHostWithRoom: the template has no host selector, and no ONLINE,
	// uncordoned host has room.
	NoHostWithRoom = "NO_HOST_WITH_ROOM"
)

func (CreateFleet) fleetCommand()              {}
func (UpdateFleet) fleetCommand()              {}
func (DeleteFleet) fleetCommand()              {}
func (RecordStartFailures) fleetCommand()      {}
func (RecordStartRecovered) fleetCommand()     {}
func (RecordPlacementBlocked) fleetCommand()   {}
func (RecordPlacementUnblocked) fleetCommand() {}

// DecideFleet returns the events a command produces on a fleet, or why it is
// refused. state is nil for a fleet that does not exist.
func DecideFleet(name string, state *eventsv1.FleetState, cmd FleetCommand) ([]proto.Message, error) {
	refuses := func(event, command string) error {
		if fleetTransitions[event].allows(state) {
			return nil
		}
		return &TransitionError{Aggregate: name, From: fleetStatus(state), Event: command}
	}
	switch c := cmd.(type) {
	case CreateFleet:
		if err := refuses(typeName[*eventsv1.FleetCreated](), "CreateFleet"); err != nil {
			return nil, err
		}
		spec := proto.CloneOf(c.Spec)
		if spec == nil {
			spec = &eventsv1.FleetSpec{}
		}
		NormalizeFleetSpec(spec)
		if err := ValidateFleetSpec(spec); err != nil {
			return nil, err
		}
		return []proto.Message{&eventsv1.FleetCreated{Spec: spec, Revision: 1}}, nil
	case UpdateFleet:
		if err := refuses(typeName[*eventsv1.FleetUpdated](), "UpdateFleet"); err != nil {
			return nil, err
		}
		next, changed, err := mergeFleetSpec(state.GetSpec(), c.Spec, c.Paths)
		if err != nil {
			return nil, err
		}
		if next.GetAutoscaling() != nil && next.GetReplicas() != state.GetSpec().GetReplicas() {
			return nil, Invalid("fleet.replicas", "is set by the fleet's autoscaling: change autoscaling (its min_replicas and max_replicas), or remove it")
		}
		if len(changed) == 0 {
			return nil, nil
		}
		out := []proto.Message{&eventsv1.FleetUpdated{Spec: next, ChangedFields: changed}}
		if start := rolloutStart(state, next, changed); start != nil {
			out = append(out, start)
		}
		return out, nil
	case DeleteFleet:
		if err := refuses(typeName[*eventsv1.FleetDeleted](), "DeleteFleet"); err != nil {
			return nil, err
		}
		return []proto.Message{&eventsv1.FleetDeleted{}}, nil
	case RecordStartFailures:
		if err := refuses(typeName[*eventsv1.FleetStartFailing](), "RecordStartFailures"); err != nil {
			return nil, err
		}
		return decideStartFailures(state, c), nil
	case RecordStartRecovered:
		if fleetStatus(state) == fleetActive && state.GetStartFailing() == nil {
			return nil, nil // not failing: nothing to recover from
		}
		if err := refuses(typeName[*eventsv1.FleetStartRecovered](), "RecordStartRecovered"); err != nil {
			return nil, err
		}
		return []proto.Message{&eventsv1.FleetStartRecovered{
			GameServer: c.GameServer, ConsecutiveFailures: state.GetStartFailing().GetConsecutiveFailures(),
		}}, nil
	case RecordPlacementBlocked:
		if b := state.GetPlacementBlocked(); b != nil && int(b.GetWaiting()) == c.Waiting && b.GetReason() == c.Reason {
			return nil, nil // the same wait, recorded already
		}
		if err := refuses(typeName[*eventsv1.FleetPlacementBlocked](), "RecordPlacementBlocked"); err != nil {
			return nil, err
		}
		return []proto.Message{&eventsv1.FleetPlacementBlocked{Waiting: int32(c.Waiting), Reason: c.Reason, Message: c.Message}}, nil
	case PauseRollout, ResumeRollout, UndoRollout, RecordRolloutProgress, HaltRollout:
		if err := refuses(typeName[*eventsv1.FleetRolloutStarted](), fmt.Sprintf("%T", cmd)); err != nil {
			return nil, err
		}
		return decideRollout(name, state, cmd)
	case RecordAutoscale, RecordAutoscaleFailure:
		if err := refuses(typeName[*eventsv1.FleetAutoscaled](), fmt.Sprintf("%T", cmd)); err != nil {
			return nil, err
		}
		if state.GetSpec().GetAutoscaling() == nil {
			return nil, Invalid("fleet.autoscaling", "%s has no autoscaling", name)
		}
		return decideAutoscale(state, cmd), nil
	case RecordPlacementUnblocked:
		if state.GetPlacementBlocked() == nil {
			return nil, nil
		}
		if err := refuses(typeName[*eventsv1.FleetPlacementUnblocked](), "RecordPlacementUnblocked"); err != nil {
			return nil, err
		}
		since := state.GetPlacementConditionTime().AsTime()
		return []proto.Message{&eventsv1.FleetPlacementUnblocked{BlockedSeconds: int64(max(0, c.At.Sub(since).Seconds()))}}, nil
	}
	return nil, fmt.Errorf("events: unknown fleet command %T", cmd)
}

// decideStartFailures counts the failures not counted yet onto the run in
// progress and sets the backoff from the new count; nothing new, no event.
func decideStartFailures(state *eventsv1.FleetState, c RecordStartFailures) []proto.Message {
	var fresh []StartFailure
	for _, f := range c.Failures {
		if f.Sequence > state.GetCountedFailureSequence() {
			fresh = append(fresh, f)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	last, seq := fresh[len(fresh)-1], uint64(0)
	for _, f := range fresh {
		seq = max(seq, f.Sequence)
	}
	n := state.GetStartFailing().GetConsecutiveFailures() + int32(len(fresh))
	return []proto.Message{&eventsv1.FleetStartFailing{
		ConsecutiveFailures: n, GameServer: last.GameServer, Reason: last.Reason, LastError: last.Error,
		BackoffUntil: timestamppb.New(c.At.Add(c.Backoff.After(n))), FailureSequence: seq,
	}}
}

// The fleet's statuses in its transition table.
const (
	fleetAbsent  = "ABSENT"
	fleetActive  = "ACTIVE"
	fleetDeleted = "DELETED"
)

// fleetTransition is one row of the fleet transition table: the statuses
// an event may arrive in, the status it leads to ("" = unchanged), and a
// condition on the rest of the state, if the row has one.
type fleetTransition struct {
	from []string
	to   string
	when func(*eventsv1.FleetState) bool
}

// allows reports whether the row takes its event on state.
func (t fleetTransition) allows(state *eventsv1.FleetState) bool {
	return slices.Contains(t.from, fleetStatus(state)) && (t.when == nil || t.when(state))
}

// target is the status after the row's event, from status from.
func (t fleetTransition) target(from string) string {
	if t.to == "" {
		return from
	}
	return t.to
}

// fleetTransitions is the fleet's transition table (docs/architecture.md,
// "Aggregates and the event catalogue"), keyed
// by event type. A deleted fleet takes nothing more; a recovery needs a
// run of failures to end.
var fleetTransitions = map[string]fleetTransition{
	typeName[*eventsv1.FleetCreated]():            {from: []string{fleetAbsent}, to: fleetActive},
	typeName[*eventsv1.FleetUpdated]():            {from: []string{fleetActive}},
	typeName[*eventsv1.FleetStartFailing]():       {from: []string{fleetActive}},
	typeName[*eventsv1.FleetStartRecovered]():     {from: []string{fleetActive}, when: func(s *eventsv1.FleetState) bool { return s.GetStartFailing() != nil }},
	typeName[*eventsv1.FleetDeleted]():            {from: []string{fleetActive}, to: fleetDeleted},
	typeName[*eventsv1.FleetPlacementBlocked]():   {from: []string{fleetActive}},
	typeName[*eventsv1.FleetPlacementUnblocked](): {from: []string{fleetActive}, when: func(s *eventsv1.FleetState) bool { return s.GetPlacementBlocked() != nil }},
	typeName[*eventsv1.FleetAutoscaled]():         {from: []string{fleetActive}},
	typeName[*eventsv1.FleetAutoscaleFailed]():    {from: []string{fleetActive}},
	typeName[*eventsv1.FleetAutoscaleRecovered](): {from: []string{fleetActive}, when: func(s *eventsv1.FleetState) bool { return s.GetAutoscaleFailing() != nil }},
	typeName[*eventsv1.FleetRolloutStarted]():     {from: []string{fleetActive}},
	typeName[*eventsv1.FleetRolloutProgressed]():  {from: []string{fleetActive}, when: RolloutActive},
	typeName[*eventsv1.FleetRolloutCompleted]():   {from: []string{fleetActive}, when: RolloutActive},
	typeName[*eventsv1.FleetRolloutPaused]():      {from: []string{fleetActive}, when: RolloutActive},
	typeName[*eventsv1.FleetRolloutHalted]():      {from: []string{fleetActive}, when: RolloutActive},
	typeName[*eventsv1.FleetRolloutResumed]():     {from: []string{fleetActive}, when: func(s *eventsv1.FleetState) bool { return RolloutOpen(s) && !RolloutActive(s) }},
	typeName[*eventsv1.FleetRolledBack]():         {from: []string{fleetActive}, when: func(s *eventsv1.FleetState) bool { return previousRevision(s) != nil }},
}

// typeName is the event type of payload type M, for table keys.
func typeName[M proto.Message]() string {
	var m M
	return TypeOf(m)
}

// ApplyFleet folds one event into a fleet's state and returns the new state;
// the input is not modified. An event the state does not allow is an error.
func ApplyFleet(state *eventsv1.FleetState, e Envelope) (*eventsv1.FleetState, error) {
	if err := checkStored(e, ""); err != nil {
		return nil, err
	}
	row, ok := fleetTransitions[e.Type]
	if !ok {
		return nil, fmt.Errorf("events: %s is not a fleet event", e.Type)
	}
	from := fleetStatus(state)
	if !row.allows(state) {
		return nil, &TransitionError{Aggregate: e.Aggregate, From: from, Event: e.Type}
	}
	next := proto.CloneOf(state)
	if next == nil {
		next = &eventsv1.FleetState{}
	}
	at := timestamppb.New(e.Time)
	switch d := e.Data.(type) {
	case *eventsv1.FleetCreated:
		next.Name, next.Spec, next.CreateTime = e.Aggregate, proto.CloneOf(d.GetSpec()), at
		if next.Revision = d.GetRevision(); next.Revision > 0 {
			next.Revisions = []*eventsv1.FleetRevision{{Revision: next.Revision, Template: proto.CloneOf(d.GetSpec().GetTemplate()),
				Health: proto.CloneOf(d.GetSpec().GetHealth()), CreateTime: at}}
		}
	case *eventsv1.FleetUpdated:
		runs := len(runChanges(next.GetSpec(), d.GetSpec(), d.GetChangedFields())) > 0
		if len(next.GetRevisions()) == 0 && runs {
			// A fleet made before revisions: keep what it ran, for undo.
			next.Revisions = []*eventsv1.FleetRevision{{Revision: next.GetRevision(),
				Template: proto.CloneOf(next.GetSpec().GetTemplate()), Health: proto.CloneOf(next.GetSpec().GetHealth())}}
		}
		next.Spec = proto.CloneOf(d.GetSpec())
		if f := next.GetStartFailing(); f != nil && runs {
			f.BackoffUntil = nil // what failed changed: try it at once
		}
		if slices.Contains(d.GetChangedFields(), "autoscaling") {
			next.AutoscaleFailing = nil // the policy that failed is gone
		}
	case *eventsv1.FleetStartFailing:
		if next.GetStartFailing() == nil {
			next.StartConditionTime, next.StartRecovered = at, nil
		}
		next.StartFailing = proto.CloneOf(d)
		next.CountedFailureSequence = max(next.GetCountedFailureSequence(), d.GetFailureSequence())
	case *eventsv1.FleetStartRecovered:
		next.StartFailing, next.StartRecovered, next.StartConditionTime = nil, proto.CloneOf(d), at
	case *eventsv1.FleetPlacementBlocked:
		if next.GetPlacementBlocked() == nil {
			next.PlacementConditionTime = at
		}
		next.PlacementBlocked, next.PlacementUnblocked = proto.CloneOf(d), false
	case *eventsv1.FleetPlacementUnblocked:
		next.PlacementBlocked, next.PlacementUnblocked, next.PlacementConditionTime = nil, true, at
	case *eventsv1.FleetAutoscaled:
		next.Spec.Replicas, next.LastAutoscale = d.GetToReplicas(), proto.CloneOf(d)
	case *eventsv1.FleetAutoscaleFailed:
		next.AutoscaleFailing = proto.CloneOf(d)
	case *eventsv1.FleetAutoscaleRecovered:
		next.AutoscaleFailing = nil
	case *eventsv1.FleetRolloutStarted, *eventsv1.FleetRolloutProgressed, *eventsv1.FleetRolloutCompleted,
		*eventsv1.FleetRolloutPaused, *eventsv1.FleetRolloutResumed, *eventsv1.FleetRolloutHalted, *eventsv1.FleetRolledBack:
		applyRollout(next, d, at)
	case *eventsv1.FleetDeleted:
		next.Deleted, next.DeleteTime = true, at
	default:
		return nil, fmt.Errorf("events: %s has payload %T", e.Type, e.Data)
	}
	next.UpdateTime = at
	if got, want := fleetStatus(next), row.target(from); got != want {
		return nil, fmt.Errorf("events: %s on %s (%s) led to %s, not %s as the transition table says", e.Type, e.Aggregate, from, got, want)
	}
	return next, nil
}

// runChanges returns what of "template" and "health" an update from prev
// to next that changed the fields changed changes in what a fleet's
// servers run and how they are judged: the template, or the health
// contract (SameHealthContract). Such a change makes a new revision (a
// rollout) and ends a failing fleet's backoff (it may be what failed); a
// ready timeout set to the value its 0 stood for, or any change to a
// disabled health policy's periods and timeouts, does neither.
func runChanges(prev, next *eventsv1.FleetSpec, changed []string) []string {
	var what []string
	if slices.Contains(changed, "template") {
		what = append(what, "template")
	}
	if slices.Contains(changed, "health") && !SameHealthContract(prev.GetHealth(), next.GetHealth()) {
		what = append(what, "health")
	}
	return what
}

func fleetStatus(s *eventsv1.FleetState) string {
	switch {
	case s == nil || s.GetName() == "":
		return fleetAbsent
	case s.GetDeleted():
		return fleetDeleted
	}
	return fleetActive
}

// NormalizeFleetSpec fills a spec's zero values with the defaults.
func NormalizeFleetSpec(s *eventsv1.FleetSpec) {
	if s.Template == nil {
		s.Template = &eventsv1.GameServerTemplate{}
	}
	for _, p := range s.Template.Ports {
		if p.Protocol == eventsv1.Protocol_PROTOCOL_UNSPECIFIED {
			p.Protocol = eventsv1.Protocol_PROTOCOL_UDP
		}
	}
	if s.Health == nil {
		s.Health = &eventsv1.HealthPolicy{}
	}
	h := s.Health
	h.InitialDelaySeconds = orDefault(h.InitialDelaySeconds, DefaultInitialDelaySeconds)
	h.PeriodSeconds = orDefault(h.PeriodSeconds, DefaultPeriodSeconds)
	h.FailureThreshold = orDefault(h.FailureThreshold, DefaultFailureThreshold)
	s.SdkDisconnectGraceSeconds = orDefault(s.SdkDisconnectGraceSeconds, DefaultSDKDisconnectGraceSeconds)
	if s.PlayerSessions == nil {
		s.PlayerSessions = &eventsv1.PlayerSessionPolicy{}
	}
	ps := s.PlayerSessions
	ps.ReservationTimeoutSeconds = orDefault(ps.ReservationTimeoutSeconds, DefaultReservationTimeoutSeconds)
	ps.ReconnectWindowSeconds = orDefault(ps.ReconnectWindowSeconds, DefaultReconnectWindowSeconds)
	if s.Scheduling == eventsv1.Scheduling_SCHEDULING_UNSPECIFIED {
		s.Scheduling = eventsv1.Scheduling_SCHEDULING_PACKED
	}
	normalizeStrategy(s)
}

func orDefault(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

// ValidateFleetSpec checks a normalized spec. Field paths in errors are the
// API's ("fleet.replicas").
func ValidateFleetSpec(s *eventsv1.FleetSpec) error { return validateFleetSpec(s, nil) }

// validateFleetSpec checks a normalized spec that replaces prev (nil for a
// new one): a period or timeout over its bound is refused where it
// changes, so that a fleet stored before the bounds can still be scaled.
func validateFleetSpec(s, prev *eventsv1.FleetSpec) error {
	if s.GetReplicas() < 0 || s.GetReplicas() > MaxReplicas {
		return Invalid("fleet.replicas", "must be between 0 and %d, got %d", MaxReplicas, s.GetReplicas())
	}
	t := s.GetTemplate()
	if strings.TrimSpace(t.GetCommand()) == "" {
		return Invalid("fleet.template.command", "is required")
	}
	seen := map[string]bool{}
	for i, p := range t.GetPorts() {
		if !ValidID(p.GetName()) {
			return Invalid(fmt.Sprintf("fleet.template.ports[%d].name", i), "%q must be lowercase letters, digits and dashes, starting with a letter", p.GetName())
		}
		if seen[p.GetName()] {
			return Invalid(fmt.Sprintf("fleet.template.ports[%d].name", i), "%q is used twice", p.GetName())
		}
		seen[p.GetName()] = true
	}
	for k := range t.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return Invalid("fleet.template.env", "variable name %q is not valid", k)
		}
	}
	h := s.GetHealth()
	for _, f := range []struct {
		name string
		v    int32
	}{
		{"fleet.health.initial_delay_seconds", h.GetInitialDelaySeconds()},
		{"fleet.health.period_seconds", h.GetPeriodSeconds()},
		{"fleet.health.failure_threshold", h.GetFailureThreshold()},
		{"fleet.health.ready_timeout_seconds", h.GetReadyTimeoutSeconds()},
		{"fleet.sdk_disconnect_grace_seconds", s.GetSdkDisconnectGraceSeconds()},
		{"fleet.player_sessions.max_players", s.GetPlayerSessions().GetMaxPlayers()},
		{"fleet.player_sessions.reservation_timeout_seconds", s.GetPlayerSessions().GetReservationTimeoutSeconds()},
		{"fleet.player_sessions.reconnect_window_seconds", s.GetPlayerSessions().GetReconnectWindowSeconds()},
	} {
		if f.v < 0 {
			return Invalid(f.name, "must not be negative, got %d", f.v)
		}
	}
	if err := checkBounds(s, prev); err != nil {
		return err
	}
	for k, v := range s.GetLabels() {
		if err := checkLabel(k, v); err != nil {
			return Invalid("fleet.labels", "%v", err)
		}
	}
	if err := validateAutoscaling(s.GetAutoscaling()); err != nil {
		return err
	}
	if err := validateStrategy(s.GetStrategy()); err != nil {
		return err
	}
	if len(t.GetHostSelector()) > MaxLabels {
		return Invalid("fleet.template.host_selector", "at most %d labels, got %d", MaxLabels, len(t.GetHostSelector()))
	}
	for k, v := range t.GetHostSelector() {
		if err := checkLabel(k, v); err != nil {
			return Invalid("fleet.template.host_selector", "%v", err)
		}
	}
	return validateCounters("fleet.template", t)
}

// checkBounds refuses a period or timeout of s over its bound, unless prev
// (non-nil) has the same value.
func checkBounds(s, prev *eventsv1.FleetSpec) error {
	for _, f := range []struct {
		name string
		max  int32
		get  func(*eventsv1.FleetSpec) int32
	}{
		{"fleet.health.period_seconds", MaxPeriodSeconds, func(s *eventsv1.FleetSpec) int32 { return s.GetHealth().GetPeriodSeconds() }},
		{"fleet.sdk_disconnect_grace_seconds", MaxSDKDisconnectGraceSeconds, (*eventsv1.FleetSpec).GetSdkDisconnectGraceSeconds},
		{"fleet.player_sessions.reservation_timeout_seconds", MaxReservationTimeoutSeconds,
			func(s *eventsv1.FleetSpec) int32 { return s.GetPlayerSessions().GetReservationTimeoutSeconds() }},
	} {
		if v := f.get(s); v > f.max && (prev == nil || f.get(prev) != v) {
			return Invalid(f.name, "must be at most %d (a day), got %d", f.max, v)
		}
	}
	return nil
}

// MatchesLabels reports whether labels hold every key of selector with
// its value (an empty selector matches everything).
func MatchesLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Limits of one label, of a fleet or a game server (set by the API or by
// the game server through its SDK).
const (
	// MaxLabelKeyBytes bounds a label's key.
	MaxLabelKeyBytes = 63
	// MaxLabelValueBytes bounds a label's value.
	MaxLabelValueBytes = 253
)

// checkLabel refuses a label the views cannot hold or selectors cannot
// name: an empty or long key, a long value, a key with a space, '=' or
// ',', and text that is not UTF-8 or holds a control character (views keep
// labels as PostgreSQL jsonb, which cannot hold a NUL byte).
func checkLabel(k, v string) error {
	if k == "" || len(k) > MaxLabelKeyBytes || strings.ContainsAny(k, " \t\n=,") || !printable(k) {
		return fmt.Errorf("key %q must be 1-%d bytes of printable UTF-8 without spaces, '=' or ','", k, MaxLabelKeyBytes)
	}
	if len(v) > MaxLabelValueBytes || !printable(v) {
		return fmt.Errorf("value of %q must be at most %d bytes of printable UTF-8 on one line", k, MaxLabelValueBytes)
	}
	return nil
}

// printable reports whether s is UTF-8 without control characters (a NUL
// byte, a new line, DEL, C1 controls).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, unicode.IsControl)
}

// fleetSpecFields are the updatable FleetSpec paths.
var fleetSpecFields = []string{
	"replicas", "template", "health", "health.disabled", "health.initial_delay_seconds",
	"health.period_seconds", "health.failure_threshold", "health.ready_timeout_seconds", "sdk_disconnect_grace_seconds",
	"player_sessions", "player_sessions.max_players", "player_sessions.reservation_timeout_seconds",
	"player_sessions.reconnect_window_seconds", "scheduling", "labels", "autoscaling", "strategy",
}

// mergeFleetSpec applies the paths of patch onto cur and returns the new
// spec and the top-level fields that really changed.
func mergeFleetSpec(cur, patch *eventsv1.FleetSpec, paths []string) (*eventsv1.FleetSpec, []string, error) {
	next := proto.CloneOf(cur)
	if patch == nil {
		patch = &eventsv1.FleetSpec{}
	}
	if len(paths) == 0 {
		paths = []string{"replicas", "template", "health", "sdk_disconnect_grace_seconds", "player_sessions", "scheduling", "labels", "autoscaling", "strategy"}
	}
	for _, p := range paths {
		if !slices.Contains(fleetSpecFields, p) {
			return nil, nil, Invalid("update_mask", "unknown or read-only field %q", p)
		}
		// A whole-message path may have just set the message to nil; its
		// sub-field paths below write into it.
		if next.Health == nil {
			next.Health = &eventsv1.HealthPolicy{}
		}
		if next.PlayerSessions == nil {
			next.PlayerSessions = &eventsv1.PlayerSessionPolicy{}
		}
		switch p {
		case "replicas":
			next.Replicas = patch.GetReplicas()
		case "template":
			next.Template = proto.CloneOf(patch.GetTemplate())
		case "health":
			next.Health = proto.CloneOf(patch.GetHealth())
		case "health.disabled":
			next.Health.Disabled = patch.GetHealth().GetDisabled()
		case "health.initial_delay_seconds":
			next.Health.InitialDelaySeconds = patch.GetHealth().GetInitialDelaySeconds()
		case "health.period_seconds":
			next.Health.PeriodSeconds = patch.GetHealth().GetPeriodSeconds()
		case "health.failure_threshold":
			next.Health.FailureThreshold = patch.GetHealth().GetFailureThreshold()
		case "health.ready_timeout_seconds":
			next.Health.ReadyTimeoutSeconds = patch.GetHealth().GetReadyTimeoutSeconds()
		case "sdk_disconnect_grace_seconds":
			next.SdkDisconnectGraceSeconds = patch.GetSdkDisconnectGraceSeconds()
		case "player_sessions":
			next.PlayerSessions = proto.CloneOf(patch.GetPlayerSessions())
		case "player_sessions.max_players":
			next.PlayerSessions.MaxPlayers = patch.GetPlayerSessions().GetMaxPlayers()
		case "player_sessions.reservation_timeout_seconds":
			next.PlayerSessions.ReservationTimeoutSeconds = patch.GetPlayerSessions().GetReservationTimeoutSeconds()
		case "player_sessions.reconnect_window_seconds":
			next.PlayerSessions.ReconnectWindowSeconds = patch.GetPlayerSessions().GetReconnectWindowSeconds()
		case "scheduling":
			next.Scheduling = patch.GetScheduling()
		case "labels":
			next.Labels = cloneMap(patch.GetLabels())
		case "autoscaling":
			next.Autoscaling = proto.CloneOf(patch.GetAutoscaling())
		case "strategy":
			next.Strategy = proto.CloneOf(patch.GetStrategy())
		}
	}
	NormalizeFleetSpec(next)
	if err := validateFleetSpec(next, cur); err != nil {
		return nil, nil, err
	}
	var changed []string
	cd, nd := cur.ProtoReflect(), next.ProtoReflect()
	fields := cd.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if !cd.Get(f).Equal(nd.Get(f)) {
			changed = append(changed, string(f.Name()))
		}
	}
	return next, changed, nil
}
