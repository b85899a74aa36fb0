package agent_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/testkit/natstest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// A host cut off from NATS for longer than host-lost-after: the control
// plane ends its server HOST_LOST meanwhile, and the process dies on the
// cut host. The agent keeps ProcessExited and GameServerTerminated in its
// outbox; on the heal neither applies to a server the stream has
// TERMINATED, so both are dropped instead of being appended (where the
// projector would dead-letter them), and the stream ends at HOST_LOST.
func TestOutboxDropsEventsForAServerEndedWhileTheHostWasCut(t *testing.T) {
	h, link := newCutHost(t)
	name := "fleets/arena/gameServers/gs-cut"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	pid := int(h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())

	link.cut()
	// The controller gives the host up; then the process dies on it.
	before := h.decideElsewhere(name, events.Terminate{Reason: eventsv1.Reason_REASON_HOST_LOST})
	exitWhileCut(t, h, link, pid)
	after := h.history(name)[before:]
	if len(after) != 1 || after[0].Type != "GameServerTerminated" ||
		after[0].Data.(*eventsv1.GameServerTerminated).GetReason() != eventsv1.Reason_REASON_HOST_LOST {
		t.Fatalf("after the cut the stream has %v, want only the controller's GameServerTerminated HOST_LOST", types(after))
	}
	if !strings.Contains(h.logs.String(), "outbox event dropped") || !strings.Contains(h.logs.String(), "type=ProcessExited") {
		t.Errorf("no warning that the outbox's ProcessExited was dropped; logs:\n%s", h.logs)
	}
	// The agent restarted the process on the cut host (the server was
	// STARTING as far as it knew); back in touch, it stops every one.
	started := regexp.MustCompile(`game server process started .*game_server=` + regexp.QuoteMeta(name) + ` pid=(\d+)`)
	wait.For(t, 15*time.Second, "every process of the server to end", func() bool {
		for _, m := range started.FindAllStringSubmatch(h.logs.String(), -1) {
			if _, err := os.Stat("/proc/" + m[1]); err == nil {
				return false
			}
		}
		return true
	})
}

// A shutdown requested through the API while the host was cut (a NATS
// partition hid it from the agent), then the process exits: the agent
// decided the termination on its own state (ALLOCATED, so PROCESS_EXITED)
// and kept it in the outbox. Published on the heal, it is decided again on
// the stream's state, SHUTTING_DOWN: the server ends for the shutdown's
// reason, as it would have with the agent in touch.
func TestOutboxTerminationIsDecidedOnTheStreamsState(t *testing.T) {
	h, link := newCutHost(t)
	name := "fleets/arena/gameServers/gs-shut"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	pid := int(h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	h.ready(pid)
	h.waitEvent(name, "GameServerReady")

	link.cut()
	before := h.decideElsewhere(name, events.RequestShutdown{
		Reason: eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API, Deadline: time.Now().Add(time.Minute),
		Evidence: &eventsv1.Evidence{RequestedBy: "api-1", Detail: "match over"},
	})
	exitWhileCut(t, h, link, pid)
	after := h.history(name)[before:]
	if got := types(after); strings.Join(got, " ") != "ShutdownRequested ProcessExited GameServerTerminated" {
		t.Fatalf("after the cut the stream has %v, want ShutdownRequested ProcessExited GameServerTerminated", got)
	}
	term := after[2].Data.(*eventsv1.GameServerTerminated)
	if term.GetReason() != eventsv1.Reason_REASON_SHUTDOWN_REQUESTED_BY_API || term.GetEvidence().GetSignal() != "killed" ||
		term.GetEvidence().GetDetail() != "match over" {
		t.Fatalf("terminated %s with %v, want SHUTDOWN_REQUESTED_BY_API with the exit and the request's evidence",
			events.ReasonName(term.GetReason()), term.GetEvidence())
	}
	if st := fold(t, h.history(name)); st.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
		t.Fatalf("the stream folds to %s", events.LifecycleName(st.GetLifecycle()))
	}
}

// exitWhileCut kills the server's process while the host is cut off (its
// exit and termination go to the outbox), heals the link and waits for the
// outbox to drain.
func exitWhileCut(t *testing.T, h *harness, link *cuttableLink, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the exit kept in the outbox", func() bool { return h.agent.OutboxLen() >= 2 })
	link.heal()
	wait.For(t, 15*time.Second, "the outbox to drain", func() bool { return h.agent.OutboxLen() == 0 })
}

