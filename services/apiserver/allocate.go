package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/singleflight"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
	"github.com/tetherhq/tether/projections"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// ReasonNoReadyGameServer is the ErrorInfo reason of an allocation that
// found no READY game server matching its selectors.
const ReasonNoReadyGameServer = "NO_READY_GAME_SERVER"

// ReasonAllocationContended is the ErrorInfo reason of an allocation that
// lost too many races for servers in a row (retry it).
const ReasonAllocationContended = "ALLOCATION_CONTENDED"

// Allocation tuning.
const (
	// allocAttempts bounds the appends one allocation tries.
	allocAttempts = 256
	// policyTTL is how long a replica reuses a fleet's player-session
	// policy without reading it again.
	policyTTL = time.Second
	// policyMaxStale is how long it serves one while it reads it again;
	// an older one is read before it is served.
	policyMaxStale = 10 * time.Second
	// policyReadWait bounds one read of a policy.
	policyReadWait = 10 * time.Second
)

// allocationService implements tetherv1.AllocationServiceServer.
//
// The allocator is the one writer not on the shared write path
// (events/write.Do), for three reasons, each measured:
//   - Do writes one aggregate named before the write; an allocation
//     chooses its server as it goes, and a lost race may send it to
//     another candidate.
//   - Do reads the aggregate again before each decision, which for the
//     API means waiting for the views; at allocation rates the views are
//     behind by design, and the allocator folds what it lost to from the
//     stream instead (catchUp: mostly one direct get).
//   - The API's writes find a retried request id in the views; an
//     allocation's retry may take another server, so its event id derives
//     from the request alone (AllocationEventID) and the stream's duplicate
//     window keeps one. A views lookup per call was 27-44 % of an
//     allocation's time (docs/benchmarks.md).
//
// What it shares with the other writers: the decision
// (events.DecideGameServer), the stamp (events.Stamp, with EventID; the
// game session's with events.After) and the guarded append.
type allocationService struct {
	tetherv1.UnimplementedAllocationServiceServer
	s        *Server
	metrics  allocationMetrics  // tether_allocations_total (metrics.go)
	inflight singleflight.Group // calls in progress, by request id and fingerprint
	// policyReads are the fleets' policy reads in flight, by fleet.
	policyReads singleflight.Group
}

// AllocateGameServer picks a READY game server from the views and appends
// GameServerAllocated to its subject, guarded by the sequence the views
// showed: if anyone wrote to the server since, the append fails and the
// allocator looks again, so no server is ever allocated twice. The game
// session is then created on its own subject (GameSessionCreated; the
// controller finishes this step if the replica stops between the two).
// Each call is counted by its outcome (metrics.go).
func (a *allocationService) AllocateGameServer(ctx context.Context, req *tetherv1.AllocateGameServerRequest) (*tetherv1.AllocateGameServerResponse, error) {
	ctx, repeated := withRepeatMark(ctx)
	resp, err := a.allocateOnce(ctx, req)
	a.record(ctx, repeated.Load(), err)
	return resp, err
}

// allocateOnce runs allocate once for concurrent calls of one caller with
// one request id on this replica: a retry sent while the first call is in
// progress (a matchmaker's timeout shorter than the call) gets the first
// call's answer. Run apart, it found no READY server to take, since the
// first call had taken the fleet's last one, and answered
// RESOURCE_EXHAUSTED for an allocation that succeeded. A shared run ended
// by the other caller's cancellation is run again for this one.
func (a *allocationService) allocateOnce(ctx context.Context, req *tetherv1.AllocateGameServerRequest) (*tetherv1.AllocateGameServerResponse, error) {
	if req.GetRequestId() == "" {
		return a.allocate(ctx, req)
	}
	key := req.GetRequestId() + "\x00" + requestFingerprint(ctx)
	for {
		mine := false
		ch := a.inflight.DoChan(key, func() (any, error) {
			mine = true
			return a.allocate(ctx, req)
		})
		var r singleflight.Result
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case r = <-ch:
		}
		if mine {
			resp, _ := r.Val.(*tetherv1.AllocateGameServerResponse)
			return resp, r.Err
		}
		if errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, context.DeadlineExceeded) {
			continue // the other caller gave up; this one has not
		}
		markRepeated(ctx)
		if r.Err != nil {
			return nil, r.Err
		}
		return proto.CloneOf(r.Val.(*tetherv1.AllocateGameServerResponse)), nil
	}
}

