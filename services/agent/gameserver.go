package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jonboulle/clockwork"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/write"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

// maxRecordAttempts bounds re-reads after append conflicts.
const maxRecordAttempts = 8

// finalEventTimeout bounds the recording of events while the agent stops.
const finalEventTimeout = 5 * time.Second

// gameServer is one game server supervised by the agent: its process, its
// token, and its state folded from the event stream (including what other
// writers, such as the controller, appended).
type gameServer struct {
	a       *Agent
	name    string
	subject string
	token   string
	log     *slog.Logger
	spec    *agentv1.StartGameServer
	logPath string
	// pid is the running process's id, 0 while none runs; read without mu
	// (by the host heartbeat, which must not wait for a server's appends).
	pid atomic.Int64
	// lastHeartbeat is when the process last sent an SDK heartbeat, in
	// Unix nanoseconds (0: none yet); read without mu by the host
	// heartbeat, which shows it to the API.
	lastHeartbeat atomic.Int64
	// pendingConn is the connection a heartbeat proved that is not folded
	// yet (gameServer.heartbeat); nil: none.
	pendingConn atomic.Pointer[pendingConnect]
	// folding is true while a background fold of heartbeats runs.
	folding atomic.Bool
	// readyCalls counts the process's Ready calls under way (readyCall):
	// while one is, the ready timeout waits for it.
	readyCalls atomic.Int32

	// mu guards everything below and serialises the server's appends.
	mu        sync.Mutex
	state     *eventsv1.GameServerState
	seq       uint64 // last stream sequence folded into state
	ports     []int
	proc      Process
	attempt   int
	stopping  bool
	notice    *sdkv1.ShutdownNotice
	killTimer clockwork.Timer
	check     *healthCheck // nil until the process starts
	resync    bool         // some of its events went through the outbox
	// notifyTrace is the trace of an allocation folded but not yet sent
	// to the process's WatchGameServer stream: the send's span joins it.
	notifyTrace trace.SpanContext
	streams     atomic.Int32  // open SDK streams; changed without mu (streamOpened)
	changed     chan struct{} // closed and replaced on every change
	done        chan struct{} // closed when the server is finished
}

func newToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error on supported platforms.
	return hex.EncodeToString(b[:])
}

// handle carries out one command.
func (a *Agent) handle(ctx context.Context, cmd *agentv1.Command) error {
	switch c := cmd.GetAction().(type) {
	case *agentv1.Command_Start:
		return a.start(ctx, c.Start)
	case *agentv1.Command_Stop:
		a.mu.Lock()
		gs := a.servers[c.Stop.GetGameServer()]
		a.mu.Unlock()
		if gs == nil {
			a.log.Info("stop for a game server not running here", "game_server", c.Stop.GetGameServer())
			return nil
		}
		gs.refresh(ctx)
		deadline := a.opts.Clock.Now().Add(shutdownGrace)
		if d := c.Stop.GetDeadline(); d != nil {
			deadline = d.AsTime()
		}
		gs.stop(c.Stop.GetReason(), deadline)
		return nil
	case *agentv1.Command_Refresh:
		a.mu.Lock()
		gs := a.servers[c.Refresh.GetGameServer()]
		a.mu.Unlock()
		if gs != nil {
			gs.refresh(ctx)
		}
		return nil
	}
	return fmt.Errorf("agent: command %s has no action", cmd.GetId())
}

// startSubject is the subject a start command says the server's events are
// on: its host subject (events.GameServerSubject) on this agent's host, or,
// from a controller before host subjects, the server's subject without
// one. Any other is refused.
func (a *Agent) startSubject(spec *agentv1.StartGameServer) (string, error) {
	name := spec.GetGameServer()
	subject := spec.GetSubject()
	if subject == "" {
		return events.Subject(name)
	}
	own, err := events.GameServerSubject(name, a.host)
	if err != nil {
		return "", err
	}
	legacy, err := events.Subject(name)
	if err != nil {
		return "", err
	}
	if subject != own && subject != legacy {
		return "", fmt.Errorf("agent: start %s: subject %q is neither %q nor %q", name, subject, own, legacy)
	}
	return subject, nil
}

