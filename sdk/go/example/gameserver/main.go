// Command gameserver is Tether's example game server: a UDP echo server,
// and a TCP line echo server on the same port number, on the port the
// agent assigned ($TETHER_PORT_GAME), that uses the Go SDK: it connects,
// heartbeats in the background, calls Ready (after --ready-delay), watches
// its GameServer, and exits with code 0 on a shutdown notice or SIGTERM.
//
// It can be told to misbehave, for tests, the simulator and the demo:
//
//	--ready-delay D            wait D before calling Ready
//	--exit-after D             exit on its own D after start, with --exit-code N (default 0)
//	--crash-before-ready       exit 3 at once, before connecting or calling Ready
//	--stop-heartbeat-after D   stop heartbeating D after start but keep running (a hang)
//	--reconnect-every D        drop and re-open the SDK connection every D
//	--ignore-sigterm           log SIGTERM and keep running
//	--ignore-shutdown-notice   log the shutdown notice and keep running
//
// And it can play matches on its own: with --match-length D, a match ends D
// after the server learns of its allocation, and the game calls Ready (the
// game session ends with SERVER_READY_AGAIN and the server is READY for the
// next one), as a game does when its match is over. By default a match
// lasts until it is told to end ("READY" on the game port, below).
//
// The agent sends the notice and SIGTERM together, so a server that should
// be SIGKILLed at its deadline needs both --ignore-sigterm and
// --ignore-shutdown-notice. Other flags: --heartbeat-interval D (default
// 1s), --port-name NAME (default "game"), --listen-host HOST (default all
// interfaces).
//
// Every flag can also be set through the environment as
// TETHER_EXAMPLE_<FLAG>, upper case with dashes as underscores (e.g.
// TETHER_EXAMPLE_CRASH_BEFORE_READY=true), so a fleet template can pick a
// misbehaviour with env; a flag on the command line wins over its variable.
// Durations are Go durations ("1.5s"). It logs what it does to stdout.
//
// Players: a TCP connection whose first line is "JOIN <player-session> <token>"
// is a player. The server calls AcceptPlayer and answers "WELCOME <player-id>
// slot=<n> reconnected=<true|false>" (then echoes lines) or "REFUSED <why>"
// and closes. When a player's connection drops the server calls
// DisconnectPlayer with the connection's number (the seat waits for the
// reconnect window, unless a newer connection of the player took it over);
// the line "LEAVE" calls RemovePlayer likewise and closes the connection. A connection whose
// first line is "STATE" gets the server's state as WatchGameServer last
// told it ("STATE ALLOCATED gameSessions/… players=2 map=dust"). A first
// line "READY", "ALLOCATE" or "RESERVE <seconds>" makes the game make that
// SDK call (to try re-Ready, self-allocation and reservations by hand).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	sdk "github.com/tetherhq/tether/sdk/go"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // could not start: no port, no SDK
	exitUsage = 2
	exitCrash = 3 // --crash-before-ready
)

// Timeouts of SDK calls.
const (
	connectTimeout = 30 * time.Second
	readyTimeout   = 10 * time.Second
	readyRetry     = time.Second
)

// envPrefix starts the environment variable of each flag.
const envPrefix = "TETHER_EXAMPLE_"