// allocate is AllocateGameServer, uncounted.
func (a *allocationService) allocate(ctx context.Context, req *tetherv1.AllocateGameServerRequest) (*tetherv1.AllocateGameServerResponse, error) {
	s := a.s
	want, err := parseAllocation(req)
	if err != nil {
		return nil, err
	}
	fleet := want.fleet
	// A request id is not looked up in the views first: the allocation
	// event's id derives from it alone, so the stream's duplicate window
	// answers a retry with the first call's event whichever server the
	// retry picks (try). Looking it up cost a PostgreSQL round trip per
	// call, 27 % of an allocation's time and most of its tail
	// (docs/benchmarks.md). Only a call that finds no READY server asks the
	// views (exhausted).
	if fleet != "" {
		if _, err := a.policy(ctx, fleet); err != nil {
			return nil, err // NOT_FOUND for a fleet that does not exist
		}
	}
	attempts := 0
	for round := 0; ; round++ {
		resp, err := a.allocateFrom(ctx, req, want, &attempts, round > 0)
		if resp != nil || err != nil {
			return resp, err
		}
		if attempts >= allocAttempts {
			return nil, &apiError{code: codes.Aborted, reason: ReasonAllocationContended,
				msg: fmt.Sprintf("%d allocation attempts lost races with other writers; retry with the same request id", attempts)}
		}
		if round > 0 || !slices.ContainsFunc(want.queries, projections.AllocationQuery.RoomQuery) || s.opts.Watch == nil {
			break
		}
		// A server with room may have been allocated by another replica
		// (or readied for its next match) after the views this replica
		// read, or be in flight in another call of this replica (the pool
		// hands a server to one call at a time, however many rooms it has
		// left): before it answers that none has room, it brings the views
		// up to the stream's end and tries what they show, claimed or not.
		head, err := s.opts.Watch.StreamLastSequence(ctx)
		if err == nil {
			err = s.waitFresh(ctx, head)
		}
		if err != nil {
			s.log.Debug("no server with room; the views could not be brought up to date to look again", "err", err)
			break
		}
	}
	return a.exhausted(ctx, req, want)
}

