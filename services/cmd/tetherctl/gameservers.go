package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// gameServerQuery selects game servers: a fleet (all when empty) and
// filter terms.
type gameServerQuery struct {
	fleet, state, host, health, connection string
	// all includes the ended (TERMINATED) servers, which a query without
	// a state leaves out otherwise.
	all bool
	// minSequence is the event sequence the views must have applied.
	minSequence int64
}

// addFlags declares the selection flags on cmd.
func (q *gameServerQuery) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&q.fleet, "fleet", "", "only this fleet (default all fleets)")
	f.StringVar(&q.state, "state", "", "only this state: SCHEDULED, STARTING, READY, RESERVED, ALLOCATED, SHUTTING_DOWN, TERMINATED, UNHEALTHY")
	f.StringVar(&q.host, "host", "", `only this host ("h1" or "hosts/h1")`)
	f.StringVar(&q.health, "health", "", "only this health: HEALTHY, DEGRADED, FAILED")
	f.StringVar(&q.connection, "connection", "", "only this SDK connection state: CONNECTED, DISCONNECTED, UNKNOWN")
}

// parent returns "fleets/{fleet}", or "fleets/-" for all fleets.
func (q gameServerQuery) parent() string {
	if q.fleet == "" {
		return allFleetsParent
	}
	return fleetName(q.fleet)
}

// filter returns the API filter string, e.g. "state=READY AND host=hosts/h1".
func (q gameServerQuery) filter() string {
	var terms []string
	for _, t := range []struct{ field, value string }{
		{"state", strings.ToUpper(q.state)},
		{"host", q.host},
		{"health", strings.ToUpper(q.health)},
		{"connection", strings.ToUpper(q.connection)},
	} {
		if t.value == "" {
			continue
		}
		if t.field == "host" {
			t.value = hostName(t.value)
		}
		terms = append(terms, t.field+"="+t.value)
	}
	if !q.all && q.state == "" {
		terms = append(terms, "ended=false")
	}
	return strings.Join(terms, " AND ")
}

func (a *app) gameServersCommand() *cobra.Command {
	cmd := group("gameservers", "List, show, watch and shut down game servers, change their counters and lists, and print their logs", "gameserver", "gs")
	cmd.AddCommand(a.gameServersListCommand(), a.gameServersGetCommand(), a.gameServersWatchCommand(), a.gameServersLogsCommand(),
		a.gameServersShutdownCommand(), a.gameServersCounterCommand(), a.gameServersListValuesCommand())
	return cmd
}

func (a *app) gameServersShutdownCommand() *cobra.Command {
	var grace time.Duration
	var detail string
	cmd := &cobra.Command{
		Use:   "shutdown NAME [--grace 30s] [--detail TEXT]",
		Short: "Shut a game server down: its process gets the notice, SIGTERM, and SIGKILL at the deadline",
		Long: `Shut a game server down; NAME is ` + gameServerFormats + `. The game gets a
shutdown notice through the SDK, then SIGTERM, then SIGKILL once --grace has
passed. It ends SHUTDOWN_REQUESTED_BY_API, with --detail in its evidence, and
a fleet replaces it. A match on it ends too: shut down a server in a match
only when that is what you mean.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := gameServerName(args[0])
			if err != nil {
				return err
			}
			if grace < time.Second || grace%time.Second != 0 {
				return fmt.Errorf("--grace must be whole seconds, at least 1s, not %s", grace)
			}
			return a.withClient(func(c *client) error {
				if name, err = c.resolveGameServer(cmd.Context(), name); err != nil {
					return err
				}
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				g, err := c.gameServers.ShutdownGameServer(ctx, &tetherv1.ShutdownGameServerRequest{
					Name: name, GraceSeconds: int32(min(grace/time.Second, math.MaxInt32)), Detail: detail, RequestId: newRequestID(),
				})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.print(g, func(w io.Writer) { a.gameServerTable(w, g) })
			})
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 30*time.Second, "time between the notice and SIGKILL")
	cmd.Flags().StringVar(&detail, "detail", "", "why, for the server's evidence")
	return cmd
}

func (a *app) gameServersListCommand() *cobra.Command {
	var q gameServerQuery
	cmd := &cobra.Command{
		Use:   "list [--fleet NAME] [--state STATE] [--host HOST] [--all]",
		Short: "List the live game servers, of all fleets unless --fleet is given (--all: the ended ones too)",
		Long: `List game servers, of all fleets unless --fleet is given. The ended
(TERMINATED) ones are left out, and counted under the table, unless --all
or --state TERMINATED asks for them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(func(c *client) error {
				list, ended, err := listGameServers(cmd.Context(), c, q)
				if err != nil {
					return err
				}
				return printList(a, "gameServers", list, func(w io.Writer) {
					a.gameServerTable(w, list...)
					if ended > 0 {
						fmt.Fprintf(w, "\n%d ended not shown (--all shows them)\n", ended)
					}
				})
			})
		},
	}
	q.addFlags(cmd)
	cmd.Flags().BoolVar(&q.all, "all", false, "the ended (TERMINATED) servers too")
	addMinSequence(cmd, &q.minSequence)
	return cmd
}

