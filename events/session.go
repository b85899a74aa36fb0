package events

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// A game session and its player sessions are one aggregate on the game
// session's subject: the game session is the consistency boundary for its
// seats and for the race between a reconnect and the end of its window.

// Reasons a game-session command is refused (RefusedError.Reason).
const (
	RefusedGameSessionEnded     = "GAME_SESSION_ENDED"
	RefusedGameSessionUnknown   = "GAME_SESSION_NOT_FOUND"
	RefusedGameSessionFull      = "GAME_SESSION_FULL"
	RefusedPlayerSessionUnknown = "PLAYER_SESSION_NOT_FOUND"
	RefusedPlayerSessionExpired = "PLAYER_SESSION_EXPIRED"
	RefusedPlayerSessionState   = "PLAYER_SESSION_STATE"
	// RefusedTokenRevoked is a token of an earlier generation than the
	// seat's: a reconnect reissued the seat's token since.
	RefusedTokenRevoked = "PLAYER_TOKEN_REVOKED"
	// RefusedPlayerAlreadyConnected is a second accept of an ACTIVE seat
	// with the token its connection was accepted with.
	RefusedPlayerAlreadyConnected = "PLAYER_ALREADY_CONNECTED"
)

// RefusedError is a command the aggregate's state refuses for a reason a
// client can act on, e.g. GAME_SESSION_FULL.
type RefusedError struct {
	// Reason is a machine-readable reason (the Refused… constants).
	Reason string
	// Msg is for humans.
	Msg string
}

func (e *RefusedError) Error() string { return e.Msg }

