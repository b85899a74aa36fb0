package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// gameSessionQuery selects game sessions by filter terms.
type gameSessionQuery struct {
	state, fleet, gameServer string
	// minSequence is the event sequence the views must have applied.
	minSequence int64
}

// filter returns the API filter string, e.g. "state=ACTIVE AND fleet=fleets/arena".
func (q gameSessionQuery) filter() (string, error) {
	var terms []string
	if q.state != "" {
		terms = append(terms, "state="+strings.ToUpper(q.state))
	}
	if q.fleet != "" {
		terms = append(terms, "fleet="+fleetName(q.fleet))
	}
	if q.gameServer != "" {
		name, err := gameServerName(q.gameServer)
		if err != nil {
			return "", fmt.Errorf("--game-server: %w", err)
		}
		terms = append(terms, "gameServer="+name)
	}
	return strings.Join(terms, " AND "), nil
}

func (a *app) sessionsCommand() *cobra.Command {
	cmd := group("sessions", "List and show game sessions", "session", "gamesessions")
	cmd.AddCommand(a.sessionsListCommand(), a.sessionsGetCommand())
	return cmd
}

func (a *app) sessionsListCommand() *cobra.Command {
	var q gameSessionQuery
	cmd := &cobra.Command{
		Use:   "list [--state ACTIVE|ENDED] [--fleet NAME] [--game-server NAME]",
		Short: "List game sessions, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := q.filter(); err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				if q.gameServer != "" {
					name, err := gameServerName(q.gameServer)
					if err != nil {
						return fmt.Errorf("--game-server: %w", err)
					}
					if q.gameServer, err = c.resolveGameServer(cmd.Context(), name); err != nil {
						return err
					}
				}
				filter, err := q.filter()
				if err != nil {
					return err
				}
				req := &tetherv1.ListGameSessionsRequest{Filter: filter, PageSize: pageSize, MinSequence: q.minSequence}
				list, err := listAll(cmd.Context(), c, func(ctx context.Context, token string) ([]*tetherv1.GameSession, string, error) {
					req.PageToken = token
					resp, err := c.sessions.ListGameSessions(ctx, req)
					return resp.GetGameSessions(), resp.GetNextPageToken(), err
				})
				if err != nil {
					return c.apiError("", err)
				}
				return printList(a, "gameSessions", list, func(w io.Writer) { a.gameSessionTable(w, list...) })
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&q.state, "state", "", "only this state: ACTIVE or ENDED")
	f.StringVar(&q.fleet, "fleet", "", "only sessions on game servers of this fleet")
	f.StringVar(&q.gameServer, "game-server", "", "only sessions on this game server ("+gameServerFormats+")")
	addMinSequence(cmd, &q.minSequence)
	return cmd
}