// start launches a scheduled game server; a duplicate start is a no-op.
func (a *Agent) start(ctx context.Context, spec *agentv1.StartGameServer) error {
	name := spec.GetGameServer()
	fleet, id, err := events.ParseGameServerName(name)
	if err != nil {
		return err
	}
	subject, err := a.startSubject(spec)
	if err != nil {
		return err
	}
	a.mu.Lock()
	if _, running := a.servers[name]; running {
		a.mu.Unlock()
		return nil
	}
	gs := &gameServer{
		a: a, name: name, subject: subject, token: newToken(),
		log: a.log.With("game_server", name), spec: spec,
		logPath: filepath.Join(a.logs.root, fleet, id),
		changed: make(chan struct{}), done: make(chan struct{}),
	}
	a.servers[name] = gs
	a.tokens[gs.token] = gs
	a.mu.Unlock()

	// Read as the stream's leader has it: a replica behind it (cut off
	// in a minority partition) may not hold the server yet, and a start
	// ignored for that would leave it SCHEDULED until the controller's
	// start deadline. A server that cannot be read is started on the
	// command's redelivery.
	gs.mu.Lock()
	err = gs.foldNewer(ctx, a.opts.Store.CurrentHistory)
	gs.mu.Unlock()
	if err != nil {
		a.forget(gs)
		return retryLater{fmt.Errorf("agent: start %s: read its history: %w", name, err)}
	}
	if l := gs.lifecycle(); l != eventsv1.Lifecycle_LIFECYCLE_SCHEDULED {
		gs.log.Warn("start for a game server that is not SCHEDULED; ignored", "state", events.LifecycleName(l))
		a.forget(gs)
		return nil
	}
	ports, err := a.ports.take(a.opts.Address, len(spec.GetTemplate().GetPorts()))
	if err != nil {
		gs.recordDetached(events.Terminate{Reason: eventsv1.Reason_REASON_PROCESS_START_FAILED, Evidence: &eventsv1.Evidence{Detail: err.Error()}})
		a.forget(gs)
		return err
	}
	gs.ports = ports
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		gs.supervise(ctx)
	}()
	return nil
}

// forget removes a finished server from the agent.
func (a *Agent) forget(gs *gameServer) {
	a.mu.Lock()
	delete(a.servers, gs.name)
	delete(a.tokens, gs.token)
	a.mu.Unlock()
	a.ports.release(gs.ports)
}

// byToken returns the server a process token belongs to.
func (a *Agent) byToken(token string) *gameServer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokens[token]
}

// stopAll stops every server now (the agent is shutting down).
func (a *Agent) stopAll() {
	list := a.snapshot()
	deadline := a.opts.Clock.Now().Add(2 * time.Second)
	for _, gs := range list {
		gs.recordDetached(events.RequestShutdown{Reason: eventsv1.Reason_REASON_HOST_SHUTDOWN, Deadline: deadline,
			Evidence: &eventsv1.Evidence{RequestedBy: a.producer, Detail: "the agent is stopping"}})
		gs.stop(eventsv1.Reason_REASON_HOST_SHUTDOWN, deadline)
	}
}

