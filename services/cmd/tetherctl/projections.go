package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func (a *app) projectionsCommand() *cobra.Command {
	cmd := group("projections", "Rebuild and check the views, list and retry dead letters", "projection")
	cmd.AddCommand(a.rebuildCommand(), a.checkCommand(), a.deadLettersCommand())
	return cmd
}

func (a *app) rebuildCommand() *cobra.Command {
	var batch int32
	var quiet bool
	cmd := &cobra.Command{
		Use:   "rebuild",
		Short: "Replay the event stream from sequence 1 into fresh views and swap them in, without downtime",
		Long: `Replays the event stream from sequence 1 into fresh tables, catches up with
what is appended meanwhile, then swaps them in for the live views in one
transaction while the projector is paused at a batch boundary. The live
views keep serving throughout. A poison event stops the rebuild and leaves
the live views as they were; fix it first (tetherctl projections deadletters).

The rebuild is not bounded by --timeout, and goes on to its swap on the
server if this command is interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(func(c *client) error {
				stream, err := tetherv1.NewProjectionServiceClient(c.conn).RebuildProjections(cmd.Context(),
					&tetherv1.RebuildProjectionsRequest{BatchSize: batch})
				if err != nil {
					return c.apiError("", err)
				}
				// The bar is drawn once the target is known: a bar of unknown
				// length animates from a goroutine of its own, which would
				// go on writing after an error is printed.
				var bar *progressbar.ProgressBar
				showBar := a.output == formatTable && !quiet && isTerminal(cmd.ErrOrStderr())
				var last *tetherv1.RebuildProgress
				for {
					p, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						if bar != nil {
							_ = bar.Exit() // leaving the bar where it stopped; its error changes nothing
							fmt.Fprintln(cmd.ErrOrStderr())
						}
						return c.apiError("", err)
					}
					last = p
					if bar == nil && showBar && p.GetTarget() > 0 {
						bar = newRebuildBar(cmd.ErrOrStderr(), p.GetTarget())
					}
					if bar != nil {
						updateRebuildBar(bar, p)
					}
				}
				if bar != nil {
					_ = bar.Finish() // the result is printed below either way
					fmt.Fprintln(cmd.ErrOrStderr())
				}
				if last == nil {
					return errors.New("the rebuild ended without reporting progress")
				}
				return a.print(last, func(w io.Writer) {
					row(w, "PHASE", "CHECKPOINT", "EVENTS/S", "ELAPSED")
					row(w, phaseName(last.GetPhase()), strconv.FormatInt(last.GetApplied(), 10),
						strconv.FormatFloat(last.GetEventsPerSecond(), 'f', 0, 64),
						last.GetElapsed().AsDuration().Round(time.Millisecond).String())
				})
			})
		},
	}
	cmd.Flags().Int32Var(&batch, "batch-size", 0, "events per batch (default: the server's, 4000)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	return cmd
}

// isTerminal reports whether w is a terminal: a progress bar redraws its
// line, which in a file, a pipe or a CI log is only noise.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newRebuildBar draws a rebuild's progress: applied of target events, the
// events/s and the time left.
func newRebuildBar(w io.Writer, target int64) *progressbar.ProgressBar {
	return progressbar.NewOptions64(target,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("PREPARE"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("events"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionFullWidth(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true),
	)
}

func updateRebuildBar(bar *progressbar.ProgressBar, p *tetherv1.RebuildProgress) {
	if t := p.GetTarget(); t > 0 && t != bar.GetMax64() {
		bar.ChangeMax64(t)
	}
	desc := fmt.Sprintf("%-8s %6.0f events/s", phaseName(p.GetPhase()), p.GetEventsPerSecond())
	if eta := p.GetEta().AsDuration(); eta > 0 {
		desc += fmt.Sprintf(" ETA %s", eta.Round(time.Second))
	}
	bar.Describe(desc)
	_ = bar.Set64(p.GetApplied()) // drawing only
}

func phaseName(p tetherv1.RebuildProgress_Phase) string {
	return strings.TrimPrefix(p.String(), "PHASE_")
}

func (a *app) checkCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Replay the event stream into scratch tables and compare them row by row with the live views",
		Long: `Replays the event stream into scratch tables with the server's current code
and compares them, every column and the snapshot bytes, with the live views
at the same checkpoint. Differences are listed as MISSING (the replay has the
row, the views do not), EXTRA (the views have a row the replay does not) and
DIFFERENT (with the differing columns). Exits 1 if there is any.

Not bounded by --timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(func(c *client) error {
				rep, err := tetherv1.NewProjectionServiceClient(c.conn).CheckProjections(cmd.Context(), &tetherv1.CheckProjectionsRequest{})
				if err != nil {
					return c.apiError("", err)
				}
				if err := a.print(rep, func(w io.Writer) {
					fmt.Fprintf(w, "checked %d rows at sequence %d in %s: %d differences\n", rep.GetRows(), rep.GetSequence(),
						rep.GetDuration().AsDuration().Round(time.Millisecond), len(rep.GetDifferences()))
					if len(rep.GetDifferences()) == 0 {
						return
					}
					row(w, "TABLE", "KEY", "KIND", "COLUMNS")
					for _, d := range rep.GetDifferences() {
						row(w, d.GetTable(), d.GetKey(), strings.TrimPrefix(d.GetKind().String(), "KIND_"), orDash(strings.Join(d.GetColumns(), ",")))
					}
				}); err != nil {
					return err
				}
				if n := len(rep.GetDifferences()); n > 0 {
					more := ""
					if rep.GetTruncated() {
						more = " (and more)"
					}
					return fmt.Errorf("the views differ from a replay in %d rows%s", n, more)
				}
				return nil
			})
		},
	}
}