// newCutHost runs an agent for host h1 that reaches NATS through a link
// the test can cut; the harness's store (the control plane) reaches NATS
// directly.
func newCutHost(t *testing.T) (*harness, *cuttableLink) {
	t.Helper()
	k := kit.New(t, kit.WithCommands())
	link := newCuttableLink(t, k.NATS.ClientURL())
	nc, js := natstest.ConnectURL(t, link.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	store, err := natsjs.New(k.Ctx, js, natsjs.Options{UnavailableWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	bus, err := commands.New(k.Ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: k.Ctx, js: k.JS, store: k.Store, bus: k.Commands}
	h.startAgent(func(o *agent.Options) { o.JetStream, o.Store, o.Commands = js, store, bus })
	link.onCut = func() {
		wait.For(t, 10*time.Second, "the agent to lose NATS", func() bool { return nc.Status() != nats.CONNECTED })
	}
	return h, link
}

// decideElsewhere appends what the control plane decides for a server
// (cmd, on its history) and returns the server's event count before it.
func (h *harness) decideElsewhere(name string, cmd events.GameServerCommand) int {
	h.t.Helper()
	hist := h.history(name)
	msgs, err := events.DecideGameServer(name, fold(h.t, hist), cmd)
	if err != nil {
		h.t.Fatal(err)
	}
	envs := make([]events.Envelope, len(msgs))
	for i, m := range msgs {
		envs[i] = events.New(name, time.Now(), m)
	}
	if _, err := h.store.Append(h.ctx, events.MustSubject(name), hist[len(hist)-1].Sequence, envs...); err != nil {
		h.t.Fatal(err)
	}
	return len(hist)
}

// ready tells the agent, as the game server process pid would through the
// SDK, that it is ready.
func (h *harness) ready(pid int) {
	h.t.Helper()
	env := processEnv(h.t, int32(pid))
	req, err := http.NewRequest("POST", env["TETHER_SDK_HTTP"]+"/v1/sdk/ready", strings.NewReader("{}"))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.agent.ProcessToken(pid))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := resp.Body.Close(); err != nil {
		h.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("ready: %s", resp.Status)
	}
}

// types lists the events' types.
func types(es []events.Envelope) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Type)
	}
	return out
}

// cuttableLink is a TCP proxy standing in for a host's network link: cut
// closes every connection through it and refuses new ones until heal.
type cuttableLink struct {
	t        *testing.T
	listener net.Listener
	target   string

	// onCut, if set, runs after cut has closed the connections (waiting
	// for the client to notice).
	onCut func()

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

// newCuttableLink proxies a loopback listener to a nats:// URL's address
// until the test ends.
func newCuttableLink(t *testing.T, natsURL string) *cuttableLink {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	link := &cuttableLink{t: t, listener: l, target: strings.TrimPrefix(natsURL, "nats://"), conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	wg.Go(link.accept)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close link: %v", err)
		}
		link.closeAll()
		wg.Wait()
	})
	return link
}

func (l *cuttableLink) url() string { return "nats://" + l.listener.Addr().String() }

// accept forwards each connection while the link is up.
func (l *cuttableLink) accept() {
	for {
		in, err := l.listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			l.t.Errorf("link accept: %v", err)
			return
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			l.t.Errorf("link dial %s: %v", l.target, err)
			in.Close()
			continue
		}
		l.mu.Lock()
		if l.down {
			l.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		l.conns[in], l.conns[out] = true, true
		l.mu.Unlock()
		go l.pipe(in, out)
		go l.pipe(out, in)
	}
}

// pipe copies one direction until either side closes, then closes both.
func (l *cuttableLink) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src) // ends when the link is cut or a side hangs up: both are closed below
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range []net.Conn{dst, src} {
		if l.conns[c] {
			delete(l.conns, c)
			c.Close()
		}
	}
}

// cut closes every connection and refuses new ones.
func (l *cuttableLink) cut() {
	l.closeAll()
	if l.onCut != nil {
		l.onCut()
	}
}

func (l *cuttableLink) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for c := range l.conns {
		delete(l.conns, c)
		c.Close()
	}
}

// heal lets connections through again.
func (l *cuttableLink) heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = false
}