// allocateFrom tries the request's queries in order, and the candidates of
// each, counting its appends in attempts: the answer, or neither answer nor
// error when no candidate took the allocation. The candidates come from
// the pool, or with fresh from one read of the views per query, in their
// order and whatever the pool's claims.
func (a *allocationService) allocateFrom(ctx context.Context, req *tetherv1.AllocateGameServerRequest, want allocationRequest, attempts *int, fresh bool) (*tetherv1.AllocateGameServerResponse, error) {
	s := a.s
	for _, q := range want.queries {
		key, err := listKey(q)
		if err != nil {
			return nil, err
		}
		next := func() (projections.Row[*eventsv1.GameServerState], bool, error) { return a.take(ctx, key, q) }
		// The pool's claim, when the server is not taken, and how its
		// list served.
		giveBack, hit, missed := s.candidates.release, s.candidates.hit, s.candidates.missed
		if fresh {
			next, giveBack = a.viewsCandidates(ctx, q), func(string) {}
			hit, missed = func(string) {}, func(string) {}
		}
		for *attempts < allocAttempts {
			c, ok, err := next()
			if err != nil {
				return nil, err
			}
			if !ok {
				break // next selector
			}
			name := c.State.GetName()
			fleetID, _, err := events.ParseGameServerName(name)
			if err != nil {
				return nil, err
			}
			policy, err := a.policy(ctx, events.FleetName(fleetID))
			if err != nil {
				giveBack(name)
				return nil, err
			}
			state, seq := c.State, c.Sequence
			for q.Matches(state) && *attempts < allocAttempts {
				*attempts++
				resp, after, err := a.try(ctx, req, want, q, name, state, seq, policy)
				if err == nil {
					hit(key)
					// A retry may be answered with the server its first call
					// took: then that one is allocated and name is untouched.
					got := resp.GetGameServer().GetName()
					s.candidates.settle(got, uint64(resp.GetGameServer().GetSequence()))
					if got != name {
						giveBack(name)
					} else if after.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_ALLOCATED && (q.RoomQuery() || len(want.counters)+len(want.lists) > 0) {
						// Room left, maybe: the next allocation of a query
						// it matches may take it, without waiting for the
						// views.
						s.candidates.put(projections.Row[*eventsv1.GameServerState]{State: after, Sequence: uint64(resp.GetGameServer().GetSequence())})
					}
					return resp, nil
				}
				if _, noRoom := errors.AsType[*events.CounterError](err); noRoom {
					// Its counters or lists have no room for the actions:
					// not a candidate until it changes.
					s.candidates.settle(name, seq)
					break
				}
				if !errors.Is(err, events.ErrConflict) {
					giveBack(name)
					return nil, err
				}
				// Someone wrote to the server since the views saw it: fold
				// what they wrote and try again if it still matches.
				if state, seq, err = a.catchUp(ctx, name, state, seq, !q.Allocated); err != nil {
					return nil, err
				}
				if !q.Matches(state) {
					missed(key)
				}
			}
		}
	}
	return nil, nil
}

// viewsCandidates hands out the servers the views show for q, best first,
// read once when first asked.
func (a *allocationService) viewsCandidates(ctx context.Context, q projections.AllocationQuery) func() (projections.Row[*eventsv1.GameServerState], bool, error) {
	var rows []projections.Row[*eventsv1.GameServerState]
	read := false
	return func() (projections.Row[*eventsv1.GameServerState], bool, error) {
		if !read {
			read = true
			q.Limit = candidateFetch
			var err error
			if rows, err = a.s.opts.Views.AllocationCandidates(ctx, q); err != nil {
				return projections.Row[*eventsv1.GameServerState]{}, false, err
			}
		}
		if len(rows) == 0 {
			return projections.Row[*eventsv1.GameServerState]{}, false, nil
		}
		r := rows[0]
		rows = rows[1:]
		return r, true, nil
	}
}

// exhausted answers that no READY server matches, unless the call retries
// an allocation that the views did not show when it began: a request id's
// first call may have taken the fleet's last READY server and been
// answered, its event not yet projected. With a request id, the views are
// first brought up to the stream's end and asked again.
func (a *allocationService) exhausted(ctx context.Context, req *tetherv1.AllocateGameServerRequest, want allocationRequest) (*tetherv1.AllocateGameServerResponse, error) {
	msg := fmt.Sprintf("no READY game server in %s matches the selectors", req.GetParent())
	if want.asksForRoom() {
		msg = fmt.Sprintf("no game server in %s matches the selectors with room for the allocation", req.GetParent())
	}
	none := &apiError{code: codes.ResourceExhausted, reason: ReasonNoReadyGameServer, msg: msg}
	s := a.s
	id := req.GetRequestId()
	if id == "" || s.opts.Watch == nil {
		return nil, none
	}
	head, err := s.opts.Watch.StreamLastSequence(ctx)
	if err == nil {
		err = s.waitFresh(ctx, head)
	}
	if err != nil {
		s.log.Debug("no READY server; the views could not be brought up to date to look for an earlier call of the request id", "request_id", id, "err", err)
		return nil, none
	}
	gs, seq, ok, err := s.opts.Views.AllocationByRequest(ctx, id)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return a.replay(ctx, gs, seq)
	}
	return nil, none
}

