package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/trace"

	"github.com/tetherhq/tether/events"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
)

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
	// (by the host beat, which must not wait for a server's appends). Set
	// it with setPid.
	pid atomic.Int64
	// pidMu guards pidKnown, which is closed while pid holds a process's
	// id (processpid.go).
	pidMu    sync.Mutex
	pidKnown chan struct{}
	// lastPing is when the process's last health ping (an SDK Health
	// call) arrived, in Unix nanoseconds (0: none yet); read without mu by
	// the host beat, which shows it to the API.
	lastPing atomic.Int64
	// pendingConn is the connection a health ping proved that is not
	// folded yet (gameServer.healthPing); nil: none.
	pendingConn atomic.Pointer[pendingConnect]
	// folding is true while a background fold of health pings runs.
	folding atomic.Bool
	// readyCalls counts the process's Ready calls under way (readyCall):
	// while one is, the ready timeout waits for it.
	readyCalls atomic.Int32

	// mu guards everything below and serialises the server's appends.
	mu    sync.Mutex
	state *eventsv1.GameServerState
	seq   uint64 // last stream sequence folded into state
	ports []int
	// agones is the server's Agones SDK endpoint (agonesendpoint.go), nil
	// where processes are simulated; closed when the server is finished.
	agones    *agonesEndpoint
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
	// watch is what the server looked like at its last changes, for
	// WatchGameServer streams to send each in turn (watchlog.go).
	watch watchLog
	done  chan struct{} // closed when the server is finished
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
		changed: make(chan struct{}), done: make(chan struct{}), pidKnown: make(chan struct{}),
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
	agones, err := a.openAgones(gs)
	if err != nil {
		gs.recordDetached(events.Terminate{Reason: eventsv1.Reason_REASON_PROCESS_START_FAILED, Evidence: &eventsv1.Evidence{Detail: err.Error()}})
		a.forget(gs)
		return err
	}
	gs.agones = agones
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

func (gs *gameServer) lifecycle() eventsv1.Lifecycle {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.state.GetLifecycle()
}

// notifyLocked records the server's view for its SDK watchers, if any,
// and wakes them.
func (gs *gameServer) notifyLocked() {
	gs.watch.record(gs.viewLocked)
	close(gs.changed)
	gs.changed = make(chan struct{})
}
