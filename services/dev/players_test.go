package dev_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/dev"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// allocation is the REST shape of an allocation response that tests read.
type allocation struct {
	GameServer struct {
		Name string `json:"name"`
	} `json:"gameServer"`
	GameSession struct {
		Name string `json:"name"`
	} `json:"gameSession"`
	Endpoint struct {
		Address string `json:"address"`
		Ports   []struct {
			Name string `json:"name"`
			Port int    `json:"port"`
		} `json:"ports"`
	} `json:"endpoint"`
	PlayerSessions []playerSession `json:"playerSessions"`
}

// playerSession is the REST shape of a player session.
type playerSession struct {
	Name           string `json:"name"`
	PlayerID       string `json:"playerId"`
	State          string `json:"state"`
	Slot           int    `json:"slot"`
	Token          string `json:"token"`
	ReconnectCount int    `json:"reconnectCount"`
	EndReason      string `json:"endReason"`
}

// gameSession is the REST shape of a game session.
type gameSession struct {
	Name         string `json:"name"`
	State        string `json:"state"`
	EndReason    string `json:"endReason"`
	ServerReason string `json:"serverReason"`
}

func (s *stack) allocate(fleet string, players ...string) allocation {
	s.t.Helper()
	var ps []any
	for _, p := range players {
		ps = append(ps, map[string]any{"playerId": p, "playerData": "data-of-" + p})
	}
	var out allocation
	body := map[string]any{"players": ps, "gameSession": map[string]any{"properties": map[string]string{"map": "dust"}}}
	if code := s.rest("POST", "/v1/fleets/"+fleet+"/gameServers:allocate", body, &out); code != http.StatusOK {
		s.t.Fatalf("allocate: %d", code)
	}
	return out
}

// playerSession reads a player session; before the views have it, the
// zero value (its game session is projected a moment after the allocation
// returns).
func (s *stack) playerSession(name string) playerSession {
	s.t.Helper()
	var out playerSession
	switch code := s.rest("GET", "/v1/"+name, nil, &out); code {
	case http.StatusOK:
		return out
	case http.StatusNotFound:
		return playerSession{}
	default:
		s.t.Fatalf("get %s: %d", name, code)
	}
	return out
}

// player is a game client's TCP connection to the example game server.
type player struct {
	conn  net.Conn
	lines *bufio.Scanner
}