// policy returns the player-session policy of a fleet (a resource name),
// from a replica-wide cache; a deleted or unknown fleet is NOT_FOUND. A
// policy read within policyTTL is served as it is. An older one, up to
// policyMaxStale, is served too while it is read again in the background,
// so that an allocation does not wait on the views for a policy that
// rarely changes (at 100,000 servers and 50 allocations a second, those
// reads were the allocations' slowest step: docs/scaling.md). Without one,
// the call waits for the read. Either way one read per fleet is in flight,
// whatever the number of callers.
func (a *allocationService) policy(ctx context.Context, fleet string) (*eventsv1.PlayerSessionPolicy, error) {
	s := a.s
	c, ok := s.policyCached(fleet)
	age := s.opts.Now().Sub(c.read)
	read := func() (any, error) {
		// A read that ended between the cache's look above and this one
		// answers it.
		if c, ok := s.policyCached(fleet); ok && s.opts.Now().Sub(c.read) < policyTTL {
			return c.policy, nil
		}
		// Shared by every caller waiting for it: it is not ended by one's
		// cancellation, only by the server's stop or its own bound, which
		// is the views' fault, not a caller's deadline. Its span joins the
		// trace of the call that started it.
		rctx, cancel := context.WithTimeoutCause(trace.ContextWithSpan(s.noticeCtx, trace.SpanFromContext(ctx)), policyReadWait, errPolicyReadTimeout)
		defer cancel()
		p, err := a.readPolicy(rctx, fleet)
		if err != nil && errors.Is(context.Cause(rctx), errPolicyReadTimeout) {
			return nil, &apiError{code: codes.Unavailable, reason: ReasonUnavailable,
				msg: fmt.Sprintf("the views did not give fleet %s within %s; retry", fleet, policyReadWait)}
		}
		return p, err
	}
	switch {
	case ok && age < policyTTL:
		return c.policy, nil
	case ok && age < policyMaxStale:
		a.policyReads.DoChan(fleet, read) // in the background; its result goes to the cache
		return c.policy, nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-a.policyReads.DoChan(fleet, read):
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*eventsv1.PlayerSessionPolicy), nil
	}
}

// errPolicyReadTimeout is the cause of a policy read that ran out of
// policyReadWait.
var errPolicyReadTimeout = errors.New("apiserver: a fleet's policy read ran out of its time")

// readPolicy reads a fleet's policy from the views into the cache (one
// row: FleetState); a fleet found deleted or unknown leaves it.
func (a *allocationService) readPolicy(ctx context.Context, fleet string) (*eventsv1.PlayerSessionPolicy, error) {
	s := a.s
	began := s.opts.Now()
	ctx, span := s.tracer.Start(ctx, "allocation.policy")
	f, err := s.opts.Views.FleetState(ctx, fleet)
	deleted := err == nil && f.State.GetDeleted()
	if deleted {
		err = &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: fmt.Sprintf("fleet %s was deleted", fleet)}
	}
	endSpan(span, err)
	switch {
	case deleted || errors.Is(err, projections.ErrNotFound):
		s.policyMu.Lock()
		delete(s.policies, fleet)
		s.policyMu.Unlock()
	case err != nil && ctx.Err() == nil: // not the server's stop, nor the bound (the caller hears of it)
		s.log.Warn("allocation: read a fleet's player-session policy", "fleet", fleet, "err", err)
	}
	if err != nil {
		return nil, err
	}
	p := f.State.GetSpec().GetPlayerSessions()
	s.policyMu.Lock()
	s.policies[fleet] = cachedPolicy{policy: p, read: began}
	s.policyMu.Unlock()
	return p, nil
}

