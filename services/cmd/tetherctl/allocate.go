package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// allocateFlags are the flags of "allocate".
type allocateFlags struct {
	players, selectors, properties []string
	scheduling, requestID          string
	maxPlayers                     int32
}

// request builds the AllocateGameServerRequest for fleet ("-": any fleet).
func (f allocateFlags) request(fleet string) (*tetherv1.AllocateGameServerRequest, error) {
	players, err := parsePlayers(f.players)
	if err != nil {
		return nil, err
	}
	selectors, err := parseSelectors(f.selectors)
	if err != nil {
		return nil, err
	}
	properties, err := parseKeyValues("--property", f.properties)
	if err != nil {
		return nil, err
	}
	if f.maxPlayers < 0 {
		return nil, fmt.Errorf("--max-players must not be negative, not %d", f.maxPlayers)
	}
	return &tetherv1.AllocateGameServerRequest{
		Parent:      fleetName(fleet),
		RequestId:   f.requestID,
		Selectors:   selectors,
		Scheduling:  strings.ToUpper(f.scheduling),
		GameSession: &tetherv1.GameSessionRequest{Properties: properties, MaxPlayers: f.maxPlayers},
		Players:     players,
	}, nil
}

func (a *app) allocateCommand() *cobra.Command {
	var f allocateFlags
	cmd := &cobra.Command{
		Use:   "allocate FLEET [--player ID[=DATA]]... [--selector K=V,...]...",
		Short: "Allocate a READY game server to a new game session, with seats for players",
		Long: `Allocate a READY game server of FLEET ("-" for any fleet) to a new game
session and reserve a seat for each --player, as a matchmaker would. It
prints the game server, the endpoint clients connect to, the game session
and each player session with its slot and token (-o json|yaml: the whole
response).

Each --selector is a set of labels a server must have ("mode=ranked,region=eu");
several are tried in order, the first that matches a READY server wins. An
empty selector ('') matches any server, e.g. as the last fallback.

The call is idempotent by --request-id: retrying with the same id returns
the first allocation instead of making another. When not given, a fresh id
is used and printed (with -o json|yaml, on stderr), so that a call whose
outcome is unknown (timeout, lost connection) can be retried safely.

The views may show the new game session a moment later: pass the printed
sequence as --min-sequence to "sessions get" or "players reconnect".

When no READY server matches, tetherctl fails with NO_READY_GAME_SERVER.`,
		Example: `  tetherctl allocate arena --player p1=elo=1500 --player p2 --property map=dust
  tetherctl allocate - --selector region=eu,mode=ranked --selector mode=ranked --scheduling DISTRIBUTED`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			generated := f.requestID == ""
			if generated {
				f.requestID = newRequestID()
			}
			req, err := f.request(args[0])
			if err != nil {
				return err
			}
			if generated && a.output != formatTable {
				// The table shows it; JSON and YAML hold the response only.
				fmt.Fprintf(cmd.ErrOrStderr(), "request id: %s\n", f.requestID)
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				resp, err := c.allocation.AllocateGameServer(ctx, req)
				if err != nil {
					return retryHint(c.apiError(req.GetParent(), err), req.GetRequestId())
				}
				return a.print(resp, func(w io.Writer) { a.allocationSummary(w, resp, req.GetRequestId()) })
			})
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.players, "player", nil, "reserve a seat for player ID, with optional opaque DATA handed to the game server (repeatable)")
	fl.StringArrayVar(&f.selectors, "selector", nil, "labels the game server must have, K=V,... (repeatable: tried in order)")
	fl.StringVar(&f.scheduling, "scheduling", "", "PACKED (fill busy hosts first, the default) or DISTRIBUTED (spread over hosts)")
	fl.StringArrayVar(&f.properties, "property", nil, "game session property K=V the game server sees (repeatable)")
	fl.Int32Var(&f.maxPlayers, "max-players", 0, "seats of the game session (default the fleet's player-session policy)")
	addRequestID(cmd, &f.requestID)
	return cmd
}

// addRequestID declares --request-id on a mutating command.
func addRequestID(cmd *cobra.Command, id *string) {
	cmd.Flags().StringVar(id, "request-id", "",
		"idempotency key: a retry with the same id returns the first result (default a fresh id, printed)")
}

// retryHint adds the request id to an error after which the call may or may
// not have taken effect, so that it can be retried without doing it twice.
// Refusals (invalid arguments, NO_READY_GAME_SERVER, …) are returned as they
// are.
func retryHint(err error, requestID string) error {
	var ce *callError
	if errors.As(err, &ce) {
		switch ce.st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown, codes.Internal, codes.Canceled:
		default:
			return err
		}
	}
	return fmt.Errorf("%w\n  the outcome is unknown: repeat the same command with --request-id %s to get the same result", err, requestID)
}