// config is what the flags ask for.
type config struct {
	readyDelay           time.Duration
	exitAfter            time.Duration
	exitCode             int
	crashBeforeReady     bool
	stopHeartbeatAfter   time.Duration
	reconnectEvery       time.Duration
	ignoreSigterm        bool
	ignoreShutdownNotice bool
	heartbeatInterval    time.Duration
	matchLength          time.Duration
	portName             string
	listenHost           string
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stdout, nil)).With("game_server", sdk.GameServerName(), "pid", os.Getpid())
	cfg, err := parse(os.Args[1:], os.LookupEnv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(exitOK)
	}
	if err != nil {
		log.Error("bad flags", "err", err)
		os.Exit(exitUsage)
	}
	os.Exit(run(context.Background(), log, cfg))
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse reads the flags, each defaulting to its TETHER_EXAMPLE_ variable.
func parse(args []string, lookupEnv func(string) (string, bool), usage io.Writer) (config, error) {
	c := config{heartbeatInterval: sdk.DefaultHeartbeatInterval, portName: "game"}
	fs := flag.NewFlagSet("gameserver", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.DurationVar(&c.readyDelay, "ready-delay", 0, "wait this long before calling Ready")
	fs.DurationVar(&c.exitAfter, "exit-after", 0, "exit on its own this long after start, with --exit-code (0: never)")
	fs.IntVar(&c.exitCode, "exit-code", 0, "exit code for --exit-after, 0-255")
	fs.BoolVar(&c.crashBeforeReady, "crash-before-ready", false, "exit 3 at once, before Ready")
	fs.DurationVar(&c.stopHeartbeatAfter, "stop-heartbeat-after", 0, "stop heartbeating this long after start but keep running, a hang (0: never)")
	fs.DurationVar(&c.reconnectEvery, "reconnect-every", 0, "drop and re-open the SDK connection this often (0: never)")
	fs.BoolVar(&c.ignoreSigterm, "ignore-sigterm", false, "log SIGTERM and keep running")
	fs.BoolVar(&c.ignoreShutdownNotice, "ignore-shutdown-notice", false, "log the shutdown notice and keep running")
	fs.DurationVar(&c.heartbeatInterval, "heartbeat-interval", c.heartbeatInterval, "time between heartbeats")
	fs.DurationVar(&c.matchLength, "match-length", 0, "end each match this long after the allocation arrives, calling Ready (0: only when told)")
	fs.StringVar(&c.portName, "port-name", c.portName, "name of the port to echo on, in the fleet template")
	fs.StringVar(&c.listenHost, "listen-host", "", "address to listen on (empty: all interfaces)")
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v, ok := lookupEnv(name)
		if !ok || envErr != nil {
			return
		}
		if err := f.Value.Set(v); err != nil {
			envErr = fmt.Errorf("$%s=%q: %w", name, v, err)
			return
		}
		f.DefValue = v // --help shows what the environment chose
	})
	if envErr != nil {
		return config{}, envErr
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for name, d := range map[string]time.Duration{
		"ready-delay": c.readyDelay, "exit-after": c.exitAfter,
		"stop-heartbeat-after": c.stopHeartbeatAfter, "reconnect-every": c.reconnectEvery, "match-length": c.matchLength,
	} {
		if d < 0 {
			return config{}, fmt.Errorf("--%s %s: negative", name, d)
		}
	}
	if c.heartbeatInterval <= 0 {
		return config{}, fmt.Errorf("--heartbeat-interval %s: not positive", c.heartbeatInterval)
	}
	if c.exitCode < 0 || c.exitCode > 255 {
		return config{}, fmt.Errorf("--exit-code %d: not in 0-255", c.exitCode)
	}
	return c, nil
}