func (a *app) gameServersGetCommand() *cobra.Command {
	var minSeq int64
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a game server (-o yaml for its evidence)",
		Long:  "Show a game server; NAME is " + gameServerFormats + ".",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := gameServerName(args[0])
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				if name, err = c.resolveGameServer(cmd.Context(), name); err != nil {
					return err
				}
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				g, err := c.gameServers.GetGameServer(ctx, &tetherv1.GetGameServerRequest{Name: name, MinSequence: minSeq})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.print(g, func(w io.Writer) { a.gameServerTable(w, g); counterSections(w, g) })
			})
		},
	}
	addMinSequence(cmd, &minSeq)
	return cmd
}

func (a *app) gameServersCounterCommand() *cobra.Command {
	var count, diff, capacity int64
	cmd := &cobra.Command{
		Use:     "update-counter NAME COUNTER [--count N] [--diff N] [--capacity N]",
		Aliases: []string{"counter"},
		Short:   "Change a counter of a game server: its count, by a difference, or its capacity",
		Long: `Change a counter of a game server; NAME is ` + gameServerFormats + `, COUNTER
one of its template's counters (docs/counters-and-lists.md). --capacity is
set first, then --count, then --diff is added; the count must end within
[0, capacity], else nothing changes (OUT_OF_RANGE). A retry of the same
command is counted once (it carries a request id).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := gameServerName(args[0])
			if err != nil {
				return err
			}
			req := &tetherv1.UpdateGameServerCounterRequest{Name: name, Counter: args[1], CountDiff: diff, RequestId: newRequestID()}
			if cmd.Flags().Changed("count") {
				req.Count = &count
			}
			if cmd.Flags().Changed("capacity") {
				req.Capacity = &capacity
			}
			if req.Count == nil && req.Capacity == nil && diff == 0 {
				return fmt.Errorf("nothing to change: give --count, --diff or --capacity")
			}
			return a.withClient(func(c *client) error {
				if req.Name, err = c.resolveGameServer(cmd.Context(), name); err != nil {
					return err
				}
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				g, err := c.gameServers.UpdateGameServerCounter(ctx, req)
				if err != nil {
					return c.apiError(req.GetName(), err)
				}
				return a.print(g, func(w io.Writer) { a.gameServerTable(w, g); counterSections(w, g) })
			})
		},
	}
	cmd.Flags().Int64Var(&count, "count", 0, "the count to set")
	cmd.Flags().Int64Var(&diff, "diff", 0, "added to the count (negative to take away), after --count")
	cmd.Flags().Int64Var(&capacity, "capacity", 0, "the capacity to set (first)")
	return cmd
}

func (a *app) gameServersListValuesCommand() *cobra.Command {
	var add, remove []string
	var capacity int64
	cmd := &cobra.Command{
		Use:     "update-list NAME LIST [--add VALUE]... [--remove VALUE]... [--capacity N]",
		Aliases: []string{"list-values"},
		Short:   "Change a list of a game server: add or remove values, or set its capacity",
		Long: `Change a list of a game server; NAME is ` + gameServerFormats + `, LIST one of
its template's lists (docs/counters-and-lists.md). --capacity is set first,
then the --remove values are removed, then the --add values added at the
end. A value added that the list holds is refused (ALREADY_EXISTS), one
removed that it does not hold too (NOT_FOUND), and so are values past the
capacity (OUT_OF_RANGE); nothing changes then.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := gameServerName(args[0])
			if err != nil {
				return err
			}
			req := &tetherv1.UpdateGameServerListRequest{Name: name, List: args[1], AddValues: add, RemoveValues: remove, RequestId: newRequestID()}
			if cmd.Flags().Changed("capacity") {
				req.Capacity = &capacity
			}
			if req.Capacity == nil && len(add) == 0 && len(remove) == 0 {
				return fmt.Errorf("nothing to change: give --add, --remove or --capacity")
			}
			return a.withClient(func(c *client) error {
				if req.Name, err = c.resolveGameServer(cmd.Context(), name); err != nil {
					return err
				}
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				g, err := c.gameServers.UpdateGameServerList(ctx, req)
				if err != nil {
					return c.apiError(req.GetName(), err)
				}
				return a.print(g, func(w io.Writer) { a.gameServerTable(w, g); counterSections(w, g) })
			})
		},
	}
	cmd.Flags().StringArrayVar(&add, "add", nil, "a value to add (repeat for more)")
	cmd.Flags().StringArrayVar(&remove, "remove", nil, "a value to remove (repeat for more)")
	cmd.Flags().Int64Var(&capacity, "capacity", 0, "the capacity to set (first)")
	return cmd
}