func (a *app) sessionsGetCommand() *cobra.Command {
	var minSeq int64
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a game session and its player sessions",
		Long: "Show a game session and its player sessions; NAME is " + gameSessionFormats + `.
-o json|yaml prints {"gameSession": {...}, "playerSessions": [...]}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := gameSessionName(args[0])
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				s, err := c.sessions.GetGameSession(ctx, &tetherv1.GetGameSessionRequest{Name: name, MinSequence: minSeq})
				if err != nil {
					return c.apiError(name, err)
				}
				// Players as of at least the session read above.
				players, err := c.sessions.ListPlayerSessions(ctx, &tetherv1.ListPlayerSessionsRequest{
					Parent: name, MinSequence: max(minSeq, s.GetSequence()),
				})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.printGameSession(s, players.GetPlayerSessions())
			})
		},
	}
	addMinSequence(cmd, &minSeq)
	return cmd
}

// printGameSession writes a game session and its player sessions: two
// tables, or one JSON/YAML object holding both.
func (a *app) printGameSession(s *tetherv1.GameSession, players []*tetherv1.PlayerSession) error {
	if a.output == formatTable {
		return a.printTable(func(w io.Writer) {
			a.gameSessionTable(w, s)
			fmt.Fprintln(w)
			playerTable(w, players...)
		})
	}
	session, err := protojson.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode game session: %w", err)
	}
	list := make([]json.RawMessage, 0, len(players))
	for _, p := range players {
		raw, err := protojson.Marshal(p)
		if err != nil {
			return fmt.Errorf("encode player sessions: %w", err)
		}
		list = append(list, raw)
	}
	raw, err := marshalJSON(struct {
		GameSession    json.RawMessage   `json:"gameSession"`
		PlayerSessions []json.RawMessage `json:"playerSessions"`
	}{session, list})
	if err != nil {
		return fmt.Errorf("encode game session: %w", err)
	}
	return a.printJSON(raw)
}

func (a *app) gameSessionTable(w io.Writer, list ...*tetherv1.GameSession) {
	row(w, "NAME", "GAME SERVER", "STATE", "PLAYERS", "END REASON", "AGE")
	now := a.now()
	for _, s := range list {
		row(w, shortName(s.GetName()), orDash(shortName(s.GetGameServer())), enumName(s.GetState()),
			seats(s), orDash(endReason(s)), age(now, s.GetCreateTime()))
	}
}

// endReason renders why a game session ended, with the game server's
// reason when it ended with its server: "SERVER_ENDED(HEALTH_CHECK_FAILED)".
func endReason(s *tetherv1.GameSession) string {
	if r := s.GetServerReason(); r != "" && s.GetEndReason() != "" {
		return s.GetEndReason() + "(" + r + ")"
	}
	return s.GetEndReason()
}

func (a *app) playersCommand() *cobra.Command {
	cmd := group("players", "List, show, add and reconnect player sessions", "player", "playersessions")
	cmd.AddCommand(a.playersListCommand(), a.playersGetCommand(), a.playersAddCommand(), a.playersReconnectCommand())
	return cmd
}

func (a *app) playersListCommand() *cobra.Command {
	var minSeq int64
	cmd := &cobra.Command{
		Use:   "list GAME_SESSION",
		Short: "List the player sessions of a game session, in seat order",
		Long:  "List the player sessions of a game session; GAME_SESSION is " + gameSessionFormats + ".",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := gameSessionName(args[0])
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				// One response holds every seat: the API does not page it.
				resp, err := c.sessions.ListPlayerSessions(ctx, &tetherv1.ListPlayerSessionsRequest{Parent: name, MinSequence: minSeq})
				if err != nil {
					return c.apiError(name, err)
				}
				list := resp.GetPlayerSessions()
				return printList(a, "playerSessions", list, func(w io.Writer) { playerTable(w, list...) })
			})
		},
	}
	addMinSequence(cmd, &minSeq)
	return cmd
}

func (a *app) playersGetCommand() *cobra.Command {
	var minSeq int64
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a player session (-o yaml for its deadlines)",
		Long:  "Show a player session; NAME is " + playerSessionFormats + ".",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := playerSessionName(args[0])
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				p, err := c.sessions.GetPlayerSession(ctx, &tetherv1.GetPlayerSessionRequest{Name: name, MinSequence: minSeq})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.print(p, func(w io.Writer) { playerTable(w, p) })
			})
		},
	}
	addMinSequence(cmd, &minSeq)
	return cmd
}

func (a *app) playersAddCommand() *cobra.Command {
	var player, requestID string
	cmd := &cobra.Command{
		Use:   "add GAME_SESSION --player ID[=DATA]",
		Short: "Reserve a seat for a player in a running game session",
		Long: `Reserve the lowest free seat of a running game session for a player and
print the player session with its slot and token; GAME_SESSION is ` + gameSessionFormats + `.
A full game session fails with GAME_SESSION_FULL.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := gameSessionName(args[0])
			if err != nil {
				return err
			}
			p, err := parsePlayer(player)
			if err != nil {
				return err
			}
			if requestID == "" {
				requestID = newRequestID()
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				ps, err := c.sessions.CreatePlayerSession(ctx, &tetherv1.CreatePlayerSessionRequest{
					Parent:        name,
					PlayerSession: &tetherv1.PlayerSession{PlayerId: p.GetPlayerId(), PlayerData: p.GetPlayerData()},
					RequestId:     requestID,
				})
				if err != nil {
					return retryHint(c.apiError(name, err), requestID)
				}
				return a.print(ps, func(w io.Writer) { tokenTable(w, ps) })
			})
		},
	}
	cmd.Flags().StringVar(&player, "player", "", "the player: ID, with optional opaque DATA handed to the game server")
	_ = cmd.MarkFlagRequired("player") // Fails only for an undefined flag.
	addRequestID(cmd, &requestID)
	return cmd
}

func (a *app) playersReconnectCommand() *cobra.Command {
	var minSeq int64
	cmd := &cobra.Command{
		Use:   "reconnect NAME",
		Short: "Get the endpoint, seat and a fresh token for a player to rejoin",
		Long: `Get what a player needs to rejoin their game session: the endpoint, their
seat and a fresh token; NAME is ` + playerSessionFormats + `. The token is of
the seat's next token generation, which is recorded: every token issued
for the seat before it is refused from now on. The game server records the
reconnect when it accepts the player. Once the seat is gone (reconnect window over, player left, session ended)
it fails with PLAYER_SESSION_EXPIRED.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := playerSessionName(args[0])
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				resp, err := c.sessions.ReconnectPlayerSession(ctx, &tetherv1.ReconnectPlayerSessionRequest{
					Name: name, RequestId: newRequestID(), MinSequence: minSeq,
				})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.print(resp, func(w io.Writer) { reconnectSummary(w, resp) })
			})
		},
	}
	addMinSequence(cmd, &minSeq)
	return cmd
}

// reconnectSummary writes what a player needs to rejoin.
func reconnectSummary(w io.Writer, resp *tetherv1.ReconnectPlayerSessionResponse) {
	p := resp.GetPlayerSession()
	row(w, "Player session:", shortName(p.GetName()))
	row(w, "Player:", p.GetPlayerId())
	row(w, "State:", enumName(p.GetState()))
	row(w, "Endpoint:", endpoint(resp.GetEndpoint()))
	row(w, "Slot:", strconv.Itoa(int(p.GetSlot())))
	row(w, "Token:", resp.GetToken())
	row(w, "Token generation:", strconv.FormatInt(p.GetTokenGeneration(), 10))
}

func playerTable(w io.Writer, list ...*tetherv1.PlayerSession) {
	row(w, "NAME", "PLAYER", "STATE", "SLOT", "RECONNECTS", "END REASON")
	for _, p := range list {
		row(w, shortName(p.GetName()), p.GetPlayerId(), enumName(p.GetState()), strconv.Itoa(int(p.GetSlot())),
			strconv.Itoa(int(p.GetReconnectCount())), orDash(p.GetEndReason()))
	}
}