// run is the game server; it returns the exit code.
func run(ctx context.Context, log *slog.Logger, cfg config) int {
	if cfg.crashBeforeReady {
		log.Error("crashing before Ready, as asked", "exit_code", exitCrash)
		return exitCrash
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// From here on SIGTERM and SIGINT are ours to handle.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(signals)

	port, err := sdk.Port(cfg.portName)
	if err != nil {
		log.Error("no game port", "err", err)
		return exitError
	}
	lobby := &lobby{log: log}
	stopEcho, err := echo(log, net.JoinHostPort(cfg.listenHost, strconv.Itoa(port)), lobby)
	if err != nil {
		log.Error("listen", "err", err)
		return exitError
	}
	defer stopEcho()

	cctx, ccancel := context.WithTimeout(ctx, connectTimeout)
	client, err := sdk.Connect(cctx, sdk.Options{HeartbeatInterval: cfg.heartbeatInterval, Logger: log})
	ccancel()
	if err != nil {
		log.Error("connect to the SDK", "err", err)
		return exitError
	}
	defer func() {
		if err := client.Close(); err != nil {
			log.Warn("close SDK client", "err", err)
		}
	}()
	log.Info("sdk connected")
	lobby.client.Store(client)
	stopHeartbeat := client.StartHeartbeat(ctx)
	defer stopHeartbeat()

	// The watch hands over the latest state; the loop below acts on it.
	updates := make(chan *sdkv1.GameServer, 1)
	go func() {
		err := client.Watch(ctx, func(gs *sdkv1.GameServer) {
			select {
			case <-updates: // replaced by the newer state
			default:
			}
			updates <- gs
		})
		if !errors.Is(err, context.Canceled) && !errors.Is(err, sdk.ErrClosed) {
			log.Warn("watch ended", "err", err)
		}
	}()

	var (
		readyTimer = time.NewTimer(cfg.readyDelay)
		readyDone  = make(chan error, 1)
		exitC      <-chan time.Time
		hangC      <-chan time.Time
		reconnectC <-chan time.Time
		last       *sdkv1.GameServer
		noticed    bool
		match      = newMatchClock(cfg.matchLength)
		matchEnded = make(chan error, 1)
	)
	defer readyTimer.Stop()
	defer match.stop()
	if cfg.exitAfter > 0 {
		t := time.NewTimer(cfg.exitAfter)
		defer t.Stop()
		exitC = t.C
	}
	if cfg.stopHeartbeatAfter > 0 {
		t := time.NewTimer(cfg.stopHeartbeatAfter)
		defer t.Stop()
		hangC = t.C
	}
	if cfg.reconnectEvery > 0 {
		t := time.NewTicker(cfg.reconnectEvery)
		defer t.Stop()
		reconnectC = t.C
	}
	for {
		select {
		case <-readyTimer.C:
			go func() {
				rctx, rcancel := context.WithTimeout(ctx, readyTimeout)
				defer rcancel()
				readyDone <- client.Ready(rctx)
			}()
		case err := <-readyDone:
			if err != nil {
				log.Warn("ready failed; retrying", "err", err, "retry_in", readyRetry)
				readyTimer.Reset(readyRetry)
				continue
			}
			log.Info("ready", "port", port)
		case <-match.over():
			session := match.playing
			go func() {
				rctx, rcancel := context.WithTimeout(ctx, readyTimeout)
				defer rcancel()
				matchEnded <- client.Ready(rctx)
			}()
			log.Info("match over: ready for the next", "game_session", session)
		case err := <-matchEnded:
			if err != nil {
				// The server may have been told to stop meanwhile; the
				// next allocation, if any, starts another match.
				log.Warn("ready after the match failed", "err", err)
			}
		case gs := <-updates:
			if gs.GetState() != last.GetState() || gs.GetGameSession() != last.GetGameSession() {
				log.Info("game server changed", "state", gs.GetState(), "game_session", gs.GetGameSession())
			}
			last = gs
			lobby.state.Store(gs)
			match.follow(gs)
			n := gs.GetShutdown()
			if n == nil || noticed {
				continue
			}
			noticed = true
			deadline := n.GetDeadline().AsTime()
			if cfg.ignoreShutdownNotice {
				log.Warn("shutdown notice ignored, as asked", "reason", n.GetReason(), "deadline", deadline)
				continue
			}
			log.Info("shutdown notice: exiting", "reason", n.GetReason(), "deadline", deadline, "time_left", time.Until(deadline).Round(time.Millisecond))
			return exitOK
		case sig := <-signals:
			if sig == syscall.SIGTERM && cfg.ignoreSigterm {
				log.Warn("SIGTERM ignored, as asked")
				continue
			}
			log.Info("signal: exiting", "signal", sig.String())
			return exitOK
		case <-exitC:
			log.Info("exiting on my own, as asked", "exit_code", cfg.exitCode)
			return cfg.exitCode
		case <-hangC:
			log.Warn("heartbeats stopped, as asked; still running")
			client.PauseHeartbeat()
		case <-reconnectC:
			log.Info("dropping the SDK connection, as asked")
			if err := client.Reconnect(); err != nil {
				log.Error("reconnect", "err", err)
			}
		}
	}
}

// echo serves UDP echo on addr and, on the same port number, TCP line echo
// (the SDK does not say which protocol the template declared). It returns a
// function that stops both.
func echo(log *slog.Logger, addr string, players *lobby) (stop func(), err error) {
	udp, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("UDP: %w", err)
	}
	go echoUDP(udp)
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		_ = udp.Close() // Not serving after all; its close error adds nothing.
		return nil, fmt.Errorf("TCP: %w", err)
	}
	go echoTCP(tcp, players)
	log.Info("echoing", "udp", udp.LocalAddr().String(), "tcp", tcp.Addr().String())
	return func() {
		_ = udp.Close() // Exiting: nothing to do about a close error.
		_ = tcp.Close()
	}, nil
}