func refused(reason, format string, args ...any) error {
	return &RefusedError{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// Player and game session status shorthands.
const (
	psReserved     = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_RESERVED
	psActive       = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_ACTIVE
	psDisconnected = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_DISCONNECTED
	psCompleted    = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_COMPLETED
	psTimedOut     = eventsv1.PlayerSessionStatus_PLAYER_SESSION_STATUS_TIMED_OUT
	gsessActive    = eventsv1.GameSessionStatus_GAME_SESSION_STATUS_ACTIVE
	gsessEnded     = eventsv1.GameSessionStatus_GAME_SESSION_STATUS_ENDED
)

// GameSessionName returns "gameSessions/{id}".
func GameSessionName(id string) string { return gameSessionsCollection + "/" + id }

// PlayerSessionName returns "gameSessions/{game_session}/playerSessions/{id}".
func PlayerSessionName(gameSession, id string) string {
	return GameSessionName(gameSession) + "/" + playerSessionsSegment + "/" + id
}

// ParseGameSessionName returns the id of "gameSessions/{game_session}".
func ParseGameSessionName(name string) (string, error) {
	return parseSingle(name, gameSessionsCollection)
}

// ParsePlayerSessionName returns the game session and player session ids of
// "gameSessions/{game_session}/playerSessions/{player_session}".
func ParsePlayerSessionName(name string) (gameSession, id string, err error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != gameSessionsCollection || parts[2] != playerSessionsSegment {
		return "", "", fmt.Errorf("%w: %q is not gameSessions/{game_session}/playerSessions/{player_session}", ErrInvalidName, name)
	}
	if err := CheckID(parts[1]); err != nil {
		return "", "", err
	}
	if err := CheckID(parts[3]); err != nil {
		return "", "", err
	}
	return parts[1], parts[3], nil
}

// PlayerSessionStatusName returns "ACTIVE" for PLAYER_SESSION_STATUS_ACTIVE.
func PlayerSessionStatusName(s eventsv1.PlayerSessionStatus) string {
	return trimEnumPrefix(s.String(), "PLAYER_SESSION_STATUS_")
}

// GameSessionStatusName returns "ACTIVE" for GAME_SESSION_STATUS_ACTIVE.
func GameSessionStatusName(s eventsv1.GameSessionStatus) string {
	return trimEnumPrefix(s.String(), "GAME_SESSION_STATUS_")
}

// FindPlayer returns the player session with this id (the last token of its
// name) in a game session, or nil.
func FindPlayer(s *eventsv1.GameSessionState, id string) *eventsv1.PlayerSessionState {
	for _, p := range s.GetPlayers() {
		if p.GetName() == PlayerSessionName(lastToken(s.GetName()), id) {
			return p
		}
	}
	return nil
}

// SeatHeld reports whether a player session still holds its seat.
func SeatHeld(p *eventsv1.PlayerSessionState) bool {
	switch p.GetStatus() {
	case psReserved, psActive, psDisconnected:
		return true
	}
	return false
}

// SeatsTaken counts the seats held in a game session.
func SeatsTaken(s *eventsv1.GameSessionState) int {
	n := 0
	for _, p := range s.GetPlayers() {
		if SeatHeld(p) {
			n++
		}
	}
	return n
}

// FreeSlots returns the n lowest seat numbers not held by anyone, or a
// GAME_SESSION_FULL refusal when max players (if any) leaves fewer.
func FreeSlots(s *eventsv1.GameSessionState, n int) ([]int32, error) {
	held := map[int32]bool{}
	for _, p := range s.GetPlayers() {
		if SeatHeld(p) {
			held[p.GetSlot()] = true
		}
	}
	if max := int(s.GetPolicy().GetMaxPlayers()); max > 0 && len(held)+n > max {
		return nil, refused(RefusedGameSessionFull, "game session %s has %d of %d seats taken; %d more do not fit", s.GetName(), len(held), max, n)
	}
	out := make([]int32, 0, n)
	for slot := int32(0); len(out) < n; slot++ {
		if !held[slot] {
			out = append(out, slot)
		}
	}
	return out, nil
}

func lastToken(name string) string { return name[strings.LastIndex(name, "/")+1:] }

// gameSessionEvents lists the event types of the game session aggregate.
var gameSessionEvents = []string{
	"GameSessionCreated", "GameSessionEnded", "PlayerSessionReserved", "PlayerAccepted",
	"PlayerDisconnected", "PlayerReconnected", "PlayerSessionCompleted", "PlayerSessionTimedOut",
	"PlayerTokenReissued", "PlayerTakenOver",
}

// playerTransitions is the explicit transition table of player sessions
// (docs/architecture.md, "Aggregates and the event catalogue";
// docs/player-sessions.md): the states each event may arrive in, and the
// state it leads to (unspecified: the status does not change).
var playerTransitions = map[string]struct {
	from []eventsv1.PlayerSessionStatus
	to   eventsv1.PlayerSessionStatus
}{
	"PlayerAccepted":         {from: []eventsv1.PlayerSessionStatus{psReserved}, to: psActive},
	"PlayerDisconnected":     {from: []eventsv1.PlayerSessionStatus{psActive}, to: psDisconnected},
	"PlayerReconnected":      {from: []eventsv1.PlayerSessionStatus{psDisconnected}, to: psActive},
	"PlayerTakenOver":        {from: []eventsv1.PlayerSessionStatus{psActive}, to: psActive},
	"PlayerSessionCompleted": {from: []eventsv1.PlayerSessionStatus{psReserved, psActive, psDisconnected}, to: psCompleted},
	"PlayerSessionTimedOut":  {from: []eventsv1.PlayerSessionStatus{psReserved}, to: psTimedOut},
	"PlayerTokenReissued":    {from: []eventsv1.PlayerSessionStatus{psReserved, psActive, psDisconnected}},
}

// ApplyGameSession folds one event into a game session's state and returns
// the new state; the input is not modified. Events the state does not allow
// are errors.
func ApplyGameSession(state *eventsv1.GameSessionState, e Envelope) (*eventsv1.GameSessionState, error) {
	host := state.GetHost()
	if c, ok := e.Data.(*eventsv1.GameSessionCreated); ok && state.GetHost() == "" {
		// An agent may create the session its allocator left out, for its
		// own host only.
		host = c.GetHost()
	}
	if err := checkStored(e, host); err != nil {
		return nil, err
	}
	if !slices.Contains(gameSessionEvents, e.Type) {
		return nil, fmt.Errorf("events: %s is not a game session event", e.Type)
	}
	created := state.GetStatus() != eventsv1.GameSessionStatus_GAME_SESSION_STATUS_UNSPECIFIED
	if created == (e.Type == "GameSessionCreated") {
		return nil, &TransitionError{Aggregate: e.Aggregate, From: GameSessionStatusName(state.GetStatus()), Event: e.Type}
	}
	if state.GetStatus() == gsessEnded {
		return nil, &TransitionError{Aggregate: e.Aggregate, From: "ENDED", Event: e.Type}
	}
	next := proto.CloneOf(state)
	if next == nil {
		next = &eventsv1.GameSessionState{}
	}
	at := timestamppb.New(e.Time)
	gsessID := lastToken(e.Aggregate)
	addSeat := func(seat *eventsv1.PlayerSeat) error {
		if err := CheckID(seat.GetPlayerSession()); err != nil {
			return err
		}
		if FindPlayer(next, seat.GetPlayerSession()) != nil {
			return fmt.Errorf("events: %s: player session %s exists", e.Aggregate, seat.GetPlayerSession())
		}
		next.Players = append(next.Players, &eventsv1.PlayerSessionState{
			Name: PlayerSessionName(gsessID, seat.GetPlayerSession()), PlayerId: seat.GetPlayerId(), PlayerData: seat.GetPlayerData(),
			Slot: seat.GetSlot(), Status: psReserved, ReservationDeadline: seat.GetReservationDeadline(), CreateTime: at, UpdateTime: at,
		})
		return nil
	}
	switch d := e.Data.(type) {
	case *eventsv1.GameSessionCreated:
		next.Name, next.GameServer, next.Status = e.Aggregate, d.GetGameServer(), gsessActive
		next.Properties = maps.Clone(d.GetProperties())
		next.Policy = proto.CloneOf(d.GetPolicy())
		next.AllocationRequestId = d.GetAllocationRequestId()
		next.Host = d.GetHost()
		next.CreateTime = at
		for _, seat := range d.GetPlayers() {
			if err := addSeat(seat); err != nil {
				return nil, err
			}
		}
	case *eventsv1.GameSessionEnded:
		next.Status, next.EndReason, next.ServerReason = gsessEnded, d.GetReason(), d.GetServerReason()
		for _, p := range next.Players {
			if SeatHeld(p) {
				p.Status, p.EndReason, p.UpdateTime = psCompleted, eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_GAME_SESSION_ENDED, at
				p.ReservationDeadline, p.ReconnectDeadline = nil, nil
			}
		}
	case *eventsv1.PlayerSessionReserved:
		if err := addSeat(d.GetSeat()); err != nil {
			return nil, err
		}
	default:
		id, ok := PlayerSessionOf(e.Data)
		if !ok {
			return nil, fmt.Errorf("events: %s has payload %T", e.Type, e.Data)
		}
		p := FindPlayer(next, id)
		if p == nil {
			return nil, fmt.Errorf("events: %s: %s names unknown player session %q", e.Aggregate, e.Type, id)
		}
		if err := applyPlayer(p, e, at); err != nil {
			return nil, err
		}
	}
	next.UpdateTime = at
	return next, nil
}

// applyPlayer folds a player event into its player session (p, modified).
func applyPlayer(p *eventsv1.PlayerSessionState, e Envelope, at *timestamppb.Timestamp) error {
	row := playerTransitions[e.Type]
	if !slices.Contains(row.from, p.GetStatus()) {
		return &TransitionError{Aggregate: p.GetName(), From: PlayerSessionStatusName(p.GetStatus()), Event: e.Type}
	}
	p.UpdateTime = at
	if d, ok := e.Data.(*eventsv1.PlayerTokenReissued); ok {
		if d.GetTokenGeneration() <= p.GetTokenGeneration() {
			return fmt.Errorf("events: %s: token generation %d reissued at generation %d", p.GetName(), d.GetTokenGeneration(), p.GetTokenGeneration())
		}
		p.TokenGeneration = d.GetTokenGeneration()
		return nil // the seat and its deadlines stay as they are
	}
	p.Status = row.to
	p.ReservationDeadline, p.ReconnectDeadline = nil, nil
	connect := func(generation int64) {
		p.Connection++
		p.ConnectionTokenGeneration = generation
	}
	switch d := e.Data.(type) {
	case *eventsv1.PlayerAccepted:
		connect(d.GetTokenGeneration())
	case *eventsv1.PlayerDisconnected:
		p.ReconnectDeadline = d.GetReconnectDeadline()
	case *eventsv1.PlayerReconnected:
		p.ReconnectCount++
		connect(d.GetTokenGeneration())
	case *eventsv1.PlayerTakenOver:
		p.ReconnectCount++
		connect(d.GetTokenGeneration())
	case *eventsv1.PlayerSessionCompleted:
		p.EndReason = d.GetReason()
	}
	return nil
}

// PlayerSessionOf returns the player session id a player event is about.
func PlayerSessionOf(m proto.Message) (string, bool) {
	switch d := m.(type) {
	case *eventsv1.PlayerAccepted:
		return d.GetPlayerSession(), true
	case *eventsv1.PlayerDisconnected:
		return d.GetPlayerSession(), true
	case *eventsv1.PlayerReconnected:
		return d.GetPlayerSession(), true
	case *eventsv1.PlayerSessionCompleted:
		return d.GetPlayerSession(), true
	case *eventsv1.PlayerSessionTimedOut:
		return d.GetPlayerSession(), true
	case *eventsv1.PlayerTokenReissued:
		return d.GetPlayerSession(), true
	case *eventsv1.PlayerTakenOver:
		return d.GetPlayerSession(), true
	}
	return "", false
}

// StaleConnection reports whether a game server's report about connection
// (AcceptPlayer's number; 0: unspecified) concerns a connection that no
// longer holds the seat: a newer one took it over.
func StaleConnection(p *eventsv1.PlayerSessionState, connection int64) bool {
	return connection != 0 && connection != p.GetConnection()
}

// GameSessionCommand is a command on a game session; see the types below.
type GameSessionCommand interface{ gameSessionCommand() }

// CreateGameSession records the game session an allocation placed; its
// data comes from the game server's GameServerAllocated.
type CreateGameSession struct {
	// Created is the event to record.
	Created *eventsv1.GameSessionCreated
}

// ReservePlayer reserves the lowest free seat for a player.
type ReservePlayer struct {
	// PlayerSession is the new player session's id.
	PlayerSession string
	// PlayerID and PlayerData describe the player.
	PlayerID, PlayerData string
	// Now is the decision time; the reservation ends after the policy's timeout.
	Now time.Time
}

// AcceptPlayer admits a player who presented a valid token of the seat's
// current token generation (an earlier one is refused,
// PLAYER_TOKEN_REVOKED): a RESERVED seat becomes ACTIVE; a DISCONNECTED one
// within its window reconnects. An ACTIVE seat is taken over by a token of
// a later generation than its connection's (the player reconnected from
// elsewhere before the server noticed the drop), and refused to the same
// generation (PLAYER_ALREADY_CONNECTED: one token, one connection).
type AcceptPlayer struct {
	// PlayerSession is the player session id.
	PlayerSession string
	// TokenGeneration is the generation of the token presented.
	TokenGeneration int64
	// Now is the decision time.
	Now time.Time
}

// ReissueToken raises a held seat's token generation, so that a fresh
// token can be issued and every earlier one is refused.
type ReissueToken struct {
	// PlayerSession is the player session id.
	PlayerSession string
	// Now is the decision time.
	Now time.Time
}

// DisconnectPlayer records that the game server lost an ACTIVE player; the
// seat is kept for the policy's reconnect window.
type DisconnectPlayer struct {
	// PlayerSession is the player session id.
	PlayerSession string
	// Connection is the connection lost (AcceptPlayer's number); a report
	// about a connection that no longer holds the seat changes nothing. 0
	// means whichever holds it.
	Connection int64
	// Now is the decision time.
	Now time.Time
}

// RemovePlayer ends a player's session for good (reason LEFT).
type RemovePlayer struct {
	// PlayerSession is the player session id.
	PlayerSession string
	// Connection is as in DisconnectPlayer.
	Connection int64
}

// TrackSeat moves the seat of a player whom the game server reports by
// player id, without a token: Agones' player tracking (PlayerConnect,
// PlayerDisconnect) on a server whose allocation reserved the player a
// seat. Connected, the player's RESERVED seat becomes ACTIVE and a
// DISCONNECTED one within its window reconnects, as AcceptPlayer with the
// seat's current token would; gone, an ACTIVE seat waits for the policy's
// reconnect window, as DisconnectPlayer does. A player with no seat held in
// the session, or a seat that is so already, changes nothing. The game
// server vouches for the player, as it does for any player it admits.
type TrackSeat struct {
	// PlayerID is the player's id, as the allocation's seat has it.
	PlayerID string
	// Connected is true for a connect, false for a disconnect.
	Connected bool
	// Now is the decision time.
	Now time.Time
}

// ExpirePlayers fires the deadlines passed at Now: reservations not taken
// time out, reconnect windows not used complete. Controllers run it.
type ExpirePlayers struct {
	// Now is the decision time.
	Now time.Time
}

// EndGameSession ends the match.
type EndGameSession struct {
	// Reason says why.
	Reason eventsv1.GameSessionEndReason
	// ServerReason is the game server's reason, when it ended with it.
	ServerReason eventsv1.Reason
	// Detail is for humans.
	Detail string
}

func (CreateGameSession) gameSessionCommand() {}
func (ReservePlayer) gameSessionCommand()     {}
func (AcceptPlayer) gameSessionCommand()      {}
func (ReissueToken) gameSessionCommand()      {}
func (DisconnectPlayer) gameSessionCommand()  {}
func (RemovePlayer) gameSessionCommand()      {}
func (TrackSeat) gameSessionCommand()         {}
func (ExpirePlayers) gameSessionCommand()     {}
func (EndGameSession) gameSessionCommand()    {}

// DecideGameSession returns the events a command produces on a game
// session, or why it is refused; state is nil for a session that does not
// exist yet. The events are checked against the transition tables before
// they are returned.
func DecideGameSession(name string, state *eventsv1.GameSessionState, cmd GameSessionCommand) ([]proto.Message, error) {
	out, err := decideGameSession(name, state, cmd)
	if err != nil {
		return nil, err
	}
	check := state
	for _, m := range out {
		if check, err = ApplyGameSession(check, Envelope{Aggregate: name, Type: TypeOf(m), Data: m}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decideGameSession(name string, state *eventsv1.GameSessionState, cmd GameSessionCommand) ([]proto.Message, error) {
	if _, ok := cmd.(CreateGameSession); !ok {
		if state.GetStatus() == eventsv1.GameSessionStatus_GAME_SESSION_STATUS_UNSPECIFIED {
			return nil, refused(RefusedGameSessionUnknown, "game session %s does not exist", name)
		}
	}
	ended := state.GetStatus() == gsessEnded
	player := func(id string) (*eventsv1.PlayerSessionState, error) {
		p := FindPlayer(state, id)
		if p == nil {
			return nil, refused(RefusedPlayerSessionUnknown, "player session %s is not in game session %s", id, name)
		}
		return p, nil
	}
	switch c := cmd.(type) {
	case CreateGameSession:
		if state.GetStatus() != eventsv1.GameSessionStatus_GAME_SESSION_STATUS_UNSPECIFIED {
			return nil, nil // created already: a retry or a repair that lost the race
		}
		return []proto.Message{proto.CloneOf(c.Created)}, nil
	case ReservePlayer:
		if ended {
			return nil, refused(RefusedGameSessionEnded, "game session %s has ended", name)
		}
		if c.PlayerID == "" {
			return nil, Invalid("player_session.player_id", "must be set")
		}
		slots, err := FreeSlots(state, 1)
		if err != nil {
			return nil, err
		}
		timeout := time.Duration(state.GetPolicy().GetReservationTimeoutSeconds()) * time.Second
		return []proto.Message{&eventsv1.PlayerSessionReserved{Seat: &eventsv1.PlayerSeat{
			PlayerSession: c.PlayerSession, PlayerId: c.PlayerID, PlayerData: c.PlayerData, Slot: slots[0],
			ReservationDeadline: timestamppb.New(c.Now.Add(timeout)),
		}}}, nil
	case AcceptPlayer:
		p, err := player(c.PlayerSession)
		if err != nil {
			return nil, err
		}
		return decideAccept(p, c)
	case ReissueToken:
		p, err := player(c.PlayerSession)
		if err != nil {
			return nil, err
		}
		if !SeatHeld(p) || p.GetStatus() == psDisconnected && c.Now.After(p.GetReconnectDeadline().AsTime()) {
			return nil, refused(RefusedPlayerSessionExpired, "player session %s no longer holds its seat", p.GetName())
		}
		return []proto.Message{&eventsv1.PlayerTokenReissued{PlayerSession: c.PlayerSession, TokenGeneration: p.GetTokenGeneration() + 1}}, nil
	case DisconnectPlayer:
		p, err := player(c.PlayerSession)
		if err != nil {
			return nil, err
		}
		if StaleConnection(p, c.Connection) {
			return nil, nil // a connection the seat was taken from
		}
		switch p.GetStatus() {
		case psActive:
		case psDisconnected:
			return nil, nil // reported twice
		default:
			return nil, refused(RefusedPlayerSessionState, "player session %s is %s, not ACTIVE", p.GetName(), PlayerSessionStatusName(p.GetStatus()))
		}
		window := time.Duration(state.GetPolicy().GetReconnectWindowSeconds()) * time.Second
		return []proto.Message{&eventsv1.PlayerDisconnected{PlayerSession: c.PlayerSession, ReconnectDeadline: timestamppb.New(c.Now.Add(window))}}, nil
	case RemovePlayer:
		p, err := player(c.PlayerSession)
		if err != nil {
			return nil, err
		}
		if !SeatHeld(p) || StaleConnection(p, c.Connection) {
			return nil, nil // ended already, or not this connection's seat any more
		}
		return []proto.Message{&eventsv1.PlayerSessionCompleted{PlayerSession: c.PlayerSession, Reason: eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_LEFT}}, nil
	case TrackSeat:
		return decideTrackSeat(state, c), nil
	case ExpirePlayers:
		var out []proto.Message
		for _, p := range state.GetPlayers() {
			id := lastToken(p.GetName())
			switch {
			case p.GetStatus() == psReserved && p.GetReservationDeadline() != nil && c.Now.After(p.GetReservationDeadline().AsTime()):
				out = append(out, &eventsv1.PlayerSessionTimedOut{PlayerSession: id})
			case p.GetStatus() == psDisconnected && c.Now.After(p.GetReconnectDeadline().AsTime()):
				out = append(out, &eventsv1.PlayerSessionCompleted{PlayerSession: id, Reason: eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_RECONNECT_WINDOW_EXPIRED})
			}
		}
		return out, nil
	case EndGameSession:
		if ended {
			return nil, nil
		}
		return []proto.Message{&eventsv1.GameSessionEnded{Reason: c.Reason, ServerReason: c.ServerReason, Detail: c.Detail}}, nil
	}
	return nil, fmt.Errorf("events: unknown game session command %T", cmd)
}

// decideTrackSeat decides a TrackSeat: nothing for a player without a
// seat held, or one whose seat is as the report says already; nothing
// either for a seat whose reservation or reconnect window has passed (the
// deadline's own event ends it).
func decideTrackSeat(state *eventsv1.GameSessionState, c TrackSeat) []proto.Message {
	if state.GetStatus() == gsessEnded || c.PlayerID == "" {
		return nil
	}
	var p *eventsv1.PlayerSessionState
	for _, q := range state.GetPlayers() {
		if q.GetPlayerId() == c.PlayerID && SeatHeld(q) {
			p = q
			break
		}
	}
	if p == nil {
		return nil
	}
	id, gen := lastToken(p.GetName()), p.GetTokenGeneration()
	switch {
	case c.Connected && p.GetStatus() == psReserved:
		if d := p.GetReservationDeadline(); d != nil && c.Now.After(d.AsTime()) {
			return nil
		}
		return []proto.Message{&eventsv1.PlayerAccepted{PlayerSession: id, TokenGeneration: gen}}
	case c.Connected && p.GetStatus() == psDisconnected:
		if c.Now.After(p.GetReconnectDeadline().AsTime()) {
			return nil
		}
		return []proto.Message{&eventsv1.PlayerReconnected{PlayerSession: id, TokenGeneration: gen}}
	case !c.Connected && p.GetStatus() == psActive:
		window := time.Duration(state.GetPolicy().GetReconnectWindowSeconds()) * time.Second
		return []proto.Message{&eventsv1.PlayerDisconnected{PlayerSession: id, ReconnectDeadline: timestamppb.New(c.Now.Add(window))}}
	}
	return nil
}

// decideAccept decides an AcceptPlayer on player session p.
func decideAccept(p *eventsv1.PlayerSessionState, c AcceptPlayer) ([]proto.Message, error) {
	if SeatHeld(p) && c.TokenGeneration != p.GetTokenGeneration() {
		return nil, refused(RefusedTokenRevoked, "player session %s: the token is of generation %d, the seat's is %d (a reconnect reissued it): use the latest token",
			p.GetName(), c.TokenGeneration, p.GetTokenGeneration())
	}
	switch p.GetStatus() {
	case psReserved:
		// Like a reconnect window, a reservation ends at its deadline
		// whether or not ExpirePlayers has run yet.
		if d := p.GetReservationDeadline(); d != nil && c.Now.After(d.AsTime()) {
			return nil, refused(RefusedPlayerSessionExpired, "player session %s: the reservation ended at %s", p.GetName(), d.AsTime().Format(time.RFC3339Nano))
		}
		return []proto.Message{&eventsv1.PlayerAccepted{PlayerSession: lastToken(p.GetName()), TokenGeneration: c.TokenGeneration}}, nil
	case psActive:
		if c.TokenGeneration <= p.GetConnectionTokenGeneration() {
			return nil, refused(RefusedPlayerAlreadyConnected, "player session %s is ACTIVE on connection %d with this token: one token admits one connection (a player who lost theirs gets a fresh token with :reconnect)",
				p.GetName(), p.GetConnection())
		}
		return []proto.Message{&eventsv1.PlayerTakenOver{PlayerSession: lastToken(p.GetName()), TokenGeneration: c.TokenGeneration}}, nil
	case psDisconnected:
		if c.Now.After(p.GetReconnectDeadline().AsTime()) {
			return nil, refused(RefusedPlayerSessionExpired, "player session %s: the reconnect window ended at %s", p.GetName(), p.GetReconnectDeadline().AsTime().Format(time.RFC3339Nano))
		}
		return []proto.Message{&eventsv1.PlayerReconnected{PlayerSession: lastToken(p.GetName()), TokenGeneration: c.TokenGeneration}}, nil
	}
	return nil, refused(RefusedPlayerSessionExpired, "player session %s is %s", p.GetName(), PlayerSessionStatusName(p.GetStatus()))
}

// SessionCreated is the GameSessionCreated that follows an allocation of
// gameServer, on host: the allocation's game session, properties and
// seats, with the fleet's policy (reservations end after its timeout from
// now; max players from the allocation).
func SessionCreated(gameServer, host string, alloc *eventsv1.GameServerAllocated, policy *eventsv1.PlayerSessionPolicy, now time.Time, requestID string) *eventsv1.GameSessionCreated {
	c := &eventsv1.GameSessionCreated{
		GameServer: gameServer, Host: host, Properties: maps.Clone(alloc.GetProperties()), AllocationRequestId: requestID,
		Policy: &eventsv1.GameSessionPolicy{
			MaxPlayers: alloc.GetMaxPlayers(), ReservationTimeoutSeconds: policy.GetReservationTimeoutSeconds(),
			ReconnectWindowSeconds: policy.GetReconnectWindowSeconds(),
		},
	}
	var deadline *timestamppb.Timestamp
	if t := policy.GetReservationTimeoutSeconds(); t > 0 {
		deadline = timestamppb.New(now.Add(time.Duration(t) * time.Second))
	}
	for _, p := range alloc.GetPlayers() {
		c.Players = append(c.Players, &eventsv1.PlayerSeat{PlayerSession: p.GetPlayerSession(), PlayerId: p.GetPlayerId(),
			PlayerData: p.GetPlayerData(), Slot: p.GetSlot(), ReservationDeadline: deadline})
	}
	return c
}

// NextDeadline returns the earliest reservation or reconnect deadline in a
// game session, or the zero time when none is pending.
func NextDeadline(s *eventsv1.GameSessionState) time.Time {
	var next time.Time
	for _, p := range s.GetPlayers() {
		var d *timestamppb.Timestamp
		switch p.GetStatus() {
		case psReserved:
			d = p.GetReservationDeadline()
		case psDisconnected:
			d = p.GetReconnectDeadline()
		}
		if d != nil && (next.IsZero() || d.AsTime().Before(next)) {
			next = d.AsTime()
		}
	}
	return next
}
