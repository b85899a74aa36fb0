package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func (a *app) archiveCommand() *cobra.Command {
	cmd := group("archive", "Show and verify the archive of ended game servers, game sessions and fleets")
	cmd.AddCommand(a.archiveStatusCommand(), a.archiveVerifyCommand())
	return cmd
}

func (a *app) archiveStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the archive: segments by state, what they hold, the archiver's last pass",
		Long: `Shows the archive as its catalog records it: the segments by state (a
segment goes INTENT, STORED, PURGED, DONE; the next pass finishes one left
before DONE), the aggregates, events and bytes the stored segments hold, the
oldest and newest end of an archived aggregate, the retention and the time
of the archiver's last pass (and its error if it failed), and the segments
not DONE yet.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				st, err := tetherv1.NewArchiveServiceClient(c.conn).GetArchiveStatus(ctx, &tetherv1.GetArchiveStatusRequest{})
				if err != nil {
					return c.apiError("", err)
				}
				return a.print(st, func(w io.Writer) { a.archiveStatusText(w, st) })
			})
		},
	}
}

// archiveStatusText writes an archive status for humans.
func (a *app) archiveStatusText(w io.Writer, st *tetherv1.ArchiveStatus) {
	n := st.GetSegments()
	row(w, "Segments:", fmt.Sprintf("%d done, %d purged, %d stored, %d intent", n.GetDone(), n.GetPurged(), n.GetStored(), n.GetIntent()))
	row(w, "Archived:", fmt.Sprintf("%d aggregates, %d events, %s", st.GetAggregates(), st.GetEvents(), byteSize(st.GetBytes())))
	if st.GetOldestEndTime() != nil {
		row(w, "Ended:", fmt.Sprintf("%s to %s", st.GetOldestEndTime().AsTime().UTC().Format(time.RFC3339),
			st.GetNewestEndTime().AsTime().UTC().Format(time.RFC3339)))
	}
	if st.GetLastPassTime() != nil {
		result := "ok"
		if e := st.GetLastPassError(); e != "" {
			result = "failed: " + e
		}
		row(w, "Last pass:", fmt.Sprintf("%s (%s ago), %s", st.GetLastPassTime().AsTime().UTC().Format(time.RFC3339),
			age(a.now(), st.GetLastPassTime()), result))
		row(w, "Retention:", st.GetRetention().AsDuration().String())
	} else {
		row(w, "Last pass:", "none recorded (the leading controller archives with --archive-dir)")
	}
	if st.GetSegmentsReadable() {
		row(w, "Reads:", "this API server reads the segments")
	} else {
		row(w, "Reads:", "this API server does not read the segments (tether apiserver --archive-dir)")
	}
	if u := st.GetUnfinishedSegments(); len(u) > 0 {
		row(w, "Unfinished:", "")
		row(w, "  SEGMENT", "STATE", "AGGREGATES", "SINCE")
		for _, s := range u {
			row(w, "  "+s.GetName(), s.GetState().String(), strconv.Itoa(int(s.GetAggregates())), age(a.now(), s.GetUpdateTime()))
		}
	}
}

// byteSize renders a size in bytes with a binary unit.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func (a *app) archiveVerifyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "verify [SEGMENT]",
		Short: "Read every archived segment (or one) back and check it against the catalog",
		Long: `Has the API server read every segment the archive catalog records as stored
(or only SEGMENT) back from the segment store and check it: every block, its
SHA-256 against the one recorded, its size and event count, and its index
against the catalog's aggregates and sequences. Prints one line per segment,
and exits 1 if any fails, naming it.

It reads every byte of the archive, so it is not bounded by --timeout.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &tetherv1.VerifyArchiveRequest{}
			if len(args) == 1 {
				req.Segment = args[0]
			}
			return a.withClient(func(c *client) error {
				resp, err := tetherv1.NewArchiveServiceClient(c.conn).VerifyArchive(cmd.Context(), req)
				if err != nil {
					return c.apiError(req.GetSegment(), err)
				}
				if err := a.print(resp, func(w io.Writer) {
					row(w, "SEGMENT", "STATE", "AGGREGATES", "EVENTS", "BYTES", "RESULT")
					for _, v := range resp.GetSegments() {
						s := v.GetSegment()
						result := "ok"
						if !v.GetOk() {
							result = "FAILED: " + strings.Join(v.GetProblems(), "; ")
						}
						row(w, s.GetName(), s.GetState().String(), strconv.Itoa(int(s.GetAggregates())), strconv.FormatInt(s.GetEvents(), 10),
							strconv.FormatInt(s.GetBytes(), 10), result)
					}
					fmt.Fprintf(w, "verified %d segments: %d failed\n", len(resp.GetSegments()), resp.GetFailed())
				}); err != nil {
					return err
				}
				if resp.GetFailed() > 0 {
					var failed []string
					for _, v := range resp.GetSegments() {
						if !v.GetOk() {
							failed = append(failed, v.GetSegment().GetName())
						}
					}
					return fmt.Errorf("%d of %d archive segments failed verification: %s", resp.GetFailed(), len(resp.GetSegments()), strings.Join(failed, ", "))
				}
				return nil
			})
		},
	}
}