// join connects to the endpoint and presents a player session and token;
// it returns the server's answer line.
func join(t testing.TB, a allocation, playerSession, token string) (*player, string) {
	t.Helper()
	conn, err := net.Dial("tcp", net.JoinHostPort(a.Endpoint.Address, fmt.Sprint(a.Endpoint.Ports[0].Port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "JOIN %s %s\n", playerSession, token); err != nil {
		t.Fatal(err)
	}
	p := &player{conn: conn, lines: bufio.NewScanner(conn)}
	if !p.lines.Scan() {
		t.Fatalf("no answer to JOIN: %v", p.lines.Err())
	}
	return p, p.lines.Text()
}

// serverState asks the example game server what WatchGameServer told it.
func serverState(t testing.TB, a allocation) string {
	t.Helper()
	return tell(t, a.Endpoint.Address, a.Endpoint.Ports[0].Port, "STATE")
}

// tell sends the example game server one first line and returns its answer.
func tell(t testing.TB, address string, port int, line string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(address, fmt.Sprint(port)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(conn, line); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(conn)
	if !lines.Scan() {
		t.Fatalf("no answer to %s: %v", line, lines.Err())
	}
	return lines.Text()
}

// soleReadyServer creates a fleet of one example game server and returns
// it once READY.
func (s *stack) soleReadyServer(fleet string) gameServer {
	s.t.Helper()
	if code := s.rest("POST", "/v1/fleets?fleetId="+fleet, fleetSpec(1, nil), nil); code != http.StatusOK {
		s.t.Fatalf("create fleet: %d", code)
	}
	var g gameServer
	wait.For(s.t, 15*time.Second, "a READY game server", func() bool {
		ready := byState(s.gameServers(fleet), "READY")
		if len(ready) == 1 {
			g = ready[0]
		}
		return len(ready) == 1
	})
	return g
}

// endpointOf is where a game server's players connect.
func endpointOf(g gameServer) (e struct {
	Address string `json:"address"`
	Ports   []struct {
		Name string `json:"name"`
		Port int    `json:"port"`
	} `json:"ports"`
}) {
	e.Address, e.Ports = g.Address, g.Ports
	return e
}

func psID(t *testing.T, name string) string {
	t.Helper()
	_, id, err := events.ParsePlayerSessionName(name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The player flow against a real example game server process: allocate
// with two players, both accepted; one drops and reconnects within the
// window to the same seat; a second drop past the window ends with
// RECONNECT_WINDOW_EXPIRED and :reconnect answers PLAYER_SESSION_EXPIRED;
// forged and other-session tokens are refused.
func TestPlayersJoinDropAndRejoin(t *testing.T) {
	s := startStack(t, 1)
	spec := fleetSpec(1, nil)
	spec["playerSessions"] = map[string]any{"maxPlayers": 4, "reservationTimeoutSeconds": 60, "reconnectWindowSeconds": 3}
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", spec, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 15*time.Second, "a READY game server", func() bool { return len(byState(s.gameServers("arena"), "READY")) == 1 })

	a := s.allocate("arena", "p1", "p2")
	if len(a.PlayerSessions) != 2 || len(a.Endpoint.Ports) == 0 {
		t.Fatalf("allocation: %+v", a)
	}
	// The game learns of its allocation through WatchGameServer.
	wantState := "STATE ALLOCATED " + a.GameSession.Name + " players=2 map=dust"
	wait.For(t, 5*time.Second, "the game server to see its allocation", func() bool { return serverState(t, a) == wantState })
	p1, p2 := a.PlayerSessions[0], a.PlayerSessions[1]

	// Forged and other-session tokens are refused before anyone joins.
	if _, reply := join(t, a, psID(t, p1.Name), p2.Token); !strings.HasPrefix(reply, "REFUSED") {
		t.Fatalf("p1 with p2's token: %q", reply)
	}
	if _, reply := join(t, a, psID(t, p1.Name), "k.1.forged"); !strings.HasPrefix(reply, "REFUSED") {
		t.Fatalf("p1 with a forged token: %q", reply)
	}

	_, reply := join(t, a, psID(t, p1.Name), p1.Token)
	if reply != "WELCOME p1 slot=0 reconnected=false" {
		t.Fatalf("p1 join: %q", reply)
	}
	conn2, reply := join(t, a, psID(t, p2.Name), p2.Token)
	if reply != "WELCOME p2 slot=1 reconnected=false" {
		t.Fatalf("p2 join: %q", reply)
	}
	wait.For(t, 5*time.Second, "both players ACTIVE", func() bool {
		return s.playerSession(p1.Name).State == "ACTIVE" && s.playerSession(p2.Name).State == "ACTIVE"
	})

	// p2 drops; the seat is kept.
	conn2.conn.Close()
	wait.For(t, 5*time.Second, "p2 DISCONNECTED", func() bool { return s.playerSession(p2.Name).State == "DISCONNECTED" })

	// p2's client lost everything but the player session id: one call gets
	// the endpoint, the seat and a fresh token.
	var rec struct {
		PlayerSession playerSession `json:"playerSession"`
		Token         string        `json:"token"`
		Endpoint      struct {
			Address string `json:"address"`
		} `json:"endpoint"`
	}
	if code := s.rest("POST", "/v1/"+p2.Name+":reconnect", map[string]any{}, &rec); code != http.StatusOK {
		t.Fatalf("reconnect: %d", code)
	}
	if rec.PlayerSession.Slot != 1 || rec.Endpoint.Address != a.Endpoint.Address || rec.Token == "" {
		t.Fatalf("reconnect answer: %+v", rec)
	}
	conn2, reply = join(t, a, psID(t, p2.Name), rec.Token)
	if reply != "WELCOME p2 slot=1 reconnected=true" {
		t.Fatalf("p2 rejoin: %q", reply)
	}
	wait.For(t, 5*time.Second, "p2 ACTIVE again", func() bool {
		p := s.playerSession(p2.Name)
		return p.State == "ACTIVE" && p.ReconnectCount == 1 && p.Slot == 1
	})

	// A second drop, and the window passes.
	conn2.conn.Close()
	wait.For(t, 10*time.Second, "p2 COMPLETED by the window", func() bool {
		p := s.playerSession(p2.Name)
		return p.State == "COMPLETED" && p.EndReason == "RECONNECT_WINDOW_EXPIRED"
	})
	var errBody struct {
		Details []struct {
			Reason string `json:"reason"`
		} `json:"details"`
	}
	if code := s.rest("POST", "/v1/"+p2.Name+":reconnect", map[string]any{}, &errBody); code != http.StatusBadRequest ||
		len(errBody.Details) == 0 || errBody.Details[0].Reason != "PLAYER_SESSION_EXPIRED" {
		t.Fatalf("reconnect after the window: %d %+v", code, errBody)
	}
	if _, reply := join(t, a, psID(t, p2.Name), rec.Token); !strings.HasPrefix(reply, "REFUSED") {
		t.Fatalf("join after the window: %q", reply)
	}
	if p := s.playerSession(p1.Name); p.State != "ACTIVE" {
		t.Fatalf("p1 is %s, want ACTIVE throughout", p.State)
	}

	// The history of the game session tells the whole story.
	h := s.history(a.GameSession.Name)
	want := "GameSessionCreated → PlayerAccepted → PlayerAccepted → PlayerDisconnected → PlayerTokenReissued → PlayerReconnected → PlayerDisconnected → PlayerSessionCompleted"
	if got := types(h); got != want {
		t.Fatalf("game session history:\n%s\nwant\n%s", got, want)
	}
}

// An allocated game server that hangs is still replaced, and its game
// session ends with the server's reason; its players' sessions complete.
func TestAllocatedServerFailureEndsItsSession(t *testing.T) {
	s := startStack(t, 1)
	spec := fleetSpec(1, map[string]string{"TETHER_EXAMPLE_STOP_HEARTBEAT_AFTER": "3s"})
	spec["health"] = map[string]any{"initialDelaySeconds": 1, "periodSeconds": 1, "failureThreshold": 2}
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", spec, nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	wait.For(t, 15*time.Second, "a READY game server", func() bool { return len(byState(s.gameServers("arena"), "READY")) == 1 })
	a := s.allocate("arena", "p1")
	wait.For(t, 20*time.Second, "the game session ended with the server's reason", func() bool {
		var g gameSession
		return s.rest("GET", "/v1/"+a.GameSession.Name, nil, &g) == http.StatusOK &&
			g.State == "ENDED" && g.EndReason == "SERVER_ENDED" && g.ServerReason == "HEALTH_CHECK_FAILED"
	})
	if p := s.playerSession(a.PlayerSessions[0].Name); p.State != "COMPLETED" || p.EndReason != "GAME_SESSION_ENDED" {
		t.Fatalf("player session: %+v", p)
	}
	wait.For(t, 20*time.Second, "a replacement", func() bool {
		for _, g := range s.gameServers("arena") {
			if g.Name != a.GameServer.Name && (g.State == "READY" || g.State == "STARTING") {
				return true
			}
		}
		return false
	})
}

// A game server that belongs to no fleet stays UNHEALTHY, process and all,
// until it is deleted; nothing replaces it.
func TestStandaloneServerStaysUnhealthyUntilDeleted(t *testing.T) {
	s := startStack(t, 1)
	spec := fleetSpec(0, map[string]string{"TETHER_EXAMPLE_STOP_HEARTBEAT_AFTER": "1s"})
	spec["health"] = map[string]any{"initialDelaySeconds": 1, "periodSeconds": 1, "failureThreshold": 2}
	name := "fleets/standalone/gameServers/debug-1"
	wait.For(t, 10*time.Second, "an ONLINE host", func() bool {
		var hosts struct {
			Hosts []struct {
				State string `json:"state"`
			} `json:"hosts"`
		}
		return s.rest("GET", "/v1/hosts", nil, &hosts) == http.StatusOK && len(hosts.Hosts) > 0 && hosts.Hosts[0].State == "ONLINE"
	})
	if code := s.rest("POST", "/v1/fleets/standalone/gameServers?gameServerId=debug-1", spec, nil); code != http.StatusOK {
		t.Fatalf("create standalone game server: %d", code)
	}
	if code := s.rest("POST", "/v1/fleets?fleetId=standalone", fleetSpec(1, nil), nil); code != http.StatusBadRequest {
		t.Fatalf("a fleet named standalone: %d, want 400", code)
	}
	var g gameServer
	wait.For(t, 15*time.Second, "the standalone server UNHEALTHY", func() bool {
		return s.rest("GET", "/v1/"+name, nil, &g) == http.StatusOK && g.State == "UNHEALTHY"
	})
	if g.Reason != "HEALTH_CHECK_FAILED" || !alive(g.Pid) {
		t.Fatalf("unhealthy server: reason %q, pid %d alive %v", g.Reason, g.Pid, alive(g.Pid))
	}
	pid := g.Pid
	wait.Holds(t, 3*time.Second, "it stays UNHEALTHY with its process", func() bool {
		return s.rest("GET", "/v1/"+name, nil, &g) == http.StatusOK && g.State == "UNHEALTHY" && alive(pid)
	})
	if n := len(s.gameServers("standalone")); n != 1 {
		t.Fatalf("%d standalone servers, want 1 (nothing replaces it)", n)
	}
	if code := s.rest("DELETE", "/v1/"+name, nil, nil); code != http.StatusOK {
		t.Fatalf("delete: %d", code)
	}
	wait.For(t, 40*time.Second, "the deleted server TERMINATED", func() bool {
		return s.rest("GET", "/v1/"+name, nil, &g) == http.StatusOK && g.State == "TERMINATED"
	})
	if g.Reason != "SHUTDOWN_REQUESTED_BY_API" || alive(pid) {
		t.Fatalf("deleted server: reason %q, process alive %v", g.Reason, alive(pid))
	}
}

// The game's own SDK calls: a reserved server is not allocatable until its
// reservation ends; calling Ready after a match ends the game session
// (SERVER_READY_AGAIN); self-allocation creates a game session.
func TestReserveReadyAgainAndSelfAllocation(t *testing.T) {
	s := startStack(t, 1)
	g := s.soleReadyServer("arena")
	say := func(line string) string { return tell(t, g.Address, g.Ports[0].Port, line) }
	state := func() string {
		var now gameServer
		s.rest("GET", "/v1/"+g.Name, nil, &now)
		return now.State
	}

	if reply := say("RESERVE 4"); reply != "OK" {
		t.Fatalf("RESERVE: %q", reply)
	}
	wait.For(t, 5*time.Second, "RESERVED", func() bool { return state() == "RESERVED" })
	if code := s.rest("POST", "/v1/fleets/arena/gameServers:allocate", map[string]any{}, nil); code != http.StatusTooManyRequests {
		t.Fatalf("allocating the reserved fleet's only server: %d, want 429", code)
	}
	wait.For(t, 10*time.Second, "READY again when the reservation ends", func() bool { return state() == "READY" })

	a := s.allocate("arena", "p1")
	wait.For(t, 5*time.Second, "the game session in the views", func() bool {
		return s.rest("GET", "/v1/"+a.GameSession.Name, nil, nil) == http.StatusOK
	})
	if reply := say("READY"); reply != "OK" {
		t.Fatalf("READY: %q", reply)
	}
	wait.For(t, 10*time.Second, "the game session ended by Ready", func() bool {
		var gs gameSession
		return s.rest("GET", "/v1/"+a.GameSession.Name, nil, &gs) == http.StatusOK && gs.State == "ENDED" && gs.EndReason == "SERVER_READY_AGAIN"
	})
	if p := s.playerSession(a.PlayerSessions[0].Name); p.State != "COMPLETED" || p.EndReason != "GAME_SESSION_ENDED" {
		t.Fatalf("player session after Ready: %+v", p)
	}

	reply := say("ALLOCATE")
	session, ok := strings.CutPrefix(reply, "OK ")
	if !ok {
		t.Fatalf("ALLOCATE: %q", reply)
	}
	wait.For(t, 5*time.Second, "self-allocated with its game session", func() bool {
		var gs gameSession
		return state() == "ALLOCATED" && s.rest("GET", "/v1/"+session, nil, &gs) == http.StatusOK && gs.State == "ACTIVE"
	})
	want := "GameServerReserved → GameServerReady → GameServerAllocated → GameServerReady → GameServerAllocated"
	var lifecycle []string
	for _, e := range s.history(g.Name) {
		switch e.Type {
		case "GameServerReserved", "GameServerAllocated":
			lifecycle = append(lifecycle, e.Type)
		case "GameServerReady":
			if len(lifecycle) > 0 || e.Data.(*eventsv1.GameServerReady).GetReservationEnded() {
				lifecycle = append(lifecycle, e.Type)
			}
		}
	}
	if got := strings.Join(lifecycle, " → "); got != want {
		t.Fatalf("lifecycle after the first Ready:\n%s\nwant\n%s", got, want)
	}
}

// An allocator that stops between its two appends leaves an ALLOCATED
// server without its game session: the first player to arrive does not
// wait for the controller's repair; the agent creates the session from the
// server's allocation and admits the player.
func TestPlayerJoinsWhenTheAllocatorStoppedHalfway(t *testing.T) {
	keys := playertoken.NewKeySpec("test")
	s := startStack(t, 1, func(o *dev.Options) { o.PlayerTokenKeys = keys })
	ring, err := playertoken.Parse(keys)
	if err != nil {
		t.Fatal(err)
	}
	g := s.soleReadyServer("arena")
	// The allocator's first append only, as an API replica that died
	// right after it would leave it.
	gsess := events.GameSessionName("gsess-halfway")
	h := s.history(g.Name)
	alloc := events.New(g.Name, time.Now(), &eventsv1.GameServerAllocated{GameSession: gsess,
		Players: []*eventsv1.PlayerReservation{{PlayerSession: "ps-first", PlayerId: "first", Slot: 0}}})
	if _, err := s.store.Append(s.ctx, h[len(h)-1].Subject, h[len(h)-1].Sequence, alloc); err != nil {
		t.Fatal(err)
	}
	bus, err := commands.New(s.ctx, s.js)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Send(s.ctx, "h1", "tests", &agentv1.Command{Action: &agentv1.Command_Refresh{
		Refresh: &agentv1.RefreshGameServer{GameServer: g.Name}}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 3*time.Second, "the game server to see its allocation", func() bool {
		return strings.HasPrefix(tell(t, g.Address, g.Ports[0].Port, "STATE"), "STATE ALLOCATED "+gsess)
	})
	token := ring.Sign(events.PlayerSessionName("gsess-halfway", "ps-first"), time.Now().Add(time.Hour))
	_, reply := join(t, allocation{Endpoint: endpointOf(g)}, "ps-first", token)
	if reply != "WELCOME first slot=0 reconnected=false" {
		t.Fatalf("join: %q", reply)
	}
	created := s.history(gsess)
	if len(created) < 2 || created[0].Type != "GameSessionCreated" || created[0].Producer != "hosts/h1" || created[1].Type != "PlayerAccepted" {
		t.Fatalf("game session history: %s (first by %q)", types(created), created[0].Producer)
	}
}

// reconnectToken calls :reconnect for a player session and returns the
// fresh token.
func (s *stack) reconnectToken(ps string) string {
	s.t.Helper()
	var rec struct {
		Token string `json:"token"`
	}
	if code := s.rest("POST", "/v1/"+ps+":reconnect", map[string]any{}, &rec); code != http.StatusOK || rec.Token == "" {
		s.t.Fatalf("reconnect %s: %d %+v", ps, code, rec)
	}
	return rec.Token
}

// readyMatch makes a fleet of one example game server with a 60 s
// reconnect window, allocates it to one player and returns the allocation
// once the game server knows of it.
func (s *stack) readyMatch() allocation {
	s.t.Helper()
	spec := fleetSpec(1, nil)
	spec["playerSessions"] = map[string]any{"maxPlayers": 4, "reservationTimeoutSeconds": 60, "reconnectWindowSeconds": 60}
	if code := s.rest("POST", "/v1/fleets?fleetId=arena", spec, nil); code != http.StatusOK {
		s.t.Fatalf("create fleet: %d", code)
	}
	wait.For(s.t, 15*time.Second, "a READY game server", func() bool { return len(byState(s.gameServers("arena"), "READY")) == 1 })
	a := s.allocate("arena", "p1")
	wait.For(s.t, 5*time.Second, "the game server to see its allocation", func() bool {
		return strings.HasPrefix(serverState(s.t, a), "STATE ALLOCATED "+a.GameSession.Name)
	})
	return a
}

// A reconnect revokes the tokens issued before it: the allocation's token
// is refused once the player has asked for a fresh one, whether the seat
// was never taken or the player dropped.
func TestReconnectRevokesTheEarlierToken(t *testing.T) {
	s := startStack(t, 1)
	a := s.readyMatch()
	p1 := a.PlayerSessions[0]

	// Reserved: the first token is replaced before it is used.
	fresh := s.reconnectToken(p1.Name)
	if _, reply := join(t, a, psID(t, p1.Name), p1.Token); !strings.HasPrefix(reply, "REFUSED") || !strings.Contains(reply, "PLAYER_TOKEN_REVOKED") {
		t.Fatalf("join with the allocation's token after a reconnect: %q, want REFUSED … PLAYER_TOKEN_REVOKED", reply)
	}
	conn, reply := join(t, a, psID(t, p1.Name), fresh)
	if reply != "WELCOME p1 slot=0 reconnected=false" {
		t.Fatalf("join with the fresh token: %q", reply)
	}

	// Dropped: the token the player joined with is replaced too.
	conn.conn.Close()
	wait.For(t, 5*time.Second, "p1 DISCONNECTED", func() bool { return s.playerSession(p1.Name).State == "DISCONNECTED" })
	again := s.reconnectToken(p1.Name)
	if _, reply := join(t, a, psID(t, p1.Name), fresh); !strings.Contains(reply, "PLAYER_TOKEN_REVOKED") {
		t.Fatalf("rejoin with the replaced token: %q, want REFUSED … PLAYER_TOKEN_REVOKED", reply)
	}
	if _, reply := join(t, a, psID(t, p1.Name), again); reply != "WELCOME p1 slot=0 reconnected=true" {
		t.Fatalf("rejoin with the latest token: %q", reply)
	}
	want := "GameSessionCreated → PlayerTokenReissued → PlayerAccepted → PlayerDisconnected → PlayerTokenReissued → PlayerReconnected"
	wait.For(t, 5*time.Second, "the history: "+want, func() bool { return types(s.history(a.GameSession.Name)) == want })
}

// One token admits one connection: a second connection presenting the
// token of the player's live connection is refused, and its close leaves
// the player ACTIVE.
func TestSecondConnectionWithTheSameTokenIsRefused(t *testing.T) {
	s := startStack(t, 1)
	a := s.readyMatch()
	p1 := a.PlayerSessions[0]
	first, reply := join(t, a, psID(t, p1.Name), p1.Token)
	if reply != "WELCOME p1 slot=0 reconnected=false" {
		t.Fatalf("join: %q", reply)
	}
	wait.For(t, 5*time.Second, "p1 ACTIVE", func() bool { return s.playerSession(p1.Name).State == "ACTIVE" })
	second, reply := join(t, a, psID(t, p1.Name), p1.Token)
	if !strings.HasPrefix(reply, "REFUSED") || !strings.Contains(reply, "PLAYER_ALREADY_CONNECTED") {
		t.Fatalf("a second connection with the same token: %q, want REFUSED … PLAYER_ALREADY_CONNECTED", reply)
	}
	second.conn.Close()
	// The first connection is still the player's: it echoes, and the seat
	// stays ACTIVE with nothing recorded after the accept.
	if _, err := fmt.Fprintln(first.conn, "still here"); err != nil || !first.lines.Scan() || first.lines.Text() != "still here" {
		t.Fatalf("the first connection after the second was refused: %v %q", err, first.lines.Text())
	}
	wait.Holds(t, 2*time.Second, "p1 ACTIVE, nothing recorded after the accept", func() bool {
		return s.playerSession(p1.Name).State == "ACTIVE" && types(s.history(a.GameSession.Name)) == "GameSessionCreated → PlayerAccepted"
	})
}

// A player whose client dropped before the game server noticed reconnects
// from another client: the fresh token takes the seat over (an event says
// so), the old connection's close changes nothing, and the new
// connection's close is recorded as usual.
func TestTakeoverSurvivesTheOldConnectionsClose(t *testing.T) {
	s := startStack(t, 1)
	a := s.readyMatch()
	p1 := a.PlayerSessions[0]
	old, reply := join(t, a, psID(t, p1.Name), p1.Token)
	if reply != "WELCOME p1 slot=0 reconnected=false" {
		t.Fatalf("join: %q", reply)
	}
	wait.For(t, 5*time.Second, "p1 ACTIVE", func() bool { return s.playerSession(p1.Name).State == "ACTIVE" })
	fresh := s.reconnectToken(p1.Name)
	current, reply := join(t, a, psID(t, p1.Name), fresh)
	if reply != "WELCOME p1 slot=0 reconnected=true" {
		t.Fatalf("join from the other client: %q", reply)
	}
	if _, reply := join(t, a, psID(t, p1.Name), fresh); !strings.Contains(reply, "PLAYER_ALREADY_CONNECTED") {
		t.Fatalf("the fresh token on a third connection: %q, want REFUSED … PLAYER_ALREADY_CONNECTED", reply)
	}
	takeover := "GameSessionCreated → PlayerAccepted → PlayerTokenReissued → PlayerTakenOver"
	wait.For(t, 5*time.Second, "the takeover recorded and in the views", func() bool {
		return types(s.history(a.GameSession.Name)) == takeover && s.playerSession(p1.Name).ReconnectCount == 1
	})

	old.conn.Close()
	wait.Holds(t, 2*time.Second, "p1 ACTIVE after the old connection's close, nothing recorded", func() bool {
		p := s.playerSession(p1.Name)
		return p.State == "ACTIVE" && p.ReconnectCount == 1 && types(s.history(a.GameSession.Name)) == takeover
	})
	current.conn.Close()
	wait.For(t, 5*time.Second, "p1 DISCONNECTED by the current connection's close", func() bool {
		return s.playerSession(p1.Name).State == "DISCONNECTED"
	})
}
