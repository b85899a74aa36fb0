package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/events"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/apiserver"
)

// maxMatchesInFlight bounds the matches (and their player goroutines) the
// matchmaker runs at once.
const maxMatchesInFlight = 4096

// matchmaker plays a studio's matchmaker and its players: it allocates a
// game server per match through the API, the players join the server with
// their tokens, some drop and rejoin through the API's reconnect call, and
// at the end of the match they leave and the server shuts itself down.
type matchmaker struct {
	w        *world
	alloc    tetherv1.AllocationServiceClient
	sessions tetherv1.GameSessionServiceClient
	slots    chan struct{}
	wg       sync.WaitGroup
	n        atomic.Int64 // request ids

	allocLatency     *latencies
	reconnectLatency *latencies
	allocated        atomic.Int64
	noServer         atomic.Int64 // NO_READY_GAME_SERVER: the fleets were full
	allocErrors      atomic.Int64
	joined           atomic.Int64
	dropped          atomic.Int64
	rejoined         atomic.Int64
	left             atomic.Int64
	matchesEnded     atomic.Int64 // ended by their game, as planned
	matchesLost      atomic.Int64 // ended early: their server failed (an injected fault)
	interrupted      atomic.Int64 // ended early although their server was given no fault
	playerErrors     atomic.Int64
	lastErr          atomic.Value // string
	skipped          atomic.Int64 // matches not started: too many in flight
}

func newMatchmaker(w *world) *matchmaker {
	return &matchmaker{w: w, slots: make(chan struct{}, maxMatchesInFlight), allocLatency: &latencies{}, reconnectLatency: &latencies{}}
}

// run allocates matches until ctx ends, at AllocationRate or, in demand
// mode, at the demand curve's rate; matches under way go on until they end
// (see wait).
func (m *matchmaker) run(ctx context.Context) {
	conn := m.w.conn
	m.alloc, m.sessions = tetherv1.NewAllocationServiceClient(conn), tetherv1.NewGameSessionServiceClient(conn)
	if d := m.w.demand; d != nil {
		arrivals(ctx, m.w.opts.Demand, d.steadyBegan, m.start)
		return
	}
	every(ctx, m.w.opts.AllocationRate, m.start)
}

// start starts a match, unless too many are in flight.
func (m *matchmaker) start() {
	select {
	case m.slots <- struct{}{}:
	default:
		m.skipped.Add(1)
		return
	}
	m.wg.Go(func() {
		defer func() { <-m.slots }()
		m.match(m.w.ctx)
	})
}

// wait returns once every match has ended.
func (m *matchmaker) wait() { m.wg.Wait() }

func (m *matchmaker) fail(what string, err error) {
	m.playerErrors.Add(1)
	m.lastErr.Store(what + ": " + err.Error())
}

