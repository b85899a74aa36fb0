package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func (a *app) fleetsCommand() *cobra.Command {
	cmd := group("fleets", "Create, list, show, update, scale, roll out and delete fleets", "fleet")
	cmd.AddCommand(a.fleetsCreateCommand(), a.fleetsListCommand(), a.fleetsGetCommand(),
		a.fleetsUpdateCommand(), a.fleetsScaleCommand(), a.fleetsRolloutCommand(), a.fleetsDeleteCommand())
	return cmd
}

func (a *app) fleetsUpdateCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "update NAME -f FILE",
		Short: "Change the fields a YAML or JSON file gives (a new template or health starts a rollout)",
		Long: `Change a fleet's fields that the file gives, in the shape of "fleets create";
the others stay. A change of the template or the health contract makes a new
revision, and the fleet's servers roll out to it ("fleets rollout status").`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := fleetName(args[0])
			ff, err := readFleetFile(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if len(ff.fields) == 0 {
				return errors.New("the file gives no field to change")
			}
			ff.fleet.Name = name
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				f, err := c.fleets.UpdateFleet(ctx, &tetherv1.UpdateFleetRequest{
					Fleet: ff.fleet, UpdateMask: &fieldmaskpb.FieldMask{Paths: ff.fields}, RequestId: newRequestID(),
				})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.printFleet(f)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `fleet file, YAML or JSON ("-" for stdin)`)
	_ = cmd.MarkFlagRequired("file") // the flag exists
	return cmd
}

func (a *app) fleetsRolloutCommand() *cobra.Command {
	cmd := group("rollout", "Show, pause, resume or undo a fleet's rollout", "rollout")
	var minSeq int64
	status := &cobra.Command{
		Use:   "status NAME",
		Short: "Where the fleet's last rollout stands, and its servers per revision",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := fleetName(args[0])
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				f, err := c.fleets.GetFleet(ctx, &tetherv1.GetFleetRequest{Name: name, MinSequence: minSeq})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.print(f.GetStatus().GetRollout(), func(w io.Writer) { a.rolloutText(w, f) })
			})
		},
	}
	addMinSequence(status, &minSeq)
	action := func(use, short string, call func(context.Context, *client, string) (*tetherv1.Fleet, error)) *cobra.Command {
		return &cobra.Command{
			Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				name := fleetName(args[0])
				return a.withClient(func(c *client) error {
					ctx, cancel := c.call(cmd.Context())
					defer cancel()
					f, err := call(ctx, c, name)
					if err != nil {
						return c.apiError(name, err)
					}
					return a.print(f.GetStatus().GetRollout(), func(w io.Writer) { a.rolloutText(w, f) })
				})
			},
		}
	}
	cmd.AddCommand(status,
		action("pause", "Pause a progressing rollout: outdated servers stay", func(ctx context.Context, c *client, name string) (*tetherv1.Fleet, error) {
			return c.fleets.PauseRollout(ctx, &tetherv1.PauseRolloutRequest{Name: name, RequestId: newRequestID()})
		}),
		action("resume", "Resume a paused or halted rollout", func(ctx context.Context, c *client, name string) (*tetherv1.Fleet, error) {
			return c.fleets.ResumeRollout(ctx, &tetherv1.ResumeRolloutRequest{Name: name, RequestId: newRequestID()})
		}),
		action("undo", "Go back to the previous revision and roll out to it", func(ctx context.Context, c *client, name string) (*tetherv1.Fleet, error) {
			return c.fleets.UndoRollout(ctx, &tetherv1.UndoRolloutRequest{Name: name, RequestId: newRequestID()})
		}))
	return cmd
}

