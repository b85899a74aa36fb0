package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/dev"
)

// fault is a misbehaviour injected into one simulated game server.
type fault int

const (
	faultCrash fault = iota + 1 // the process exits with code 139
	faultHang                   // it stops heartbeating and ignores SIGTERM
	faultFlap                   // its SDK connection drops and comes back within the grace
)

// processSDK is the SDK a simulated process calls: its host agent's
// (agent.LocalSDK), the calls a game server makes over the socket.
type processSDK interface {
	Connect(ctx context.Context, token string) (*agent.LocalConn, error)
	Health(ctx context.Context, token string) error
	Ready(ctx context.Context, token string) error
	Shutdown(ctx context.Context, token string) error
	AcceptPlayer(ctx context.Context, token string, req *sdkv1.AcceptPlayerRequest) (*sdkv1.AcceptPlayerResponse, error)
	DisconnectPlayer(ctx context.Context, token string, req *sdkv1.DisconnectPlayerRequest) (*sdkv1.DisconnectPlayerResponse, error)
	RemovePlayer(ctx context.Context, token string, req *sdkv1.RemovePlayerRequest) (*sdkv1.RemovePlayerResponse, error)
}

// readyRetry is how long a simulated process waits to say Ready again
// after the agent refused it, as the example game server does: one that
// gave up stayed STARTING for ever, and held a run's settle phase until
// its timeout.
const readyRetry = time.Second

// host is one simulated host: the agent's process starter and the game
// server processes it runs.
type host struct {
	w   *world
	id  string
	sdk processSDK // its agent's; set once the agent is built

	mu    sync.Mutex
	procs map[string]*process // running, by game server name
	wheel *wheel              // its processes' timed steps; made by the first Start
}

// running lists the host's running processes.
func (h *host) running() []*process {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*process, 0, len(h.procs))
	for _, p := range h.procs {
		out = append(out, p)
	}
	return out
}

// Start implements agent.Processes: a simulated process whose life begins
// when the agent waits on it (after it has recorded ProcessStarted), in the
// agent's own supervising goroutine.
func (h *host) Start(spec agent.ProcessSpec) (agent.Process, error) {
	token := spec.Env["TETHER_GAMESERVER_TOKEN"]
	if token == "" {
		return nil, fmt.Errorf("sim: %s started without a process token", spec.GameServer)
	}
	p := &process{
		h: h, name: spec.GameServer, token: token, pid: int(h.w.pids.Add(1)),
		signals: make(chan syscall.Signal, 4), faults: make(chan fault, 1), readied: make(chan error, 1),
		beat: make(chan struct{}, 1), readyAt: make(chan struct{}, 1),
	}
	h.mu.Lock()
	if h.procs == nil {
		h.procs = map[string]*process{}
		h.wheel = h.w.newHostWheel()
	}
	h.procs[spec.GameServer] = p
	h.mu.Unlock()
	h.w.procs.Store(spec.GameServer, p)
	return p, nil
}

// process is one simulated game server process. It speaks the SDK as the
// example game server does: it opens a held SDK connection, says Ready
// after its start-up time, heartbeats every health period, admits players
// with their tokens, and stops on SIGTERM.
type process struct {
	h       *host
	name    string
	token   string
	pid     int
	signals chan syscall.Signal
	faults  chan fault

	ready   atomic.Bool   // said Ready, and its match is not ending
	ended   atomic.Bool   // Wait has returned: its steps on the wheel are dropped
	hung    atomic.Bool   // stopped heartbeating, ignores SIGTERM
	beat    chan struct{} // its wheel says: heartbeat now
	readyAt chan struct{} // its wheel says: start-up is over, say Ready
	readied chan error    // the answer to its Ready call

	mu   sync.Mutex
	conn *agent.LocalConn
}

// Pid implements agent.Process.
func (p *process) Pid() int { return p.pid }

// Signal implements agent.Process.
func (p *process) Signal(sig syscall.Signal) error {
	select {
	case p.signals <- sig:
	default: // a signal of each kind is pending already; signals coalesce as in POSIX
	}
	return nil
}

// inject hands the process a fault; false if it has one pending.
func (p *process) inject(f fault) bool {
	select {
	case p.faults <- f:
		return true
	default:
		return false
	}
}