// resolveGameServer turns "fleets/-/gameServers/ID" (an id alone, from
// gameServerName) into the full name of the one game server with that id,
// in whatever fleet, TERMINATED ones included; other names come back as
// they are. An id that no server has is NOT_FOUND; one that servers of
// several fleets have is refused with their names.
func (c *client) resolveGameServer(ctx context.Context, name string) (string, error) {
	id, ok := strings.CutPrefix(name, allFleetsParent+gameServersInfix)
	if !ok {
		return name, nil
	}
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.gameServers.ListGameServers(ctx, &tetherv1.ListGameServersRequest{Parent: allFleetsParent, Filter: "id=" + id, PageSize: 10})
	if err != nil {
		return "", c.apiError(id, err)
	}
	switch list := resp.GetGameServers(); len(list) {
	case 0:
		return "", c.apiError(id, status.Error(codes.NotFound, "no game server in any fleet has this id"))
	case 1:
		return list[0].GetName(), nil
	default:
		var names []string
		for _, g := range list {
			names = append(names, shortName(g.GetName()))
		}
		more := ""
		if resp.GetNextPageToken() != "" {
			more = ", and more"
		}
		return "", fmt.Errorf("game server id %s is in more than one fleet (%s%s): name it FLEET/%s", id, strings.Join(names, ", "), more, id)
	}
}

