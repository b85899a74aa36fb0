package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// Kinds of change watch reports.
const (
	changeAdded   = "ADDED"
	changeChanged = "CHANGED"
	changeGone    = "GONE"
)

// defaultWatchInterval is how often watch polls by default.
const defaultWatchInterval = time.Second

func (a *app) gameServersWatchCommand() *cobra.Command {
	var (
		q        gameServerQuery
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "watch [--fleet NAME] [--interval 1s]",
		Short: "Print a line for every game server change, until interrupted",
		Long: `Poll the game servers and print one line per change until interrupted
(Ctrl-C): ADDED for a server first seen (every server on the first poll),
CHANGED with what changed among state, connection, health, reason and host,
GONE for a server no longer listed (deleted, or out of the filter).
With -o json each change is one JSON object per line; with -o yaml one
YAML document. Transient API errors are reported on stderr and retried.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return fmt.Errorf("--interval must be positive, not %s", interval)
			}
			// Ended servers too: a server that ends is a CHANGED line with
			// its reason, not GONE.
			q.all = true
			return a.withClient(func(c *client) error {
				return a.watchGameServers(cmd.Context(), c, q, interval, cmd.ErrOrStderr())
			})
		},
	}
	q.addFlags(cmd)
	cmd.Flags().DurationVar(&interval, "interval", defaultWatchInterval, "time between polls")
	return cmd
}

// change is one difference between two polls.
type change struct {
	kind string
	// gs is the game server as last seen.
	gs *tetherv1.GameServer
	// details says what changed, for CHANGED: "state STARTING -> READY".
	details []string
}

// watchGameServers polls until ctx ends, printing the changes between
// polls. An ended context is a normal end, not an error.
func (a *app) watchGameServers(ctx context.Context, c *client, q gameServerQuery, interval time.Duration, errOut io.Writer) error {
	var known map[string]*tetherv1.GameServer // nil until the first poll succeeds
	lastWarning := ""
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		list, _, err := listGameServers(ctx, c, q)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && transient(err):
			if msg := err.Error(); msg != lastWarning {
				fmt.Fprintf(errOut, "warning: %s; retrying every %s\n", msg, interval)
				lastWarning = msg
			}
		case err != nil:
			return err
		default:
			if lastWarning != "" {
				fmt.Fprintln(errOut, "api server reachable again")
				lastWarning = ""
			}
			now := a.now()
			for _, ch := range diffGameServers(known, list) {
				if err := a.printChange(now, ch); err != nil {
					return err
				}
			}
			known = make(map[string]*tetherv1.GameServer, len(list))
			for _, g := range list {
				known[g.GetName()] = g
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// transient reports errors worth retrying: the server was not reached, did
// not answer in time, or its views are behind.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// diffGameServers compares the servers known from the last poll (nil before
// the first) with a new poll, and returns the changes ordered by name.
func diffGameServers(known map[string]*tetherv1.GameServer, list []*tetherv1.GameServer) []change {
	var out []change
	seen := make(map[string]bool, len(list))
	for _, g := range list {
		seen[g.GetName()] = true
		old, ok := known[g.GetName()]
		if !ok {
			out = append(out, change{kind: changeAdded, gs: g})
			continue
		}
		if details := gameServerDiff(old, g); len(details) > 0 {
			out = append(out, change{kind: changeChanged, gs: g, details: details})
		}
	}
	for name, g := range known {
		if !seen[name] {
			out = append(out, change{kind: changeGone, gs: g})
		}
	}
	slices.SortFunc(out, func(x, y change) int { return cmp.Compare(x.gs.GetName(), y.gs.GetName()) })
	return out
}

// watched are the dimensions watch reports, as table cells.
func watched(g *tetherv1.GameServer) [][2]string {
	return [][2]string{
		{"state", enumName(g.GetState())},
		{"connection", enumName(g.GetConnection().GetState())},
		{"health", enumName(g.GetHealth().GetState())},
		{"reason", orDash(g.GetReason())},
		{"host", orDash(shortName(g.GetHost()))},
		{"pid", positive(int64(g.GetPid()))},
	}
}

func gameServerDiff(old, cur *tetherv1.GameServer) []string {
	var out []string
	before, after := watched(old), watched(cur)
	for i := range after {
		if before[i][1] != after[i][1] {
			out = append(out, fmt.Sprintf("%s %s -> %s", after[i][0], before[i][1], after[i][1]))
		}
	}
	return out
}

// printChange writes one change as a line, a JSON line or a YAML document.
func (a *app) printChange(now time.Time, ch change) error {
	var err error
	switch a.output {
	case formatTable:
		line := fmt.Sprintf("%s %-7s %s", now.Format("15:04:05"), ch.kind, shortName(ch.gs.GetName()))
		switch ch.kind {
		case changeAdded, changeGone:
			for _, kv := range watched(ch.gs) {
				line += " " + kv[0] + "=" + kv[1]
			}
		case changeChanged:
			for i, d := range ch.details {
				sep := ", "
				if i == 0 {
					sep = " "
				}
				line += sep + d
			}
		}
		_, err = fmt.Fprintln(a.out, line)
	default:
		var doc []byte
		if doc, err = changeJSON(now, ch); err != nil {
			return err
		}
		if a.output == formatYAML {
			if doc, err = yaml.JSONToYAML(doc); err != nil {
				return fmt.Errorf("convert to YAML: %w", err)
			}
			_, err = fmt.Fprintf(a.out, "---\n%s", doc)
		} else {
			_, err = fmt.Fprintf(a.out, "%s\n", doc)
		}
	}
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// changeJSON renders {"type", "time", "gameServer", "changes"} compactly.
func changeJSON(now time.Time, ch change) ([]byte, error) {
	gs, err := protojson.Marshal(ch.gs)
	if err != nil {
		return nil, fmt.Errorf("encode game server: %w", err)
	}
	doc, err := marshalJSON(struct {
		Type       string          `json:"type"`
		Time       time.Time       `json:"time"`
		GameServer json.RawMessage `json:"gameServer"`
		Changes    []string        `json:"changes,omitempty"`
	}{ch.kind, now.UTC(), gs, ch.details})
	if err != nil {
		return nil, fmt.Errorf("encode change: %w", err)
	}
	return doc, nil
}
