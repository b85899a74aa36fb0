package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// gameServerName accepts a full name or FLEET/GS.
func gameServerName(s string) string {
	if strings.HasPrefix(s, "fleets/") {
		return s
	}
	if fleet, gs, ok := strings.Cut(s, "/"); ok {
		return "fleets/" + fleet + "/gameServers/" + gs
	}
	return s
}

func (c *cli) gameServersCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "gameservers", Aliases: []string{"gameserver", "gs"}, Short: "List, show and watch game servers"}
	var fleet, state, host string
	var interval time.Duration
	list := &cobra.Command{
		Use: "list [--fleet NAME] [--state READY] [--host h1]", Short: "List game servers", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := c.listGameServers(cmd.Context(), fleet, state, host)
			if err != nil {
				return err
			}
			return c.render(resp, func(w *tabwriter.Writer) { gameServerTable(w, resp.GetGameServers()...) })
		},
	}
	get := &cobra.Command{
		Use: "get NAME", Short: "Show a game server with its reason and evidence", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := c.gameServers()
			if err != nil {
				return err
			}
			ctx, cancel := c.call(cmd.Context())
			defer cancel()
			g, err := api.GetGameServer(ctx, &tetherv1.GetGameServerRequest{Name: gameServerName(args[0])})
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			return c.render(g, func(w *tabwriter.Writer) { gameServerTable(w, g) })
		},
	}
	watch := &cobra.Command{
		Use: "watch [--fleet NAME]", Short: "Print a line for every game server change, until Ctrl-C", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.watchGameServers(cmd.Context(), fleet, state, host, interval)
		},
	}
	for _, sub := range []*cobra.Command{list, watch} {
		sub.Flags().StringVar(&fleet, "fleet", "", "only this fleet")
		sub.Flags().StringVar(&state, "state", "", "only this state (READY, ALLOCATED, …)")
		sub.Flags().StringVar(&host, "host", "", "only this host")
	}
	watch.Flags().DurationVar(&interval, "interval", time.Second, "poll interval")
	cmd.AddCommand(list, get, watch)
	return cmd
}

func (c *cli) listGameServers(ctx context.Context, fleet, state, host string) (*tetherv1.ListGameServersResponse, error) {
	api, err := c.gameServers()
	if err != nil {
		return nil, err
	}
	parent := "fleets/-"
	if fleet != "" {
		parent = fleetName(fleet)
	}
	var terms []string
	if state != "" {
		terms = append(terms, "state="+strings.ToUpper(state))
	}
	if host != "" {
		if !strings.HasPrefix(host, "hosts/") {
			host = "hosts/" + host
		}
		terms = append(terms, "host="+host)
	}
	resp := &tetherv1.ListGameServersResponse{}
	token := ""
	for {
		cctx, cancel := c.call(ctx)
		page, err := api.ListGameServers(cctx, &tetherv1.ListGameServersRequest{
			Parent: parent, Filter: strings.Join(terms, " AND "), PageSize: 1000, PageToken: token})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
		resp.GameServers = append(resp.GameServers, page.GetGameServers()...)
		if token = page.GetNextPageToken(); token == "" {
			return resp, nil
		}
	}
}

// summary is the line watch compares and prints.
func summary(g *tetherv1.GameServer) string {
	s := fmt.Sprintf("%s state=%s connection=%s health=%s", g.GetName(), g.GetState(), g.GetConnection().GetState(), g.GetHealth().GetState())
	if g.GetReason() != "" {
		s += " reason=" + g.GetReason()
	}
	return s
}

func (c *cli) watchGameServers(ctx context.Context, fleet, state, host string, interval time.Duration) error {
	seen := map[string]string{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		resp, err := c.listGameServers(ctx, fleet, state, host)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := map[string]string{}
		for _, g := range resp.GetGameServers() {
			line := summary(g)
			now[g.GetName()] = line
			if seen[g.GetName()] != line {
				fmt.Fprintf(c.out, "%s %s\n", time.Now().Format("15:04:05"), line)
			}
		}
		if !first {
			for name := range seen {
				if _, ok := now[name]; !ok {
					fmt.Fprintf(c.out, "%s %s gone from the list\n", time.Now().Format("15:04:05"), name)
				}
			}
		}
		seen = now
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func gameServerTable(w io.Writer, list ...*tetherv1.GameServer) {
	fmt.Fprintln(w, "NAME\tSTATE\tCONNECTION\tHEALTH\tHOST\tADDRESS\tPORTS\tPID\tREASON\tAGE")
	for _, g := range list {
		var ports []string
		for _, p := range g.GetPorts() {
			ports = append(ports, fmt.Sprintf("%s:%d", p.GetName(), p.GetPort()))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", g.GetName(), g.GetState(), g.GetConnection().GetState(),
			g.GetHealth().GetState(), orDash(g.GetHost()), orDash(g.GetAddress()), orDash(strings.Join(ports, ",")),
			g.GetPid(), orDash(g.GetReason()), age(g.GetCreateTime()))
	}
}