// echoUDP sends every datagram back to its sender until c is closed.
func echoUDP(c net.PacketConn) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = c.WriteTo(buf[:n], from) // Best effort, like any UDP game server.
	}
}

// echoTCP sends every line back on its connection until l is closed; a
// connection that starts with JOIN is a player's (see lobby).
func echoTCP(l net.Listener, players *lobby) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			lines := bufio.NewScanner(conn)
			first := true
			var player seat
			for lines.Scan() {
				line := lines.Text()
				if first && strings.HasPrefix(line, "JOIN ") {
					reply, joined := players.join(line)
					if joined.session != "" {
						player = joined
					}
					if _, err := fmt.Fprintln(conn, reply); err != nil || joined.session == "" {
						break
					}
					first = false
					continue
				}
				if first && line == "STATE" {
					_, _ = fmt.Fprintln(conn, players.describe()) // the client may be gone; nothing to do then
					return
				}
				if first && isOperatorCommand(line) {
					_, _ = fmt.Fprintln(conn, players.operate(line)) // as above
					return
				}
				first = false
				if player.session != "" && line == "LEAVE" {
					players.leave(player)
					return
				}
				if _, err := fmt.Fprintf(conn, "%s\n", line); err != nil {
					break
				}
			}
			if player.session != "" {
				players.dropped(player)
			}
		}()
	}
}

// lobby turns player connections into SDK player calls.
type lobby struct {
	log    *slog.Logger
	client atomic.Pointer[sdk.Client]       // nil until the SDK is connected
	state  atomic.Pointer[sdkv1.GameServer] // latest from WatchGameServer
}

// describe answers "STATE": "STATE <state> <game session or -> players=<n>
// <property>=<value>…", as WatchGameServer last told it.
func (l *lobby) describe() string {
	gs := l.state.Load()
	session := gs.GetGameSession()
	if session == "" {
		session = "-"
	}
	out := fmt.Sprintf("STATE %s %s players=%d", gs.GetState(), session, len(gs.GetAllocation().GetPlayers()))
	props := gs.GetAllocation().GetProperties()
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out += " " + k + "=" + props[k]
	}
	return out
}

// playerCallTimeout bounds one player call to the agent.
const playerCallTimeout = 5 * time.Second

// seat is a player's accepted connection: their player session and the
// connection number AcceptPlayer gave it.
type seat struct {
	session    string
	connection int64
}

// join handles "JOIN <player-session> <token>"; the seat is empty when the
// player was refused.
func (l *lobby) join(line string) (reply string, joined seat) {
	f := strings.Fields(line)
	c := l.client.Load()
	switch {
	case len(f) != 3:
		return "REFUSED usage: JOIN <player-session> <token>", seat{}
	case c == nil:
		return "REFUSED not connected to the agent yet", seat{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), playerCallTimeout)
	defer cancel()
	p, err := c.AcceptPlayer(ctx, f[1], f[2])
	if err != nil {
		l.log.Warn("player refused", "player_session", f[1], "err", err)
		return "REFUSED " + err.Error(), seat{}
	}
	l.log.Info("player joined", "player_session", f[1], "player", p.GetPlayerId(), "slot", p.GetSlot(),
		"reconnected", p.GetReconnected(), "taken_over", p.GetTakenOver(), "connection", p.GetConnection())
	return fmt.Sprintf("WELCOME %s slot=%d reconnected=%t", p.GetPlayerId(), p.GetSlot(), p.GetReconnected()), seat{session: f[1], connection: p.GetConnection()}
}