// Wait implements agent.Process: it runs the simulated game server until
// it ends. Its host's wheel times its steps (heartbeats, and Ready after
// the start-up time) and tells it when each is due; the calls are its own,
// made here, so that a call the agent holds up (a heartbeat waiting for
// the server's lock while the agent appends its events) holds up this
// process alone, as it would a real one, not every process of its host.
func (p *process) Wait() (agent.ProcessExit, error) {
	// Wait runs on the agent's goroutine for the process: labelled as the
	// simulated process meanwhile, and as the agent again afterwards.
	var exit agent.ProcessExit
	agentCtx := pprof.WithLabels(context.Background(), pprof.Labels(dev.ComponentLabel, dev.ComponentAgent))
	pprof.Do(agentCtx, pprof.Labels(dev.ComponentLabel, componentSimulatedProcesses), func(context.Context) { exit = p.run() })
	return exit, nil
}

// run is the simulated game server's life.
func (p *process) run() agent.ProcessExit {
	w := p.h.w
	defer func() {
		p.ready.Store(false)
		p.ended.Store(true)
		w.procs.CompareAndDelete(p.name, p)
		p.h.mu.Lock()
		if p.h.procs[p.name] == p {
			delete(p.h.procs, p.name)
		}
		p.h.mu.Unlock()
	}()
	ctx := w.ctx
	sdk := p.h.sdk
	startup := w.opts.StartDelay
	if w.opts.SlowStartFraction > 0 && rand.Float64() < w.opts.SlowStartFraction {
		startup = w.opts.SlowStart
		w.count.slowStarts.Add(1)
	}
	// Like the SDK's example game server: connect, heartbeat in the
	// background from the start (one at once, then every HeartbeatInterval
	// ±10%, so that processes do not beat in lockstep), and say Ready once
	// the start-up time has passed, without holding up the heartbeats.
	conn, err := sdk.Connect(ctx, p.token)
	if err != nil {
		return agent.ProcessExit{Code: 2} // the agent forgot it: exit as a real one would
	}
	p.setConn(conn)
	if err := sdk.Health(ctx, p.token); err != nil && ctx.Err() == nil {
		w.count.sdkErrors.Add(1)
	}
	now := time.Now()
	lastBeat := now // when this process last began a heartbeat call
	p.h.wheel.add(step{p: p, kind: stepBeat, at: now.Add(w.nextBeat())})
	p.h.wheel.add(step{p: p, kind: stepReady, at: now.Add(jitter(startup))})
	for {
		select {
		case <-ctx.Done():
			return simulationEnded
		case sig := <-p.signals:
			if sig == syscall.SIGKILL {
				return agent.ProcessExit{Signal: "killed"}
			}
			if !p.hung.Load() { // a hung process does not get to handle SIGTERM
				p.closeConn(eventsv1.DisconnectKind_DISCONNECT_KIND_CLEAN_CLOSE, "process stopping")
				return agent.ProcessExit{Code: 0}
			}
		case f := <-p.faults:
			switch f {
			case faultCrash:
				w.faults.struck(p.name, time.Now())
				return agent.ProcessExit{Code: 139}
			case faultHang:
				w.faults.struck(p.name, time.Now())
				p.hung.Store(true)
			case faultFlap:
				p.flap(ctx)
				lastBeat = time.Time{} // the reset's pause is the fault's, not a late beat
			}
		case <-p.beat:
			if !p.hung.Load() {
				began := time.Now()
				if !lastBeat.IsZero() && began.Sub(lastBeat) > w.opts.HealthPeriod {
					w.count.beatGap(began.Sub(lastBeat))
				}
				lastBeat = began
				if err := sdk.Health(ctx, p.token); err != nil && ctx.Err() == nil {
					w.count.sdkErrors.Add(1)
				}
				w.count.heartbeatCall(time.Since(began), w.opts.HeartbeatInterval)
			}
		case <-p.readyAt:
			go func() { p.readied <- sdk.Ready(ctx, p.token) }()
		case err := <-p.readied:
			if err != nil {
				if ctx.Err() == nil {
					w.count.sdkErrors.Add(1)
					w.log.Warn("simulated server: Ready refused; saying it again", "game_server", p.name, "err", err, "retry_in", readyRetry)
					p.h.wheel.add(step{p: p, kind: stepReady, at: time.Now().Add(readyRetry)})
				}
			} else if !p.hung.Load() {
				p.ready.Store(true)
			}
		}
	}
}

// newHostWheel makes a host's wheel and starts it for the simulation's
// length. Its tick is a tenth of the heartbeat interval, at most 100 ms:
// a beat is late by at most that, well inside the health period.
func (w *world) newHostWheel() *wheel {
	tick := min(w.opts.HeartbeatInterval/10, 100*time.Millisecond)
	horizon := w.opts.HeartbeatInterval + w.opts.HeartbeatInterval/5
	wh := newWheel(tick, int(horizon/tick)+2, w.fireStep)
	go pprof.Do(w.ctx, pprof.Labels(dev.ComponentLabel, componentSimulatedProcesses), wh.run)
	return wh
}

