package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func (a *app) auditExportCommand() *cobra.Command {
	var from, to, fleet string
	cmd := &cobra.Command{
		Use:   "export --from TIME [--to TIME] [--fleet NAME]",
		Short: "Print the events stored in a time range as JSON lines, for auditors' tools",
		Long: `Print every event stored from --from up to (not including) --to, oldest
first, one JSON object per line in the API's event shape (sequence, id, type,
aggregate, time, producer, actor, request and correlation ids, data), whatever -o
says. TIME is an RFC 3339 time (2026-11-23T10:00:00Z) or a duration ago
(90m); --to defaults to now. The range is by the time each event was stored,
which orders events like their sequences; an event's "time" is when its
producer saw it happen and may be a little earlier. --fleet keeps the fleet's
events and those of its game servers, game sessions and player sessions.
Events of ended resources that were archived are read from the archive, in
sequence order with the others, each with its "archiveSegment".

A broken stream is resumed after the last event printed: the output has no
gap and no duplicate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return fmt.Errorf("--from is required")
			}
			start, err := a.parseTime("from", from)
			if err != nil {
				return err
			}
			end := timestamppb.New(a.now())
			if to != "" {
				if end, err = a.parseTime("to", to); err != nil {
					return err
				}
			}
			if !start.AsTime().Before(end.AsTime()) {
				return fmt.Errorf("--from %s is not before --to %s", start.AsTime().Format(time.RFC3339Nano), end.AsTime().Format(time.RFC3339Nano))
			}
			req := &tetherv1.WatchEventsRequest{StartTime: start, EndTime: end}
			if fleet != "" {
				req.Fleet = fleetName(fleet)
			}
			return a.withClient(func(c *client) error {
				return a.streamEvents(cmd.Context(), c, watchOpener(c), req,
					func(ev *tetherv1.Event) error { return printEventLine(a.out, ev) }, cmd.ErrOrStderr())
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "first time of the range: RFC 3339, or a duration ago such as 24h (required)")
	f.StringVar(&to, "to", "", "end of the range, excluded: RFC 3339, or a duration ago (default now)")
	f.StringVar(&fleet, "fleet", "", "only events of this fleet, its game servers, game sessions and player sessions")
	return cmd
}