// rolloutText writes a fleet's rollout for humans: its state and counts,
// then its servers per revision (when the answer has them).
func (a *app) rolloutText(w io.Writer, f *tetherv1.Fleet) {
	r := f.GetStatus().GetRollout()
	if r == nil {
		fmt.Fprintf(w, "%s: revision %d, no rollout yet\n", shortName(f.GetName()), f.GetRevision())
		return
	}
	fmt.Fprintf(w, "%s: rollout to revision %d (from %d) %s, started %s ago: %s; %s\n", shortName(f.GetName()), r.GetRevision(),
		r.GetFromRevision(), r.GetState(), age(a.now(), r.GetStartTime()), r.GetReason(), r.GetStrategy())
	updated, ready, outdated, busy := r.GetUpdated(), r.GetUpdatedReady(), r.GetOutdated(), r.GetOutdatedBusy()
	if revs := f.GetStatus().GetRevisions(); len(revs) > 0 {
		// The counts of the table below, the servers as they are now, not
		// those of the controller's last record of the rollout (a pass
		// behind: "updated 0 (0 READY)" above a table with 1 READY).
		updated, ready, outdated, busy = 0, 0, 0, 0
		for _, c := range revs {
			if c.GetRevision() == r.GetRevision() {
				updated, ready = updated+c.GetReplicas(), ready+c.GetReadyReplicas()
			} else {
				outdated, busy = outdated+c.GetReplicas(), busy+c.GetAllocatedReplicas()
			}
		}
	}
	fmt.Fprintf(w, "  updated %d (%d READY), outdated %d (%d holding a match)\n", updated, ready, outdated, busy)
	if r.GetMessage() != "" {
		fmt.Fprintf(w, "  %s\n", r.GetMessage())
	}
	if revs := f.GetStatus().GetRevisions(); len(revs) > 0 {
		row(w, "REVISION", "SERVERS", "READY", "ALLOCATED")
		for _, c := range revs {
			row(w, strconv.FormatInt(c.GetRevision(), 10), strconv.Itoa(int(c.GetReplicas())), strconv.Itoa(int(c.GetReadyReplicas())), strconv.Itoa(int(c.GetAllocatedReplicas())))
		}
	}
}

func (a *app) fleetsCreateCommand() *cobra.Command {
	var file, id string
	cmd := &cobra.Command{
		Use:   "create -f FILE [--name ID]",
		Short: "Create a fleet from a YAML or JSON file",
		Long: `Create a fleet from a file in the shape POST /v1/fleets takes (examples
in deploy/examples), YAML or JSON; "-f -" reads stdin. The fleet id comes
from --name or from the file's name field ("arena" or "fleets/arena").
Unknown fields are refused; output-only fields (status, etag, sequence,
times) are ignored.

Example file:

  name: arena
  replicas: 3
  template:
    command: /usr/local/bin/mygame
    args: ["--port", "${TETHER_PORT_GAME}"]
    ports: [{name: game, protocol: UDP}]
  health: {periodSeconds: 5, failureThreshold: 3}
  scheduling: PACKED`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ff, err := readFleetFile(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if id != "" {
				ff.id = fleetID(id)
			}
			if ff.id == "" {
				return fmt.Errorf("the fleet needs an id: pass --name, or set name in %s", file)
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				f, err := c.fleets.CreateFleet(ctx, &tetherv1.CreateFleetRequest{
					FleetId: ff.id, Fleet: ff.fleet, RequestId: newRequestID(),
				})
				if err != nil {
					return c.apiError(fleetName(ff.id), err)
				}
				return a.printFleet(f)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `fleet file, YAML or JSON ("-" for stdin)`)
	cmd.Flags().StringVar(&id, "name", "", "fleet id, overriding the file's name field")
	_ = cmd.MarkFlagRequired("file") // Fails only for an undefined flag.
	return cmd
}

func (a *app) fleetsListCommand() *cobra.Command {
	var minSeq int64
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List fleets with their replica counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(func(c *client) error {
				fleets, err := listAll(cmd.Context(), c, func(ctx context.Context, token string) ([]*tetherv1.Fleet, string, error) {
					resp, err := c.fleets.ListFleets(ctx, &tetherv1.ListFleetsRequest{
						PageSize: pageSize, PageToken: token, MinSequence: minSeq,
					})
					return resp.GetFleets(), resp.GetNextPageToken(), err
				})
				if err != nil {
					return c.apiError("", err)
				}
				return printList(a, "fleets", fleets, func(w io.Writer) { a.fleetTable(w, fleets...) })
			})
		},
	}
	addMinSequence(cmd, &minSeq)
	return cmd
}

func (a *app) fleetsGetCommand() *cobra.Command {
	var minSeq int64
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a fleet (-o yaml for its whole spec)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := fleetName(args[0])
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				f, err := c.fleets.GetFleet(ctx, &tetherv1.GetFleetRequest{Name: name, MinSequence: minSeq})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.printFleet(f)
			})
		},
	}
	addMinSequence(cmd, &minSeq)
	return cmd
}