// nextBeat is the time to a process's next heartbeat: HeartbeatInterval
// ±10%.
func (w *world) nextBeat() time.Duration {
	interval := w.opts.HeartbeatInterval
	return interval*9/10 + time.Duration(rand.Int64N(int64(interval/5)+1))
}

// fireStep tells a process that a step came due on its host's wheel (a
// send that never blocks: a process still busy with its last beat skips
// this one, as a real one would), and schedules its next heartbeat.
func (w *world) fireStep(s step) {
	p := s.p
	if p.ended.Load() {
		return // the process is gone; so are its steps
	}
	ch := p.beat
	if s.kind == stepReady {
		ch = p.readyAt
	}
	select {
	case ch <- struct{}{}:
	default:
	}
	if s.kind == stepBeat {
		p.h.wheel.add(step{p: p, kind: stepBeat, at: time.Now().Add(w.nextBeat())})
	}
}

// simulationEnded is how a process ends when the simulation stops: the
// agent is stopping too and records nothing more of it.
var simulationEnded = agent.ProcessExit{Signal: "killed"}

// flap drops the SDK connection (a reset, as when a proxy or the network
// blinks) and reconnects after a pause shorter than the disconnect grace.
func (p *process) flap(ctx context.Context) {
	w := p.h.w
	p.closeConn(eventsv1.DisconnectKind_DISCONNECT_KIND_RESET, "simulated connection reset")
	if !sleepCtx(ctx, time.Duration(rand.Int64N(int64(w.opts.FlapPause)+1))) {
		return
	}
	conn, err := p.h.sdk.Connect(ctx, p.token)
	if err != nil {
		return // being stopped
	}
	p.setConn(conn)
	if err := p.h.sdk.Health(ctx, p.token); err != nil && ctx.Err() == nil {
		w.count.sdkErrors.Add(1)
	}
}

func (p *process) setConn(c *agent.LocalConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conn = c
}

func (p *process) closeConn(kind eventsv1.DisconnectKind, detail string) {
	p.mu.Lock()
	c := p.conn
	p.conn = nil
	p.mu.Unlock()
	if c != nil {
		c.Close(kind, detail)
	}
}

// accept admits a player who connected with their player-session token.
func (p *process) accept(ctx context.Context, playerSession, token string) (*sdkv1.AcceptPlayerResponse, error) {
	return p.h.sdk.AcceptPlayer(ctx, p.token, &sdkv1.AcceptPlayerRequest{PlayerSessionId: playerSession, Token: token})
}

// disconnect reports a player's connection lost.
func (p *process) disconnect(ctx context.Context, playerSession string) error {
	_, err := p.h.sdk.DisconnectPlayer(ctx, p.token, &sdkv1.DisconnectPlayerRequest{PlayerSession: playerSession})
	return err
}

// remove ends a player's session (they left at the end of the match).
func (p *process) remove(ctx context.Context, playerSession string) error {
	_, err := p.h.sdk.RemovePlayer(ctx, p.token, &sdkv1.RemovePlayerRequest{PlayerSession: playerSession})
	return err
}

// shutdown asks for the server to be stopped: the match is over.
func (p *process) shutdown(ctx context.Context) error {
	p.ready.Store(false)
	return p.h.sdk.Shutdown(ctx, p.token)
}

// jitter spreads d over [d/2, 3d/2) so that simulated processes do not beat
// in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(rand.Int64N(int64(d)))
}

// counters are the simulation's own tallies, beside what it reads from the
// stream and the views.
type counters struct {
	published  atomic.Int64 // events the simulated agents appended
	slowStarts atomic.Int64
	sdkErrors  atomic.Int64
	// slowBeats counts heartbeat calls the agent held for longer than a
	// heartbeat interval (the process could not beat again meanwhile), and
	// slowestBeat is the longest heartbeat call, in nanoseconds.
	slowBeats   atomic.Int64
	slowestBeat atomic.Int64
	// beatGaps counts the times a healthy process began a heartbeat call
	// more than a health period after its last (a period the agent must
	// count as missed), and widestGap is the widest, in nanoseconds.
	beatGaps  atomic.Int64
	widestGap atomic.Int64
}

// beatGap notes a gap wider than a health period between two heartbeat
// calls of a process.
func (c *counters) beatGap(d time.Duration) {
	c.beatGaps.Add(1)
	storeMax(&c.widestGap, int64(d))
}

// storeMax raises v to x if x is larger.
func storeMax(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// heartbeatCall notes how long one heartbeat call took.
func (c *counters) heartbeatCall(took, interval time.Duration) {
	if took > interval {
		c.slowBeats.Add(1)
	}
	storeMax(&c.slowestBeat, int64(took))
}