// take takes a candidate from the replica's pool, in a span of its own
// (allocation.candidates): most takes are a pick from a list in memory,
// but one that finds its list empty reads the views and waits for them.
func (a *allocationService) take(ctx context.Context, key string, q projections.AllocationQuery) (projections.Row[*eventsv1.GameServerState], bool, error) {
	ctx, span := a.s.tracer.Start(ctx, "allocation.candidates")
	c, ok, err := a.s.candidates.takeListed(ctx, key, q)
	endSpan(span, err)
	return c, ok, err
}

// endSpan ends a span of the allocation's own, recording err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}

// policyCached returns fleet's policy as last read, if the cache has it.
func (s *Server) policyCached(fleet string) (cachedPolicy, bool) {
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	c, ok := s.policies[fleet]
	return c, ok
}

// cachedPolicy is a fleet's player-session policy as read at a time.
type cachedPolicy struct {
	policy *eventsv1.PlayerSessionPolicy
	read   time.Time
}

// catchUp folds the events appended to a game server after seq. Most
// conflicts are another allocation of the same server: when the last event
// alone shows the server is no longer READY, and the query wants READY
// servers (wantReady), that one direct get decides; a server allocated
// again may still have room for an ALLOCATED query, so that one folds.
// A conflict proves the stream holds events after seq: when the direct
// reads show none (a replica behind the leader answered), they are read
// from the leader, rather than try the same sequence again until the
// call's attempts run out.
func (a *allocationService) catchUp(ctx context.Context, name string, state *eventsv1.GameServerState, seq uint64, wantReady bool) (*eventsv1.GameServerState, uint64, error) {
	subject, err := events.SubjectOf(state)
	if err != nil {
		return nil, 0, err
	}
	last, ok, err := a.s.opts.Store.LastEvent(ctx, subject)
	if err != nil {
		return nil, 0, err
	}
	if ok && last.Sequence > seq && wantReady && events.NotReadyAfter(last.Type) {
		taken := proto.CloneOf(state)
		taken.Lifecycle = eventsv1.Lifecycle_LIFECYCLE_UNSPECIFIED // not READY; exact state unknown
		return taken, last.Sequence, nil
	}
	evs, err := a.s.opts.Store.History(ctx, subject, seq+1)
	if err == nil && len(evs) == 0 {
		evs, err = a.s.opts.Store.CurrentHistory(ctx, subject, seq+1)
	}
	if err != nil {
		return nil, 0, err
	}
	for _, e := range evs {
		next, err := events.ApplyGameServer(state, e)
		switch {
		case events.Skipped(err):
			// Not the server's, or not an event: the projector
			// dead-letters it too, and its sequence guards the append.
			a.s.log.Error("event skipped: its writer may not write it, or it is not an event", "game_server", name, "sequence", e.Sequence, "type", e.Type, "err", err)
		case err != nil:
			return nil, 0, fmt.Errorf("fold %s: %w", name, err)
		default:
			state = next
		}
		seq = e.Sequence
	}
	return state, seq, nil
}