// match allocates one server and plays one match on it.
func (m *matchmaker) match(ctx context.Context) {
	o := m.w.opts
	parent := "fleets/-"
	if m.w.demand != nil {
		parent = events.FleetName(demandFleet)
	}
	req := &tetherv1.AllocateGameServerRequest{
		Parent: parent, RequestId: fmt.Sprintf("sim-%d-%d", time.Now().UnixNano(), m.n.Add(1)),
		GameSession: &tetherv1.GameSessionRequest{Properties: map[string]string{"mode": "sim"}},
	}
	for i := range o.PlayersPerMatch {
		req.Players = append(req.Players, &tetherv1.PlayerRequest{PlayerId: fmt.Sprintf("player-%d-%d", m.n.Load(), i)})
	}
	began := time.Now()
	resp, err := m.alloc.AllocateGameServer(ctx, req)
	m.allocLatency.add(time.Since(began))
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		result := allocFailed
		if status.Code(err) == codes.ResourceExhausted || status.Code(err) == codes.FailedPrecondition {
			m.noServer.Add(1)
			if noReadyServer(err) {
				result = allocNoReady
			}
		} else {
			m.allocErrors.Add(1)
			m.lastErr.Store("allocate: " + err.Error())
		}
		m.note(began, result)
		return
	}
	m.note(began, allocOK)
	m.allocated.Add(1)
	server := resp.GetGameServer().GetName()
	var wg sync.WaitGroup
	var lost atomic.Bool
	for _, ps := range resp.GetPlayerSessions() {
		wg.Go(func() {
			if err := m.play(ctx, server, ps); err != nil {
				lost.Store(true)
				if ctx.Err() == nil && !m.serverFailed(server) {
					m.fail("player "+ps.GetName(), err)
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	// The match is over: unless the server failed (an injected fault ends
	// it), its game removes the players and shuts it down, even after a
	// player's failure, so that no server stays ALLOCATED for ever.
	p := m.process(server)
	if p == nil || !m.w.faults.matchEnding(server, time.Now()) {
		m.lose(server)
		return
	}
	for _, ps := range resp.GetPlayerSessions() {
		if err := p.remove(ctx, ps.GetName()); err != nil {
			if !lost.Load() {
				m.fail("remove "+ps.GetName(), err)
			}
			continue
		}
		m.left.Add(1)
	}
	if err := p.shutdown(ctx); err != nil {
		m.fail("shutdown "+server, err)
		return
	}
	if lost.Load() {
		m.lose(server)
		return
	}
	m.matchesEnded.Add(1)
}

// lose counts a match cut short; interrupted, too, if the simulation gave
// its server no fault.
func (m *matchmaker) lose(server string) {
	m.matchesLost.Add(1)
	if !m.serverFailed(server) {
		m.interrupted.Add(1)
	}
}

// note records an allocation's outcome in demand mode.
func (m *matchmaker) note(at time.Time, r outcome) {
	if d := m.w.demand; d != nil {
		d.note(at, r)
	}
}

// noReadyServer reports whether an allocation was refused for want of a
// READY server (ErrorInfo reason NO_READY_GAME_SERVER).
func noReadyServer(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == apiserver.ReasonNoReadyGameServer {
			return true
		}
	}
	return false
}

// serverFailed reports whether the simulation gave the server a fault (a
// player's error is then expected).
func (m *matchmaker) serverFailed(server string) bool { return m.w.faults.faulted(server) }

// process finds a running simulated process by game server name.
func (m *matchmaker) process(server string) *process {
	v, ok := m.w.procs.Load(server)
	if !ok {
		return nil
	}
	return v.(*process)
}

// play is one player: join; maybe drop and rejoin through the API's
// reconnect call; stay until the match ends.
func (m *matchmaker) play(ctx context.Context, server string, ps *tetherv1.PlayerSession) error {
	o := m.w.opts
	if err := m.join(ctx, server, ps.GetName(), ps.GetToken()); err != nil {
		return err
	}
	m.joined.Add(1)
	end := time.Now().Add(o.MatchLength)
	if rand.Float64() < o.DropFraction {
		if !sleepCtx(ctx, time.Duration(rand.Int64N(int64(o.MatchLength/2)+1))) {
			return nil
		}
		p := m.process(server)
		if p == nil {
			return errors.New("the game server is gone")
		}
		if err := p.disconnect(ctx, ps.GetName()); err != nil {
			return fmt.Errorf("disconnect: %w", err)
		}
		m.dropped.Add(1)
		if !sleepCtx(ctx, time.Duration(rand.Int64N(int64(time.Second)))) {
			return nil
		}
		began := time.Now()
		var rc *tetherv1.ReconnectPlayerSessionResponse
		var err error
		// ABORTED says the game session changed while the call decided (its
		// players come and go at once): read again and retry, as the API
		// asks a client to.
		for range 10 {
			rc, err = m.sessions.ReconnectPlayerSession(ctx, &tetherv1.ReconnectPlayerSessionRequest{Name: ps.GetName(), MinSequence: ps.GetSequence()})
			if status.Code(err) != codes.Aborted || !sleepCtx(ctx, time.Duration(10+rand.Int64N(40))*time.Millisecond) {
				break
			}
		}
		m.reconnectLatency.add(time.Since(began))
		if err != nil {
			return fmt.Errorf("reconnect: %w", err)
		}
		if rc.GetPlayerSession().GetSlot() != ps.GetSlot() {
			return fmt.Errorf("reconnect gave slot %d, the player had %d", rc.GetPlayerSession().GetSlot(), ps.GetSlot())
		}
		if err := m.join(ctx, server, ps.GetName(), rc.GetToken()); err != nil {
			return fmt.Errorf("rejoin: %w", err)
		}
		m.rejoined.Add(1)
	}
	sleepCtx(ctx, time.Until(end))
	return nil
}

// join connects a player to the game server, which admits them with the
// token. The agent learns of the allocation through a refresh command, so
// a player arriving first is told the server is not allocated yet: they
// retry for a bounded time, as a game client retries its connection.
func (m *matchmaker) join(ctx context.Context, server, playerSession, token string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := m.process(server)
		if p == nil {
			return errors.New("the game server is gone")
		}
		_, err := p.accept(ctx, playerSession, token)
		if err == nil {
			return nil
		}
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			return fmt.Errorf("accept %s on %s: %w", playerSession, server, err)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// sleepCtx waits d or until ctx ends (false then).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fleetID names fleet i (0-based).
func fleetID(i int) string { return fmt.Sprintf("sim-%d", i+1) }

// createFleets creates the fleets through the API, splitting every host
// slot between them.
func (w *world) createFleets(ctx context.Context) error {
	fleets := tetherv1.NewFleetServiceClient(w.conn)
	total := w.opts.Hosts * w.opts.ServersPerHost
	for i := range w.opts.Fleets {
		replicas := total / w.opts.Fleets
		if i < total%w.opts.Fleets {
			replicas++
		}
		_, err := fleets.CreateFleet(ctx, &tetherv1.CreateFleetRequest{FleetId: fleetID(i), RequestId: "sim-fleet-" + fleetID(i), Fleet: w.fleetSpec(replicas)})
		if err != nil {
			return fmt.Errorf("sim: create fleet %s: %w", fleetID(i), err)
		}
	}
	return nil
}

// fleetSpec is a simulated fleet of replicas servers.
func (w *world) fleetSpec(replicas int) *tetherv1.Fleet {
	return &tetherv1.Fleet{
		Replicas: int32(replicas),
		Template: fleetTemplate(nil),
		Health: &tetherv1.HealthPolicy{
			InitialDelaySeconds: int32((w.opts.SlowStart + time.Second) / time.Second),
			PeriodSeconds:       int32(w.opts.HealthPeriod / time.Second), FailureThreshold: int32(w.opts.FailureThreshold),
		},
		SdkDisconnectGraceSeconds: int32(w.opts.SDKGrace / time.Second),
		PlayerSessions: &tetherv1.PlayerSessionPolicy{
			MaxPlayers: int32(w.opts.PlayersPerMatch), ReservationTimeoutSeconds: 30, ReconnectWindowSeconds: 30,
		},
		Scheduling: tetherv1.Fleet_DISTRIBUTED,
		Labels:     map[string]string{"sim": "true"},
	}
}

// latencies collects durations for percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = append(l.d, d)
}

// summary returns count, p50, p99 and max in milliseconds.
func (l *latencies) summary() Latency {
	l.mu.Lock()
	defer l.mu.Unlock()
	return summarize(l.d)
}