// supervise runs the process until the server is finished: a crash before
// Ready is restarted with doubling backoff up to MaxStartAttempts.
func (gs *gameServer) supervise(ctx context.Context) {
	defer func() {
		gs.mu.Lock()
		if gs.killTimer != nil {
			gs.killTimer.Stop()
		}
		close(gs.done)
		gs.notifyLocked()
		gs.mu.Unlock()
		gs.a.forget(gs)
		gs.a.logs.release(gs.name)
	}()
	backoff := gs.a.opts.RestartBackoff
	for {
		gs.mu.Lock()
		gs.attempt++
		attempt, stopping := gs.attempt, gs.stopping
		gs.mu.Unlock()
		if stopping {
			gs.recordDetached(events.Terminate{Reason: gs.stopReason(), Evidence: &eventsv1.Evidence{Detail: "stopped before the process started", StartAttempts: int32(attempt - 1)}})
			return
		}
		proc, err := gs.launch(attempt)
		if err != nil {
			gs.log.Error("game server process did not start", "err", err)
			gs.recordDetached(events.Terminate{Reason: eventsv1.Reason_REASON_PROCESS_START_FAILED, Evidence: &eventsv1.Evidence{Detail: err.Error(), StartAttempts: int32(attempt)}})
			return
		}
		end, werr := proc.Wait()
		if werr != nil {
			gs.log.Error("wait for game server process", "err", werr)
		}
		exited := exitFacts(end, attempt)
		if ctx.Err() != nil && !gs.a.opts.KillProcessesOnExit {
			// The agent is stopping and leaves its processes be: it no longer
			// supervises them, and records nothing more of them. The
			// process record stays, so the next agent on the host finds the
			// server whose process had ended and terminates it.
			gs.log.Info("agent stopping; process end not recorded (the next agent will)", "pid", proc.Pid())
			return
		}
		gs.forgetProcess()
		gs.mu.Lock()
		gs.proc = nil
		gs.pid.Store(0)
		exited.BeforeReady = !gs.state.GetEverReady()
		restart := exited.BeforeReady && !gs.stopping && attempt < gs.a.opts.MaxStartAttempts && ctx.Err() == nil
		var lastBeat time.Time // the real last heartbeat; events only record connects and misses
		if gs.check != nil {
			if at := gs.lastArrival(); !at.IsZero() {
				gs.check.heartbeat(at) // a beat not folded yet (an older one changes nothing)
			}
			lastBeat = gs.check.lastBeat
		}
		gs.mu.Unlock()
		exited.WillRestart = restart
		gs.log.Info("game server process exited", "pid", proc.Pid(), "exit", describeExit(end), "attempt", attempt, "restart", restart)
		if !restart {
			if gs.lifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
				gs.log.Info("process of a server already terminated elsewhere has ended")
				return
			}
			gs.recordDetached(events.RecordExit{Exited: exited, LastHeartbeat: lastBeat})
			return
		}
		if err := gs.record(ctx, events.RecordExit{Exited: exited, LastHeartbeat: lastBeat}); err != nil {
			gs.log.Error("record process exit", "err", err)
		}
		select {
		case <-ctx.Done():
			gs.recordDetached(events.Terminate{Reason: eventsv1.Reason_REASON_HOST_SHUTDOWN,
				Evidence: &eventsv1.Evidence{Detail: "the agent stopped while the process waited to restart", StartAttempts: int32(attempt)}})
			return
		case <-gs.a.opts.Clock.After(backoff):
		}
		backoff *= 2
	}
}

// exitFacts turns a process's end into a ProcessExited payload.
func exitFacts(end ProcessExit, attempt int) *eventsv1.ProcessExited {
	x := &eventsv1.ProcessExited{Attempt: int32(attempt)}
	if end.Signal != "" {
		x.Signal = end.Signal
		return x
	}
	x.ExitCode = proto.Int32(int32(end.Code))
	return x
}

// launch starts the process and records ProcessStarted.
func (gs *gameServer) launch(attempt int) (Process, error) {
	t := gs.spec.GetTemplate()
	path, err := gs.a.allowed.resolve(t.GetCommand())
	if err != nil {
		return nil, err
	}
	// The environment is built here, not inherited: nothing of the agent's
	// own (player-token keys, credentials' paths) reaches a game server.
	home := os.Getenv("HOME")
	var cred *syscall.Credential
	if gs.a.runAs != nil {
		home, cred = gs.a.runAs.home, gs.a.runAs.cred
	}
	env := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": home,
		"TETHER_GAMESERVER": gs.name, EnvToken: gs.token,
		"TETHER_SDK_ADDR": gs.a.SDKAddr(), "TETHER_SDK_HTTP": "http://" + gs.a.SDKHTTPAddr(),
	}
	gs.templateEnv(env, t.GetEnv())
	var ports []*eventsv1.Port
	for i, p := range t.GetPorts() {
		env["TETHER_PORT_"+envName(p.GetName())] = strconv.Itoa(gs.ports[i])
		ports = append(ports, &eventsv1.Port{Name: p.GetName(), Port: int32(gs.ports[i]), Protocol: p.GetProtocol()})
	}
	args := gs.expandArgs(t.GetArgs(), env)
	// The lock is held from exec until ProcessStarted is recorded: a process
	// can call the SDK at once, and a call recorded first (SdkConnected)
	// would be undone by ProcessStarted, which starts the process's
	// connection afresh; the next call would then record a second connect.
	// Its calls wait for the record instead (a heartbeat leaves its
	// connection to a background fold, which waits: gameServer.heartbeat).
	out, err := gs.a.logs.output(gs.name)
	if err != nil {
		return nil, fmt.Errorf("game server log: %w", err)
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	// What the last process's heartbeats left is not the new process's.
	gs.pendingConn.Store(nil)
	gs.lastHeartbeat.Store(0)
	proc, err := gs.a.opts.Processes.Start(ProcessSpec{
		GameServer: gs.name, Command: t.GetCommand(), Path: path, Args: args, Env: env, Credential: cred,
		Stdout: out.stdoutW, Stderr: out.stderrW, KeepOpen: out.keep, DieWithAgent: gs.a.opts.KillProcessesOnExit,
	})
	out.started(err == nil)
	if err != nil {
		return nil, err
	}
	pid := proc.Pid()
	gs.recordProcess(pid)
	gs.proc = proc
	gs.pid.Store(int64(pid))
	gs.check = newHealthCheck(gs.spec.GetHealth(), time.Duration(gs.spec.GetSdkDisconnectGraceSeconds())*time.Second, gs.a.opts.Clock.Now())
	gs.log.Info("game server process started", "pid", pid, "attempt", attempt, "log", gs.logPath)
	ctx, cancel := context.WithTimeout(context.Background(), finalEventTimeout)
	defer cancel()
	if err := gs.recordLocked(ctx, events.RecordProcessStart{Started: &eventsv1.ProcessStarted{
		Pid: int32(pid), Address: gs.a.opts.Address, Ports: ports, LogPath: gs.logPath, Attempt: int32(attempt),
	}}); err != nil {
		gs.log.Error("record process start", "pid", pid, "err", err)
	}
	return proc, nil
}