// try allocates one game server, guarded by seq: a new game session on a
// READY server, or another match on an ALLOCATED one (q.Allocated), with
// the request's counter and list actions. It returns the answer and the
// server as the allocation left it.
func (a *allocationService) try(ctx context.Context, req *tetherv1.AllocateGameServerRequest, want allocationRequest, q projections.AllocationQuery, name string,
	state *eventsv1.GameServerState, seq uint64, policy *eventsv1.PlayerSessionPolicy) (*tetherv1.AllocateGameServerResponse, *eventsv1.GameServerState, error) {
	s := a.s
	alloc := &eventsv1.GameServerAllocated{Labels: req.GetLabels(), Annotations: req.GetAnnotations()}
	if !q.Allocated {
		maxPlayers := req.GetGameSession().GetMaxPlayers()
		if maxPlayers == 0 {
			maxPlayers = policy.GetMaxPlayers()
		}
		alloc.GameSession = events.GameSessionName(events.NewID("gsess"))
		alloc.Properties, alloc.MaxPlayers = req.GetGameSession().GetProperties(), maxPlayers
		for i, p := range req.GetPlayers() {
			alloc.Players = append(alloc.Players, &eventsv1.PlayerReservation{
				PlayerSession: events.NewID("ps"), PlayerId: p.GetPlayerId(), PlayerData: p.GetPlayerData(), Slot: int32(i),
			})
		}
	}
	msgs, err := events.DecideGameServer(name, state, events.Allocate{Allocated: alloc, Again: q.Allocated, Counters: want.counters, Lists: want.lists})
	if err != nil {
		return nil, nil, err
	}
	if len(msgs) != 1 {
		return nil, nil, fmt.Errorf("allocation: %s decided %d events, not one", name, len(msgs))
	}
	stamp := s.stamp(ctx, req.GetRequestId())
	if id := req.GetRequestId(); id != "" {
		// The id does not depend on the server chosen: a concurrent retry
		// that picked another server is de-duplicated by the stream.
		stamp.EventID = AllocationEventID(id)
	}
	env := stamp.Envelopes(name, msgs)[0]
	subject, err := events.SubjectOf(state)
	if err != nil {
		return nil, nil, err
	}
	got, dup, err := a.append(ctx, subject, seq, env)
	if err != nil {
		return nil, nil, err
	}
	if dup {
		// Another call with this request id stored its allocation first,
		// maybe on another server: answer with what is stored.
		markRepeated(ctx)
		stored, err := s.opts.Store.Event(ctx, got)
		if err != nil {
			return nil, nil, err
		}
		if err := checkFingerprint(ctx, req.GetRequestId(), stored.RequestFingerprint); err != nil {
			return nil, nil, err
		}
		if stored.Aggregate != name {
			resp, err := a.replay(ctx, stored.Aggregate, got)
			return resp, nil, err
		}
		switch d := stored.Data.(type) {
		case *eventsv1.GameServerAllocated:
			alloc = d
		case *eventsv1.GameServerReallocated:
		default:
			return nil, nil, fmt.Errorf("allocation: event %d is %s, not the allocation of request %s", got, stored.Type, req.GetRequestId())
		}
		env = stored
	}
	env.Sequence = got
	after, err := events.ApplyGameServer(state, env)
	if err != nil {
		return nil, nil, err
	}
	a.s.refreshAgent(ctx, after, "allocation")
	if _, again := env.Data.(*eventsv1.GameServerReallocated); again {
		return reallocatedResponse(after, got), after, nil
	}
	created := events.SessionCreated(name, state.GetHost(), alloc, policy, env.Time, req.GetRequestId())
	sessionSeq, err := a.createSession(ctx, env, created)
	if err != nil {
		// The allocation stands; the controller creates the session from it.
		s.log.Warn("allocation: game session not created yet; the controller will", "game_server", name, "game_session", alloc.GetGameSession(), "err", err)
		sessionSeq = got
	}
	return a.response(after, got, created, max(got, sessionSeq)), after, nil
}

// reallocatedResponse answers an allocation into an ALLOCATED server: the
// server as it left it, and the game session it runs (named, with its
// properties; GetGameSession reads its players).
func reallocatedResponse(gs *eventsv1.GameServerState, gsSeq uint64) *tetherv1.AllocateGameServerResponse {
	return &tetherv1.AllocateGameServerResponse{
		GameServer: gameServerToAPI(gs, gsSeq),
		GameSession: &tetherv1.GameSession{
			Name: gs.GetGameSession(), GameServer: gs.GetName(), State: tetherv1.GameSession_ACTIVE,
			Properties: gs.GetAllocation().GetProperties(),
		},
		Endpoint: endpointOf(gs),
	}
}