// allocationSummary writes an allocation for people: where to connect, the
// game session, and the player sessions with their slots and tokens.
func (a *app) allocationSummary(w io.Writer, resp *tetherv1.AllocateGameServerResponse, requestID string) {
	g, s := resp.GetGameServer(), resp.GetGameSession()
	server := shortName(g.GetName())
	if h := g.GetHost(); h != "" {
		server += " on " + shortName(h)
	}
	row(w, "Game server:", server)
	row(w, "Endpoint:", endpoint(resp.GetEndpoint()))
	row(w, "Game session:", shortName(s.GetName()))
	row(w, "Players:", seats(s))
	row(w, "Properties:", orDash(keyValues(s.GetProperties())))
	row(w, "Request id:", requestID)
	row(w, "Sequence:", strconv.FormatInt(s.GetSequence(), 10))
	if len(resp.GetPlayerSessions()) > 0 {
		fmt.Fprintln(w)
		tokenTable(w, resp.GetPlayerSessions()...)
	}
}

// tokenTable lists player sessions with what a player needs to join: slot
// and token.
func tokenTable(w io.Writer, list ...*tetherv1.PlayerSession) {
	row(w, "PLAYER SESSION", "PLAYER", "SLOT", "TOKEN")
	for _, p := range list {
		row(w, shortName(p.GetName()), p.GetPlayerId(), strconv.Itoa(int(p.GetSlot())), orDash(p.GetToken()))
	}
}

// endpoint renders where clients connect, one address:port per port, e.g.
// "127.0.0.1:7001 (game/UDP), 127.0.0.1:7002 (query/TCP)".
func endpoint(e *tetherv1.Endpoint) string {
	if len(e.GetPorts()) == 0 {
		return orDash(e.GetAddress())
	}
	out := make([]string, 0, len(e.GetPorts()))
	for _, p := range e.GetPorts() {
		proto := p.GetProtocol()
		if proto == tetherv1.PortSpec_PROTOCOL_UNSPECIFIED {
			proto = tetherv1.PortSpec_UDP // the documented default
		}
		out = append(out, fmt.Sprintf("%s:%d (%s/%s)", e.GetAddress(), p.GetPort(), p.GetName(), proto))
	}
	return strings.Join(out, ", ")
}

// parsePlayer reads "ID" or "ID=DATA"; DATA is everything after the first
// "=", so it may itself hold "=" and ",".
func parsePlayer(s string) (*tetherv1.PlayerRequest, error) {
	id, data, _ := strings.Cut(s, "=")
	if id == "" {
		return nil, fmt.Errorf("--player %q: want ID or ID=DATA", s)
	}
	return &tetherv1.PlayerRequest{PlayerId: id, PlayerData: data}, nil
}

// parsePlayers reads every --player; a player id may appear only once.
func parsePlayers(list []string) ([]*tetherv1.PlayerRequest, error) {
	out := make([]*tetherv1.PlayerRequest, 0, len(list))
	seen := map[string]bool{}
	for _, s := range list {
		p, err := parsePlayer(s)
		if err != nil {
			return nil, err
		}
		if seen[p.GetPlayerId()] {
			return nil, fmt.Errorf("--player %s given twice", p.GetPlayerId())
		}
		seen[p.GetPlayerId()] = true
		out = append(out, p)
	}
	return out, nil
}

// parseSelectors reads every --selector "K=V,K2=V2" into a label selector,
// in order; "" selects any server.
func parseSelectors(list []string) ([]*tetherv1.LabelSelector, error) {
	out := make([]*tetherv1.LabelSelector, 0, len(list))
	for _, s := range list {
		var pairs []string
		if strings.TrimSpace(s) != "" {
			pairs = strings.Split(s, ",")
		}
		labels, err := parseKeyValues("--selector", pairs)
		if err != nil {
			return nil, err
		}
		out = append(out, &tetherv1.LabelSelector{MatchLabels: labels})
	}
	return out, nil
}

// parseKeyValues reads "K=V" pairs of flag into a map; keys must be set
// and unique, values may be empty.
func parseKeyValues(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, kv := range pairs {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s: key %q given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

// keyValues renders a map as "k1=v1,k2=v2", sorted by key.
func keyValues(m map[string]string) string {
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ",")
}

// seats renders a game session's seats taken and its maximum, "2/8", or
// "2/-" when it has no maximum.
func seats(s *tetherv1.GameSession) string {
	limit := "-"
	if n := s.GetMaxPlayers(); n > 0 {
		limit = strconv.Itoa(int(n))
	}
	return fmt.Sprintf("%d/%s", s.GetPlayerCount(), limit)
}