// describeExit says how a process ended, for logs: "exit code 3" or
// "signal killed".
func describeExit(end ProcessExit) string {
	if end.Signal != "" {
		return "signal " + end.Signal
	}
	return "exit code " + strconv.Itoa(end.Code)
}

// envName turns a port name into its environment suffix: "game-udp" → "GAME_UDP".
func envName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// stop tells the process to stop: a shutdown notice to its SDK watchers,
// SIGTERM to its process group, and SIGKILL at the deadline.
func (gs *gameServer) stop(reason eventsv1.Reason, deadline time.Time) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.stopping {
		return
	}
	gs.stopping = true
	gs.notice = &sdkv1.ShutdownNotice{Deadline: timestamppb.New(deadline), Reason: events.ReasonName(reason)}
	gs.notifyLocked()
	if gs.proc == nil {
		return
	}
	proc := gs.proc
	gs.log.Info("stopping game server", "reason", events.ReasonName(reason), "deadline", deadline)
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		gs.log.Warn("SIGTERM failed", "pid", proc.Pid(), "err", err)
	}
	gs.recordSignalLocked(syscall.SIGTERM, reason, deadline)
	gs.killTimer = gs.a.opts.Clock.AfterFunc(gs.a.opts.Clock.Until(deadline), func() {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		if gs.proc != proc {
			return // it exited in time
		}
		gs.log.Warn("shutdown deadline passed; killing", "pid", proc.Pid())
		if err := proc.Signal(syscall.SIGKILL); err != nil {
			gs.log.Warn("SIGKILL failed", "pid", proc.Pid(), "err", err)
		}
		gs.recordSignalLocked(syscall.SIGKILL, reason, deadline)
	})
}

// recordSignalLocked records a stop signal sent to the process (each step
// of a termination is an event).
func (gs *gameServer) recordSignalLocked(sig syscall.Signal, reason eventsv1.Reason, deadline time.Time) {
	if gs.state.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
		return // ended elsewhere (e.g. HOST_LOST): the process is only cleaned up
	}
	ctx, cancel := context.WithTimeout(context.Background(), finalEventTimeout)
	defer cancel()
	if err := gs.recordLocked(ctx, events.RecordSignal{Signalled: &eventsv1.ProcessSignalled{
		Signal: sig.String(), Reason: reason, Deadline: timestamppb.New(deadline),
	}}); err != nil {
		gs.log.Warn("record signal", "signal", sig.String(), "err", err)
	}
}

// stopReason is the reason of the shutdown in progress.
func (gs *gameServer) stopReason() eventsv1.Reason {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if r := gs.state.GetReason(); r != eventsv1.Reason_REASON_UNSPECIFIED {
		return r
	}
	return eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API
}

func (gs *gameServer) lifecycle() eventsv1.Lifecycle {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.state.GetLifecycle()
}

// notifyLocked wakes SDK watchers.
func (gs *gameServer) notifyLocked() {
	close(gs.changed)
	gs.changed = make(chan struct{})
}