// isOperatorCommand tells the lines that make the game itself call the SDK.
func isOperatorCommand(line string) bool {
	return line == "READY" || line == "ALLOCATE" || strings.HasPrefix(line, "RESERVE ")
}

// operate makes the game call the SDK as a game would on its own:
// "READY" (back to READY after a match: the game session ends),
// "ALLOCATE" (self-allocation), "RESERVE <seconds>". It answers "OK …" or
// "ERROR <why>".
func (l *lobby) operate(line string) string {
	c := l.client.Load()
	if c == nil {
		return "ERROR not connected to the agent yet"
	}
	ctx, cancel := context.WithTimeout(context.Background(), playerCallTimeout)
	defer cancel()
	var err error
	reply := "OK"
	switch line {
	case "READY":
		err = c.Ready(ctx)
	case "ALLOCATE":
		var session string
		session, err = c.Allocate(ctx, map[string]string{"by": "game"})
		reply = "OK " + session
	default:
		secs, perr := strconv.Atoi(strings.TrimPrefix(line, "RESERVE "))
		if perr != nil {
			return "ERROR usage: RESERVE <seconds>"
		}
		err = c.Reserve(ctx, time.Duration(secs)*time.Second)
	}
	if err != nil {
		l.log.Warn("operator command failed", "command", line, "err", err)
		return "ERROR " + err.Error()
	}
	l.log.Info("operator command", "command", line, "reply", reply)
	return reply
}

// dropped reports a player connection that ended without LEAVE.
func (l *lobby) dropped(s seat) {
	ctx, cancel := context.WithTimeout(context.Background(), playerCallTimeout)
	defer cancel()
	deadline, stale, err := l.client.Load().DisconnectPlayerConnection(ctx, s.session, s.connection)
	switch {
	case err != nil:
		l.log.Warn("report player disconnect", "player_session", s.session, "err", err)
	case stale:
		l.log.Info("old player connection dropped; a newer one holds the seat", "player_session", s.session, "connection", s.connection)
	default:
		l.log.Info("player dropped; seat kept", "player_session", s.session, "reconnect_deadline", deadline)
	}
}

// leave removes a player for good.
func (l *lobby) leave(s seat) {
	ctx, cancel := context.WithTimeout(context.Background(), playerCallTimeout)
	defer cancel()
	stale, err := l.client.Load().RemovePlayerConnection(ctx, s.session, s.connection)
	if err != nil {
		l.log.Warn("remove player", "player_session", s.session, "err", err)
		return
	}
	if stale {
		l.log.Info("old player connection left; a newer one holds the seat", "player_session", s.session, "connection", s.connection)
		return
	}
	l.log.Info("player left", "player_session", s.session)
}

// matchClock ends matches on their own (--match-length): it starts when
// the server learns of an allocation and fires once per game session.
type matchClock struct {
	length  time.Duration // 0: off
	timer   *time.Timer
	playing string // the game session whose match runs or last ran
}

// newMatchClock returns a clock for matches of length; 0 turns it off.
func newMatchClock(length time.Duration) *matchClock {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &matchClock{length: length, timer: t}
}

// follow starts the match of a game session the first time the server is
// seen ALLOCATED to it.
func (m *matchClock) follow(gs *sdkv1.GameServer) {
	if m.length <= 0 || gs.GetState() != "ALLOCATED" || gs.GetGameSession() == "" || gs.GetGameSession() == m.playing {
		return
	}
	m.playing = gs.GetGameSession()
	m.timer.Reset(m.length)
}

// over fires when the current match is over.
func (m *matchClock) over() <-chan time.Time { return m.timer.C }

// stop stops the clock.
func (m *matchClock) stop() { m.timer.Stop() }
