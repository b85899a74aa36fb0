package main

import (
	"io"
	"strconv"

	"github.com/spf13/cobra"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func (a *app) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the views' checkpoint, the stream's last sequence, the projection lag and the dead letters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				st, err := tetherv1.NewProjectionServiceClient(c.conn).GetProjectionStatus(ctx, &tetherv1.GetProjectionStatusRequest{})
				if err != nil {
					return c.apiError("", err)
				}
				return a.print(st, func(w io.Writer) {
					updated := "-"
					if st.GetCheckpointTime() != nil {
						updated = age(a.now(), st.GetCheckpointTime()) + " ago"
					}
					row(w, "CHECKPOINT", "STREAM", "LAG", "DEAD LETTERS", "UPDATED")
					row(w, strconv.FormatInt(st.GetCheckpoint(), 10), strconv.FormatInt(st.GetStreamLastSequence(), 10),
						strconv.FormatInt(st.GetLag(), 10), strconv.FormatInt(st.GetDeadLetters(), 10), updated)
				})
			})
		},
	}
}