// counterSections writes a game server's counters, lists and
// annotations under its table, one a line, when it has any.
func counterSections(w io.Writer, g *tetherv1.GameServer) {
	if len(g.GetCounters()) == 0 && len(g.GetLists()) == 0 && len(g.GetAnnotations()) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, k := range slices.Sorted(maps.Keys(g.GetAnnotations())) {
		fmt.Fprintf(w, "Annotation %s:\t%s\n", k, g.GetAnnotations()[k])
	}
	for _, name := range slices.Sorted(maps.Keys(g.GetCounters())) {
		c := g.GetCounters()[name]
		fmt.Fprintf(w, "Counter %s:\t%d of %d\n", name, c.GetCount(), c.GetCapacity())
	}
	for _, name := range slices.Sorted(maps.Keys(g.GetLists())) {
		l := g.GetLists()[name]
		fmt.Fprintf(w, "List %s:\t%d of %d\t%s\n", name, len(l.GetValues()), l.GetCapacity(), strings.Join(l.GetValues(), ", "))
	}
}

// countersSummary is a game server's counters and lists in a column:
// "rooms=3/10,players=2/4"; "-" for none.
func countersSummary(g *tetherv1.GameServer) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(g.GetCounters())) {
		c := g.GetCounters()[name]
		out = append(out, fmt.Sprintf("%s=%d/%d", name, c.GetCount(), c.GetCapacity()))
	}
	for _, name := range slices.Sorted(maps.Keys(g.GetLists())) {
		l := g.GetLists()[name]
		out = append(out, fmt.Sprintf("%s=%d/%d", name, len(l.GetValues()), l.GetCapacity()))
	}
	return orDash(strings.Join(out, ","))
}

// listGameServers reads every page of the game servers q selects, and
// how many ended ones it left out (q without all or a state).
func listGameServers(ctx context.Context, c *client, q gameServerQuery) (list []*tetherv1.GameServer, ended int, err error) {
	req := &tetherv1.ListGameServersRequest{Parent: q.parent(), Filter: q.filter(), PageSize: pageSize, MinSequence: q.minSequence}
	list, err = listAll(ctx, c, func(ctx context.Context, token string) ([]*tetherv1.GameServer, string, error) {
		req.PageToken = token
		resp, err := c.gameServers.ListGameServers(ctx, req)
		if token == "" {
			ended = int(resp.GetEndedCount())
		}
		return resp.GetGameServers(), resp.GetNextPageToken(), err
	})
	if err != nil {
		return nil, 0, c.apiError("", err)
	}
	return list, ended, nil
}

func (a *app) gameServerTable(w io.Writer, list ...*tetherv1.GameServer) {
	row(w, "NAME", "STATE", "CONNECTION", "HEALTH", "HOST", "ADDRESS", "PORTS", "PID", "REV", "REASON", "AGE", "COUNTERS")
	now := a.now()
	for _, g := range list {
		row(w, shortName(g.GetName()), enumName(g.GetState()), enumName(g.GetConnection().GetState()),
			healthWord(g), orDash(shortName(g.GetHost())), orDash(g.GetAddress()),
			orDash(ports(g.GetPorts())), positive(int64(g.GetPid())), positive(g.GetRevision()), orDash(g.GetReason()), age(now, g.GetCreateTime()),
			countersSummary(g))
	}
}

// healthWord is a server's health; an ended server's reads "was HEALTHY":
// what it was when it ended, not what it is now.
func healthWord(g *tetherv1.GameServer) string {
	h := enumName(g.GetHealth().GetState())
	if g.GetState() == tetherv1.GameServer_TERMINATED && h != "-" {
		return "was " + h
	}
	return h
}

// positive renders n, or "-" when it is not set (0).
func positive[N int32 | int64](n N) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatInt(int64(n), 10)
}

// ports renders assigned ports as "game:7001/UDP,query:7002/TCP".
func ports(list []*tetherv1.Port) string {
	out := make([]string, 0, len(list))
	for _, p := range list {
		proto := p.GetProtocol()
		if proto == tetherv1.PortSpec_PROTOCOL_UNSPECIFIED {
			proto = tetherv1.PortSpec_UDP // the documented default
		}
		out = append(out, fmt.Sprintf("%s:%d/%s", p.GetName(), p.GetPort(), proto))
	}
	return strings.Join(out, ",")
}
