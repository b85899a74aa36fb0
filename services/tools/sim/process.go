package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	"github.com/tetherhq/tether/services/agent"
)

// fault is a misbehaviour injected into one simulated game server.
type fault int

const (
	faultCrash fault = iota + 1 // the process exits with code 139
	faultHang                   // it stops heartbeating and ignores SIGTERM
	faultFlap                   // its SDK connection drops and comes back within the grace
)

// host is one simulated host: the agent's process starter and the game
// server processes it runs.
type host struct {
	w   *world
	id  string
	sdk *agent.LocalSDK // set once the agent is built

	mu    sync.Mutex
	procs map[string]*process // running, by game server name
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
		signals: make(chan syscall.Signal, 4), faults: make(chan fault, 1),
	}
	h.mu.Lock()
	if h.procs == nil {
		h.procs = map[string]*process{}
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

	ready atomic.Bool // said Ready, and its match is not ending

	mu   sync.Mutex
	conn *agent.LocalConn
	hung bool
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
// it ends.
func (p *process) Wait() (agent.ProcessExit, error) {
	w := p.h.w
	defer func() {
		p.ready.Store(false)
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
		return agent.ProcessExit{Code: 2}, nil // the agent forgot it: exit as a real one would
	}
	p.setConn(conn)
	if err := sdk.Health(ctx, p.token); err != nil && ctx.Err() == nil {
		w.count.sdkErrors.Add(1)
	}
	interval := w.opts.HeartbeatInterval
	next := func() time.Duration { return interval*9/10 + time.Duration(rand.Int64N(int64(interval/5)+1)) }
	beat := time.NewTimer(next())
	defer beat.Stop()
	readyAt := time.NewTimer(jitter(startup))
	defer readyAt.Stop()
	readied := make(chan error, 1)
	for {
		select {
		case <-ctx.Done():
			return simulationEnded, nil
		case sig := <-p.signals:
			if sig == syscall.SIGKILL {
				return agent.ProcessExit{Signal: "killed"}, nil
			}
			if !p.isHung() { // a hung process does not get to handle SIGTERM
				p.closeConn(eventsv1.DisconnectKind_DISCONNECT_KIND_CLEAN_CLOSE, "process stopping")
				return agent.ProcessExit{Code: 0}, nil
			}
		case f := <-p.faults:
			switch f {
			case faultCrash:
				w.faults.struck(p.name, time.Now())
				return agent.ProcessExit{Code: 139}, nil
			case faultHang:
				w.faults.struck(p.name, time.Now())
				p.mu.Lock()
				p.hung = true
				p.mu.Unlock()
			case faultFlap:
				p.flap(ctx)
			}
		case <-readyAt.C:
			go func() { readied <- sdk.Ready(ctx, p.token) }()
		case err := <-readied:
			if err != nil {
				if ctx.Err() == nil {
					w.count.sdkErrors.Add(1)
					w.log.Warn("simulated server: Ready refused", "game_server", p.name, "err", err)
				}
			} else if !p.isHung() {
				p.ready.Store(true)
			}
		case <-beat.C:
			if !p.isHung() {
				if err := sdk.Health(ctx, p.token); err != nil && ctx.Err() == nil {
					w.count.sdkErrors.Add(1)
				}
			}
			beat.Reset(next())
		}
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

func (p *process) isHung() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hung
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
}