func (a *app) fleetsScaleCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "scale NAME REPLICAS",
		Short: "Set a fleet's replica count",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := fleetName(args[0])
			n, err := strconv.ParseInt(args[1], 10, 32)
			if err != nil {
				return fmt.Errorf("replicas %q is not a whole number: %w", args[1], err)
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				// No etag: the last writer wins, which is what scaling means.
				f, err := c.fleets.UpdateFleet(ctx, &tetherv1.UpdateFleetRequest{
					Fleet:      &tetherv1.Fleet{Name: name, Replicas: int32(n)},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"replicas"}},
					RequestId:  newRequestID(),
				})
				if err != nil {
					return c.apiError(name, err)
				}
				if err := a.printFleet(f); err != nil {
					return err
				}
				if a.output == formatTable {
					_, err = fmt.Fprintln(a.out, scaleNote(f))
				}
				return err
			})
		},
	}
}

// scaleNote says what a scale just asked for, beside the table, whose
// counts are the servers as they are (the change takes a pass of the
// controller): how many servers will start or stop.
func scaleNote(f *tetherv1.Fleet) string {
	name, want, live := shortName(f.GetName()), f.GetReplicas(), f.GetStatus().GetReplicas()
	switch {
	case live > want:
		return fmt.Sprintf("%s: scaling from %d to %d servers: %d above it stop, READY and starting ones first; an ALLOCATED or RESERVED one stays until its match ends",
			name, live, want, live-want)
	case live < want:
		return fmt.Sprintf("%s: scaling from %d to %d servers: %d will start", name, live, want, want-live)
	}
	return fmt.Sprintf("%s: %d servers, as asked", name, want)
}

func (a *app) fleetsDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a fleet; its game servers are shut down",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := fleetName(args[0])
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				f, err := c.fleets.DeleteFleet(ctx, &tetherv1.DeleteFleetRequest{Name: name, RequestId: newRequestID()})
				if err != nil {
					return c.apiError(name, err)
				}
				if a.output != formatTable {
					return a.print(f, nil)
				}
				if _, err := fmt.Fprintf(a.out, "%s deleted\n", f.GetName()); err != nil {
					return fmt.Errorf("write output: %w", err)
				}
				return nil
			})
		},
	}
}

func (a *app) printFleet(f *tetherv1.Fleet) error {
	return a.print(f, func(w io.Writer) { a.fleetTable(w, f) })
}

func (a *app) fleetTable(w io.Writer, fleets ...*tetherv1.Fleet) {
	row(w, "NAME", "REPLICAS", "READY", "ALLOCATED", "UNHEALTHY", "SCHEDULING", "AGE")
	now := a.now()
	for _, f := range fleets {
		s := f.GetStatus()
		scheduling := f.GetScheduling().String()
		if f.GetScheduling() == tetherv1.Fleet_SCHEDULING_UNSPECIFIED {
			scheduling = tetherv1.Fleet_PACKED.String() // the documented default
		}
		row(w, shortName(f.GetName()),
			strconv.Itoa(int(f.GetReplicas())),
			strconv.Itoa(int(s.GetReadyReplicas())), strconv.Itoa(int(s.GetAllocatedReplicas())),
			strconv.Itoa(int(s.GetUnhealthyReplicas())), scheduling, age(now, f.GetCreateTime()))
	}
	for _, f := range fleets {
		if d := f.GetStatus().GetLastScaling(); d != "" {
			fmt.Fprintf(w, "%s: autoscaled %s\n", shortName(f.GetName()), d)
		}
		for _, c := range f.GetStatus().GetConditions() {
			if c.GetStatus() == "True" {
				fmt.Fprintln(w, conditionLine(now, shortName(f.GetName()), c))
			}
		}
	}
}

// conditionLine says in one line, under the table, that a fleet's
// condition holds, e.g. "arena: START_FAILING for 2m, 7 in a row,
// PROCESS_START_FAILED, next start in 40s: fork/exec …".
func conditionLine(now time.Time, fleet string, c *tetherv1.FleetCondition) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s for %s", fleet, c.GetType(), age(now, c.GetLastTransitionTime()))
	if n := c.GetConsecutiveFailures(); n > 0 {
		fmt.Fprintf(&b, ", %d in a row", n)
	}
	if c.GetReason() != "" {
		b.WriteString(", " + c.GetReason())
	}
	if u := c.GetBackoffUntil(); u != nil && u.AsTime().After(now) {
		fmt.Fprintf(&b, ", next start in %s", u.AsTime().Sub(now).Round(time.Second))
	}
	if c.GetMessage() != "" {
		b.WriteString(": " + c.GetMessage())
	}
	return b.String()
}