// append appends an allocation guarded by seq, with the store's TryAppend,
// which on a failed guard answers at once without looking for the event:
// duplicate is true when the event (by its id) was stored already, by a
// concurrent retry of the request, which a failed guard can hide: the
// retry's own append moved the server past seq. Then the server's last
// event is ours, and the allocation stands. Any other writer's event last
// is a conflict (events.ErrConflict), which the caller folds.
func (a *allocationService) append(ctx context.Context, subject string, seq uint64, env events.Envelope) (got uint64, duplicate bool, err error) {
	store := a.s.opts.Store
	got, duplicate, err = store.TryAppend(ctx, subject, seq, env)
	if !errors.Is(err, events.ErrConflict) || env.RequestID == "" {
		return got, duplicate, err
	}
	last, ok, lerr := store.LastEvent(ctx, subject)
	if lerr != nil {
		return 0, false, lerr
	}
	if !ok || last.ID != env.ID {
		return 0, false, err
	}
	return last.Sequence, true, nil
}

// createSession appends GameSessionCreated as the first event of the game
// session's subject, stamped as following from the allocation
// (events.After). Its id derives from the allocation event's, so a replica
// retrying and the controller repairing write it once.
func (a *allocationService) createSession(ctx context.Context, allocated events.Envelope, created *eventsv1.GameSessionCreated) (uint64, error) {
	name := allocated.Data.(*eventsv1.GameServerAllocated).GetGameSession()
	stamp := events.After(allocated, a.s.producer)
	stamp.EventID = SessionCreatedID(allocated.ID)
	env := stamp.Envelopes(name, []proto.Message{created})[0]
	seq, err := a.s.opts.Store.Append(ctx, events.MustSubject(name), 0, env)
	if errors.Is(err, events.ErrConflict) {
		return a.s.opts.Store.LastSequence(ctx, events.MustSubject(name))
	}
	return seq, err
}

// AllocationEventID is the event id of the GameServerAllocated of request
// id requestID, whichever server it takes.
func AllocationEventID(requestID string) string {
	return events.DerivedID("allocate", requestID)
}

// SessionCreatedID is the event id of the GameSessionCreated that follows
// the GameServerAllocated with id allocationID.
func SessionCreatedID(allocationID string) string {
	return events.DerivedID("session-created", allocationID)
}

// noticeWait bounds the sending of an allocation notice: the commands
// stream's election (4-9 s) included.
const noticeWait = jsclient.DefaultUnavailableWait + time.Second

// refreshAgent tells the agent of state's host to re-read the server, so
// that the game learns of a change to it (an allocation, a counter)
// through WatchGameServer at once. The notice is sent in the background:
// the change is stored, and the caller's answer does not wait on the
// commands stream (leaderless for seconds in a NATS election). A lost
// notice delays the game's news until the agent's periodic sync, as does
// the server's stop; it is logged, with what, not returned.
func (s *Server) refreshAgent(ctx context.Context, state *eventsv1.GameServerState, what string) {
	if s.opts.Commands == nil {
		return
	}
	// The call's span goes along, its cancellation does not: the server's
	// stop ends what is left.
	ctx, cancel := context.WithTimeout(trace.ContextWithSpan(s.noticeCtx, trace.SpanFromContext(ctx)), noticeWait)
	s.notices.Go(func() {
		defer cancel()
		host, err := events.ParseHostName(state.GetHost())
		if err != nil {
			s.log.Warn(what+": server has no valid host", "game_server", state.GetName(), "err", err)
			return
		}
		cmd := &agentv1.Command{Action: &agentv1.Command_Refresh{Refresh: &agentv1.RefreshGameServer{GameServer: state.GetName()}}}
		if err := s.opts.Commands.Send(ctx, host, s.producer, cmd); err != nil {
			s.log.Warn(what+": notify agent", "game_server", state.GetName(), "host", host, "err", err)
		}
	})
}