func (a *app) deadLettersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "deadletters",
		Aliases: []string{"dead-letters", "dl"},
		Short:   "List the events the projector could not apply",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(func(c *client) error {
				pc := tetherv1.NewProjectionServiceClient(c.conn)
				var all []*tetherv1.DeadLetter
				token := ""
				for {
					ctx, cancel := c.call(cmd.Context())
					resp, err := pc.ListDeadLetters(ctx, &tetherv1.ListDeadLettersRequest{PageSize: pageSize, PageToken: token})
					cancel()
					if err != nil {
						return c.apiError("", err)
					}
					all = append(all, resp.GetDeadLetters()...)
					if token = resp.GetNextPageToken(); token == "" {
						break
					}
				}
				return printList(a, "deadLetters", all, func(w io.Writer) {
					row(w, "SEQUENCE", "SUBJECT", "TYPE", "AGE", "ERROR")
					now := a.now()
					for _, d := range all {
						row(w, strconv.FormatInt(d.GetSequence(), 10), d.GetSubject(), orDash(d.GetType()), age(now, d.GetCreateTime()), d.GetError())
					}
				})
			})
		},
	}
	retry := &cobra.Command{
		Use:   "retry SEQUENCE",
		Short: "Re-apply a dead letter with the server's current code (after a fix)",
		Long: `Reads the event at SEQUENCE from the stream again and applies it with the
server's current code: its resource is folded again from its whole history,
the event in its place, so the views stay what a replay would give. On
success the dead letter (and any other of that resource that now applies)
is removed; if it still fails, nothing changes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || seq <= 0 {
				return fmt.Errorf("SEQUENCE must be a positive stream sequence, not %q", args[0])
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				resp, err := tetherv1.NewProjectionServiceClient(c.conn).RetryDeadLetter(ctx, &tetherv1.RetryDeadLetterRequest{Sequence: seq})
				if err != nil {
					return c.apiError(fmt.Sprintf("dead letter %d", seq), err)
				}
				return a.print(resp, func(w io.Writer) {
					resolved := make([]string, len(resp.GetResolved()))
					for i, s := range resp.GetResolved() {
						resolved[i] = strconv.FormatInt(s, 10)
					}
					fmt.Fprintf(w, "re-applied %d to %s (now at sequence %d); resolved dead letters: %s\n",
						seq, resp.GetAggregate(), resp.GetSequence(), strings.Join(resolved, ", "))
				})
			})
		},
	}
	cmd.AddCommand(retry)
	return cmd
}