// refresh folds events other writers appended since the last known
// sequence. Like confirm, it holds the server's lock only to fold: a read
// through a connection that has just gone down waits out its timeout, and
// the process's exit, its health and its commands must not wait behind it
// (the periodic sync reads every server, and a test's process exit waited
// so for more than 10 s). While NATS is away it reads nothing: the outbox's
// publisher rebuilds the server's state once its events are out.
func (gs *gameServer) refresh(ctx context.Context) {
	if err := gs.readNewer(ctx, gs.a.opts.Store.History); err != nil && !errors.Is(err, errNATSDown) {
		gs.log.Warn("read game server history", "err", err)
	}
}

// refreshLocked is refresh with the server's lock held throughout, for a
// decision that must see every event before it decides again (an append
// refused on its guard).
func (gs *gameServer) refreshLocked(ctx context.Context) error {
	return gs.foldNewer(ctx, gs.a.opts.Store.History)
}

// confirm folds the events the stream's leader holds after the last known
// sequence (CurrentHistory): for a decision on the agent's copy that
// appends nothing (a refusal), which no append's guard checks.
func (gs *gameServer) confirm(ctx context.Context) error {
	return gs.readNewer(ctx, gs.a.opts.Store.CurrentHistory)
}

// readNewer folds the events read by read after the last known sequence.
// The server's lock is not held while the stream is read (health
// evaluation and commands go on); what was folded meanwhile is skipped.
// While NATS is away it fails at once, with errNATSDown.
func (gs *gameServer) readNewer(ctx context.Context, read func(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)) error {
	if !gs.a.natsUp() {
		return errNATSDown
	}
	gs.mu.Lock()
	from, resync := gs.seq, gs.resync
	gs.mu.Unlock()
	if resync {
		return nil // its queued events are not in the stream yet; rebuild follows the outbox
	}
	hist, err := read(ctx, gs.subject, from+1)
	if err != nil {
		return err
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.resync {
		return nil
	}
	for len(hist) > 0 && hist[0].Sequence <= gs.seq {
		hist = hist[1:] // folded meanwhile
	}
	gs.foldLockedFrom(ctx, hist)
	return nil
}

// errNATSDown is confirm's error while the agent's NATS connection is down.
var errNATSDown = errors.New("NATS is not connected")

// foldNewer folds the events read by read after the last known sequence.
func (gs *gameServer) foldNewer(ctx context.Context, read func(ctx context.Context, subject string, from uint64) ([]events.Envelope, error)) error {
	if gs.resync {
		return nil // its queued events are not in the stream yet; rebuild follows the outbox
	}
	hist, err := read(ctx, gs.subject, gs.seq+1)
	if err != nil {
		return err
	}
	gs.foldLockedFrom(ctx, hist)
	return nil
}

// foldLockedFrom folds events read from the stream, newer than the last
// known sequence, and wakes SDK watchers if there were any.
func (gs *gameServer) foldLockedFrom(ctx context.Context, hist []events.Envelope) {
	for _, e := range hist {
		next, err := events.ApplyGameServer(gs.state, e)
		if err != nil {
			gs.log.Warn("stored event does not fold; skipped", "sequence", e.Sequence, "type", e.Type, "err", err)
		} else {
			gs.state = next
			if _, ok := e.Data.(*eventsv1.GameServerAllocated); ok {
				gs.notifyTrace = allocationTrace(ctx, e)
			}
		}
		gs.seq = e.Sequence
	}
	if len(hist) > 0 {
		gs.notifyLocked()
	}
}

// record decides a command on the server's state and appends the result,
// guarded by the last known sequence; on a conflict it folds the newer
// events and decides again.
func (gs *gameServer) record(ctx context.Context, cmd events.GameServerCommand) error {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.recordLocked(ctx, cmd)
}

func (gs *gameServer) recordLocked(ctx context.Context, cmd events.GameServerCommand) error {
	out := &outboxFallback{gs: gs}
	reread := false
	res, err := write.Do(ctx, out, write.Op{
		Name:    gs.name,
		Subject: gs.subject,
		Read: func(ctx context.Context) (uint64, error) {
			if reread { // after a conflict: fold the newer events
				if err := gs.refreshLocked(ctx); err != nil {
					return 0, errQueue
				}
			}
			reread = true
			return gs.seq, nil
		},
		Decide: func(context.Context) ([]proto.Message, error) { return events.DecideGameServer(gs.name, gs.state, cmd) },
		Stamp:  func(context.Context) events.Stamp { return gs.a.stamp() },
	}, write.Policy{Attempts: maxRecordAttempts})
	switch {
	case errors.Is(err, errQueue):
		return gs.enqueueLocked(out.decided, out.stored)
	case err != nil:
		return err
	case len(res.Events) == 0:
		return nil
	}
	if err := gs.foldLocked(res.Events); err != nil {
		return err
	}
	gs.seq = res.Sequence
	return nil
}

// errQueue says the events decided last go to the outbox instead of the
// stream.
var errQueue = errors.New("queue the events in the outbox")

// outboxFallback is a server's write path to the stream with the outbox
// behind it: while NATS is away or events wait in the outbox, and when the
// store fails (not on a conflict), the append answers errQueue, and the
// events it was given wait in decided for the outbox, in order. An append
// that failed after the stream took its first events (an
// events.PartialAppendError) leaves only the rest to the outbox: sent
// again, the stored ones would be acknowledged as duplicates and counted
// as published twice.
type outboxFallback struct {
	gs      *gameServer
	decided []events.Envelope
	stored  int // of decided, how many the stream took before the append failed
}

// Append appends to the stream unless the outbox must take the events.
func (o *outboxFallback) Append(ctx context.Context, subject string, expected uint64, envs ...events.Envelope) (uint64, error) {
	o.decided, o.stored = envs, 0
	if o.gs.a.outbox.len() > 0 || !o.gs.a.natsUp() {
		return 0, errQueue // NATS is away, or events wait in the outbox: queue behind them
	}
	seq, err := o.gs.a.opts.Store.Append(ctx, subject, expected, envs...)
	if err != nil && !errors.Is(err, events.ErrConflict) {
		if partial, ok := errors.AsType[*events.PartialAppendError](err); ok {
			o.stored = partial.Stored
		}
		o.gs.log.Warn("event store unreachable; keeping events in the outbox", "err", err, "stored", o.stored)
		return 0, errQueue
	}
	return seq, err
}

// foldLocked applies the server's own events to its state.
func (gs *gameServer) foldLocked(envs []events.Envelope) error {
	for _, e := range envs {
		next, err := events.ApplyGameServer(gs.state, e)
		if err != nil {
			return fmt.Errorf("fold own event: %w", err)
		}
		gs.state = next
	}
	gs.notifyLocked()
	return nil
}

// enqueueLocked keeps events in the on-disk outbox for the publisher and
// folds them locally, so supervision and health evaluation go on while NATS
// is away. The first stored of them are in the stream already: they are
// folded, not queued. The server's state is rebuilt from the stream once
// the queued ones are out.
func (gs *gameServer) enqueueLocked(envs []events.Envelope, stored int) error {
	entries := make([]outboxEntry, len(envs)-stored)
	for i, e := range envs[stored:] {
		data, err := e.Marshal()
		if err != nil {
			return err
		}
		entries[i] = outboxEntry{subject: gs.subject, data: data}
	}
	if err := gs.a.outbox.push(entries...); err != nil {
		gs.a.outboxFull.Add(context.Background(), 1)
		return err
	}
	gs.resync = true
	return gs.foldLocked(envs)
}

// rebuild refolds the server's state from its whole history, after its
// queued events were published (their sequences were unknown when folded).
// The history is the stream leader's: the events just published are
// there, and a replica behind it might show the server without them, or
// not at all.
func (gs *gameServer) rebuild(ctx context.Context) error {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.a.outbox.len() > 0 {
		return nil // more of ours still queued
	}
	hist, err := gs.a.opts.Store.CurrentHistory(ctx, gs.subject, 0)
	if err != nil {
		return err
	}
	var state *eventsv1.GameServerState
	var seq uint64
	for _, e := range hist {
		if next, err := events.ApplyGameServer(state, e); err == nil {
			state = next
		}
		seq = e.Sequence
	}
	gs.state, gs.seq, gs.resync = state, seq, false
	gs.notifyLocked()
	return nil
}

// recordDetached records an event with its own deadline, so it lands even
// while the agent stops (its run context is then cancelled).
func (gs *gameServer) recordDetached(cmd events.GameServerCommand) {
	ctx, cancel := context.WithTimeout(context.Background(), finalEventTimeout)
	defer cancel()
	if err := gs.record(ctx, cmd); err != nil {
		gs.log.Error("record final event", "command", fmt.Sprintf("%T", cmd), "err", err)
	}
}

// evaluate applies the health contract now, recording missed heartbeats
// (and UNHEALTHY at the threshold) and an expired disconnect grace; the
// agent's pauses count toward none of its periods (healthCheck).
func (gs *gameServer) evaluate(ctx context.Context, now time.Time, pauses []pause) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	switch gs.state.GetLifecycle() {
	case eventsv1.Lifecycle_LIFECYCLE_STARTING, eventsv1.Lifecycle_LIFECYCLE_READY,
		eventsv1.Lifecycle_LIFECYCLE_RESERVED, eventsv1.Lifecycle_LIFECYCLE_ALLOCATED:
	default:
		return
	}
	if gs.check == nil || gs.stopping || gs.proc == nil {
		return
	}
	gs.foldPendingLocked(ctx)
	v := gs.check.due(now, pauses)
	if v.missed > 0 {
		gs.log.Warn("game server missed heartbeats", "missed", v.missed, "last_heartbeat", gs.check.lastBeat, "evaluated_at", now)
		if err := gs.recordLocked(ctx, events.RecordMissedHeartbeats{Missed: v.missed, LastHeartbeat: gs.check.lastBeat}); err != nil {
			gs.log.Error("record missed heartbeats", "err", err)
		}
	}
	if v.graceExpired && gs.state.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_UNHEALTHY {
		gs.log.Warn("SDK disconnect grace expired with no heartbeat since", "disconnected_at", gs.check.disconnectedAt)
		ev := &eventsv1.Evidence{ConnectionHistory: gs.state.GetConnectionHistory(), Detail: fmt.Sprintf(
			"SDK disconnected at %s; no call carrying the process token for %s", gs.check.disconnectedAt.Format(time.RFC3339), gs.check.grace)}
		if !gs.check.lastBeat.IsZero() {
			ev.LastHeartbeatTime = timestamppb.New(gs.check.lastBeat)
		}
		if err := gs.recordLocked(ctx, events.MarkUnhealthy{Reason: eventsv1.Reason_REASON_SDK_DISCONNECT_GRACE_EXPIRED, Evidence: ev}); err != nil {
			gs.log.Error("record grace expiry", "err", err)
		}
	}
	if gs.state.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_STARTING && gs.readyCalls.Load() == 0 && gs.check.readyOverdue(now, pauses) {
		timeout := gs.check.readyBy.Sub(gs.check.started)
		gs.log.Warn("game server did not say Ready in time", "ready_timeout", timeout, "started", gs.check.started)
		ev := &eventsv1.Evidence{StartAttempts: gs.state.GetStartAttempts(), ConnectionHistory: gs.state.GetConnectionHistory(), Detail: fmt.Sprintf(
			"the process started at %s and had not called Ready %s later (the fleet's ready timeout)", gs.check.started.Format(time.RFC3339), timeout)}
		if !gs.check.lastBeat.IsZero() {
			ev.LastHeartbeatTime = timestamppb.New(gs.check.lastBeat)
		}
		if err := gs.recordLocked(ctx, events.MarkUnhealthy{Reason: eventsv1.Reason_REASON_READY_TIMEOUT, Evidence: ev}); err != nil {
			gs.log.Error("record ready timeout; the next evaluation tries again", "err", err)
			gs.check.readyReported = false
		}
	}
}

// readyCall notes a Ready call from the process before it waits for the
// lock, and returns what notes its end: a Ready that came before the ready
// timeout ended is not timed out while it waits behind an append.
func (gs *gameServer) readyCall() (done func()) {
	gs.readyCalls.Add(1)
	return func() { gs.readyCalls.Add(-1) }
}

// view is the server as the SDK shows it.
func (gs *gameServer) view() *sdkv1.GameServer {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	v := &sdkv1.GameServer{
		Name: gs.name, State: events.LifecycleName(gs.state.GetLifecycle()), Address: gs.state.GetAddress(),
		Labels: gs.state.GetLabels(), Shutdown: gs.notice, GameSession: gs.state.GetGameSession(),
		Allocation: allocationView(gs.state.GetAllocation()),
	}
	for _, p := range gs.state.GetPorts() {
		v.Ports = append(v.Ports, &sdkv1.Port{Name: p.GetName(), Port: p.GetPort()})
	}
	return v
}
