package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// auditNameFormats says which names the audit commands take.
const auditNameFormats = `fleets/FLEET, hosts/HOST, FLEET/GAMESERVER, GAMESERVER (an id no other fleet has), GAMESESSION, GAMESESSION/PLAYERSESSION, or any full resource name`

// auditName turns what an operator typed into a resource name.
func auditName(s string) (string, error) {
	switch {
	case strings.HasPrefix(s, fleetsPrefix) || strings.HasPrefix(s, hostsPrefix) || strings.HasPrefix(s, gameSessionsPrefix):
		return s, nil
	case strings.HasPrefix(s, "gsess-") && strings.Contains(s, "/"):
		return playerSessionName(s)
	case strings.HasPrefix(s, "gsess-"):
		return gameSessionName(s)
	case strings.Count(s, "/") <= 1 && s != "":
		return gameServerName(s) // an id alone is resolved by client.resolveGameServer
	}
	return "", fmt.Errorf("%q: give %s", s, auditNameFormats)
}

// auditReadCommands are the audit commands that read a resource's history.
func (a *app) auditReadCommands() []*cobra.Command {
	return []*cobra.Command{a.auditHistoryCommand(), a.auditExplainCommand(), a.auditStateCommand()}
}

func (a *app) auditHistoryCommand() *cobra.Command {
	var types []string
	var from, to string
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "List a resource's events, oldest first",
		Long: "List the events of a resource, read from the event stream; NAME is " + auditNameFormats + `.
Times are shown with their offset from the first event listed. The events of
a resource that ended and was archived are read from the archive: the list
ends with the segments they came from (with -o json, each event's
archiveSegment).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := auditName(args[0])
			if err != nil {
				return err
			}
			req := &tetherv1.ListEventsRequest{Name: name, Types: types, PageSize: 1000}
			if req.StartTime, err = a.parseTime("from", from); err != nil {
				return err
			}
			if req.EndTime, err = a.parseTime("to", to); err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				if req.Name, err = c.resolveGameServer(cmd.Context(), name); err != nil {
					return err
				}
				name = req.Name
				history := tetherv1.NewHistoryServiceClient(c.conn)
				evs, err := listAll(cmd.Context(), c, func(ctx context.Context, token string) ([]*tetherv1.Event, string, error) {
					req.PageToken = token
					resp, err := history.ListEvents(ctx, req)
					return resp.GetEvents(), resp.GetNextPageToken(), err
				})
				if err != nil {
					return c.apiError(name, err)
				}
				return printList(a, "events", evs, func(w io.Writer) {
					timeline(w, evs, false)
					archivedNote(w, evs)
				})
			})
		},
	}
	cmd.Flags().StringSliceVar(&types, "type", nil, "only these event types (repeat or comma-separate)")
	cmd.Flags().StringVar(&from, "from", "", "only events at or after this time (RFC 3339, or a duration ago such as 10m)")
	cmd.Flags().StringVar(&to, "to", "", "only events before this time (RFC 3339, or a duration ago)")
	return cmd
}

func (a *app) auditExplainCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "explain NAME",
		Short: "Why a resource is in its state: reason, evidence and the events that led there",
		Long:  "Explain a resource's state from its history: the reason and evidence of its last\ntransition and the chain of events that led there, with times relative to the\nlast one; NAME is " + auditNameFormats + ".",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := auditName(args[0])
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				if name, err = c.resolveGameServer(cmd.Context(), name); err != nil {
					return err
				}
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				x, err := tetherv1.NewHistoryServiceClient(c.conn).Explain(ctx, &tetherv1.ExplainRequest{Name: name})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.print(x, func(w io.Writer) { explainText(w, x, a.highlight()) })
			})
		},
	}
}

func (a *app) auditStateCommand() *cobra.Command {
	var at string
	var seq int64
	cmd := &cobra.Command{
		Use:   "state NAME --at TIME",
		Short: "A resource as it was at a time (or a stream sequence), folded from its history",
		Long:  "Show a resource as it was, folded from its events up to --at (RFC 3339, or a duration\nago such as 10m) or up to --sequence; NAME is " + auditNameFormats + ".",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := auditName(args[0])
			if err != nil {
				return err
			}
			req := &tetherv1.GetStateAtRequest{Name: name, Sequence: seq}
			if req.Time, err = a.parseTime("at", at); err != nil {
				return err
			}
			if req.Time == nil && seq <= 0 {
				return fmt.Errorf("give --at TIME or --sequence N")
			}
			return a.withClient(func(c *client) error {
				if req.Name, err = c.resolveGameServer(cmd.Context(), name); err != nil {
					return err
				}
				name = req.Name
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				st, err := tetherv1.NewHistoryServiceClient(c.conn).GetStateAt(ctx, req)
				if err != nil {
					return c.apiError(name, err)
				}
				if a.output == formatTable {
					if st.GetEventCount() == 0 {
						_, err := fmt.Fprintf(a.out, "%s did not exist yet at that point.\n", name)
						return err
					}
					raw, err := protojson.Marshal(st.GetState())
					if err != nil {
						return fmt.Errorf("encode state: %w", err)
					}
					y, err := yaml.JSONToYAML(raw)
					if err != nil {
						return fmt.Errorf("convert to YAML: %w", err)
					}
					archived := ""
					if segs := st.GetArchiveSegments(); len(segs) > 0 {
						archived = ", read from archive segment " + strings.Join(segs, ", ")
					}
					_, err = fmt.Fprintf(a.out, "%s after %d events (the last: sequence %d at %s%s):\n%s", name, st.GetEventCount(), st.GetSequence(),
						st.GetTime().AsTime().Format(time.RFC3339Nano), archived, y)
					return err
				}
				return a.print(st, nil)
			})
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "the time (RFC 3339, or a duration ago such as 10m)")
	cmd.Flags().Int64Var(&seq, "sequence", 0, "fold up to this stream sequence instead")
	return cmd
}

// parseTime reads a time flag: RFC 3339, or a duration before now (10m);
// empty is nil.
func (a *app) parseTime(flag, v string) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return timestamppb.New(t), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return timestamppb.New(a.now().Add(-d)), nil
	}
	return nil, fmt.Errorf("--%s %q: give an RFC 3339 time (2026-11-23T10:00:00Z) or a duration ago (10m)", flag, v)
}

// highlight reports whether the reason may be set off in bold: output to a
// terminal.
func (a *app) highlight() bool {
	f, ok := a.out.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// explainText writes an explanation for humans: the verdict with its reason
// set off, the evidence, and the chain as a timeline relative to its end.
func explainText(w io.Writer, x *tetherv1.Explanation, bold bool) {
	fmt.Fprintf(w, "%s is %s\n", x.GetName(), x.GetState())
	if reason := x.GetReason(); reason != "" {
		if bold {
			reason = "\x1b[1m" + reason + "\x1b[0m"
		}
		fmt.Fprintf(w, "Reason:    >> %s <<\n", reason)
	} else {
		// A fleet, or a server nothing has gone wrong with: no verdict to
		// set off.
		fmt.Fprintf(w, "Reason:    none\n")
	}
	for _, k := range slices.Sorted(maps.Keys(x.GetEvidence().GetFields())) {
		v, _ := protojson.Marshal(x.GetEvidence().GetFields()[k])
		fmt.Fprintf(w, "Evidence:  %s = %s\n", k, v)
	}
	fmt.Fprintf(w, "History:   %d events; the %d that led here:\n", x.GetHistoryLength(), len(x.GetEvents()))
	if segs := x.GetArchiveSegments(); len(segs) > 0 {
		fmt.Fprintf(w, "Archived:  read from archive segment %s\n", strings.Join(segs, ", "))
	}
	fmt.Fprintln(w)
	timeline(w, x.GetEvents(), true)
	if x.GetSummary() != "" {
		fmt.Fprintf(w, "\n%s\n", x.GetSummary())
	}
	if len(x.GetDecisions()) > 0 {
		fmt.Fprintf(w, "\nScaling decisions, newest first:\n")
		for _, d := range x.GetDecisions() {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
}

// timeline writes events one a line: offset (from the first event, or to
// the last with fromEnd), sequence, type, actor and the payload.
func timeline(w io.Writer, evs []*tetherv1.Event, fromEnd bool) {
	if len(evs) == 0 {
		fmt.Fprintln(w, "(no events)")
		return
	}
	ref := evs[0].GetTime().AsTime()
	if fromEnd {
		ref = evs[len(evs)-1].GetTime().AsTime()
	}
	row(w, "OFFSET", "SEQ", "TYPE", "ACTOR", "DATA")
	for _, e := range evs {
		d := e.GetTime().AsTime().Sub(ref)
		data, _ := protojson.Marshal(e.GetData()) // a Struct always encodes
		row(w, fmt.Sprintf("%+.3fs", d.Seconds()), fmt.Sprint(e.GetSequence()), e.GetType(), actorOf(e), clip(string(data), 100))
	}
}

// archivedNote says which of the events listed were read from the
// archive, and from which segments.
func archivedNote(w io.Writer, evs []*tetherv1.Event) {
	var segs []string
	n := 0
	for _, e := range evs {
		if s := e.GetArchiveSegment(); s != "" {
			n++
			if !slices.Contains(segs, s) {
				segs = append(segs, s)
			}
		}
	}
	if n > 0 {
		fmt.Fprintf(w, "\n%d of these %d events were read from archive segment %s\n", n, len(evs), strings.Join(segs, ", "))
	}
}

// actorOf is who an event was written for: the API's caller (a key's name,
// role and how it authenticated), else the component that wrote it;
// events from before actors were recorded show their producer.
func actorOf(e *tetherv1.Event) string {
	if a := e.GetActor(); a != "" {
		return a
	}
	return orDash(e.GetProducer())
}

// clip shortens s to n runes with an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