// replay answers a retried allocation with the first one's result, read
// from the stream.
func (a *allocationService) replay(ctx context.Context, gameServer string, seq uint64) (*tetherv1.AllocateGameServerResponse, error) {
	markRepeated(ctx)
	s := a.s
	env, err := s.opts.Store.Event(ctx, seq)
	if err != nil {
		return nil, err
	}
	alloc, ok := env.Data.(*eventsv1.GameServerAllocated)
	_, again := env.Data.(*eventsv1.GameServerReallocated)
	if !ok && !again || env.Aggregate != gameServer {
		return nil, fmt.Errorf("allocation replay: event %d is %s on %s, not an allocation of %s", seq, env.Type, env.Aggregate, gameServer)
	}
	if err := checkFingerprint(ctx, env.RequestID, env.RequestFingerprint); err != nil {
		return nil, err
	}
	if err := s.waitFresh(ctx, seq); err != nil {
		return nil, err
	}
	row, err := s.opts.Views.GameServer(ctx, gameServer)
	if err != nil {
		return nil, err
	}
	if again {
		// The server as it is now, with the session it runs.
		return reallocatedResponse(row.State, row.Sequence), nil
	}
	fleetID, _, err := events.ParseGameServerName(gameServer)
	if err != nil {
		return nil, err
	}
	policy, err := a.policy(ctx, events.FleetName(fleetID))
	if err != nil {
		return nil, err
	}
	created := events.SessionCreated(gameServer, row.State.GetHost(), alloc, policy, env.Time, env.RequestID)
	// The server may have moved on since; the response shows it as it was
	// right after the allocation, with its current process facts.
	state := proto.CloneOf(row.State)
	state.Lifecycle, state.GameSession, state.Allocation = eventsv1.Lifecycle_LIFECYCLE_ALLOCATED, alloc.GetGameSession(), alloc
	return a.response(state, seq, created, row.Sequence), nil
}

// response builds the allocation's answer, with a token per player.
func (a *allocationService) response(gs *eventsv1.GameServerState, gsSeq uint64, created *eventsv1.GameSessionCreated, seq uint64) *tetherv1.AllocateGameServerResponse {
	s := a.s
	name := gs.GetAllocation().GetGameSession()
	now := s.opts.Now()
	resp := &tetherv1.AllocateGameServerResponse{
		GameServer: gameServerToAPI(gs, gsSeq),
		GameSession: &tetherv1.GameSession{
			Name: name, GameServer: gs.GetName(), State: tetherv1.GameSession_ACTIVE, Properties: created.GetProperties(),
			MaxPlayers: created.GetPolicy().GetMaxPlayers(), PlayerCount: int32(len(created.GetPlayers())),
			ReconnectWindowSeconds: created.GetPolicy().GetReconnectWindowSeconds(), Sequence: int64(seq),
		},
		Endpoint: endpointOf(gs),
	}
	id, _ := events.ParseGameSessionName(name) // built by this package: always valid
	for _, p := range created.GetPlayers() {
		psName := events.PlayerSessionName(id, p.GetPlayerSession())
		resp.PlayerSessions = append(resp.PlayerSessions, &tetherv1.PlayerSession{
			Name: psName, PlayerId: p.GetPlayerId(), PlayerData: p.GetPlayerData(), State: tetherv1.PlayerSession_RESERVED,
			Slot: p.GetSlot(), ReservationDeadline: p.GetReservationDeadline(), Sequence: int64(seq),
			Token: s.opts.Tokens.Sign(psName, now.Add(s.opts.TokenTTL)),
		})
	}
	return resp
}

func endpointOf(gs *eventsv1.GameServerState) *tetherv1.Endpoint {
	e := &tetherv1.Endpoint{Address: gs.GetAddress()}
	for _, p := range gs.GetPorts() {
		e.Ports = append(e.Ports, &tetherv1.Port{Name: p.GetName(), Port: p.GetPort(), Protocol: tetherv1.PortSpec_Protocol(p.GetProtocol())})
	}
	return e
}
