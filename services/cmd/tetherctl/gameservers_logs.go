package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// gameServersLogsCommand is `gameservers logs`: a server's output from
// the log files its host keeps (StreamGameServerLogs).
func (a *app) gameServersLogsCommand() *cobra.Command {
	var (
		follow, stdout, stderr, timestamps bool
		tail                               int32
		since                              string
	)
	cmd := &cobra.Command{
		Use:   "logs NAME [-f] [--stdout|--stderr] [--tail N] [--since TIME]",
		Short: "Print a game server's output (stdout and stderr), from its host; -f follows it",
		Long: "Print a game server's output, its stdout and stderr interleaved as its host's agent read them; NAME is " + gameServerFormats + `.
The lines come from the log files the server's host keeps: they are there
after the server has ended too, until the host's log retention removes them
(tether agent --log-retention, 14 days by default). With -f the command
goes on printing new lines until interrupted or until the server's output
has ended. -o json prints each line as a JSON object (time, stream, text).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := gameServerName(args[0])
			if err != nil {
				return err
			}
			if a.output == formatYAML {
				return errors.New("logs print text, or -o json")
			}
			req := &tetherv1.StreamGameServerLogsRequest{Name: name, Follow: follow, TailLines: tail}
			switch {
			case stdout && stderr:
				return errors.New("give --stdout or --stderr, not both (neither: both)")
			case stdout:
				req.Stream = tetherv1.LogEntry_STDOUT
			case stderr:
				req.Stream = tetherv1.LogEntry_STDERR
			}
			if tail < 0 {
				return fmt.Errorf("--tail must not be negative, not %d", tail)
			}
			if req.SinceTime, err = a.parseTime("since", since); err != nil {
				return err
			}
			p := &logPrinter{a: a, timestamps: timestamps}
			return a.withClient(func(c *client) error {
				if name, err = c.resolveGameServer(cmd.Context(), name); err != nil {
					return err
				}
				req.Name = name
				stream, err := c.gameServers.StreamGameServerLogs(cmd.Context(), req)
				if err != nil {
					return logsError(c, name, err)
				}
				for {
					chunk, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						return nil
					}
					if err != nil {
						if cmd.Context().Err() != nil {
							return nil // interrupted: the end of a follow
						}
						return logsError(c, name, err)
					}
					for _, e := range chunk.GetEntries() {
						if err := p.print(e); err != nil {
							return err
						}
					}
				}
			})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "go on printing new lines as the server writes them")
	f.BoolVar(&stdout, "stdout", false, "only its standard output")
	f.BoolVar(&stderr, "stderr", false, "only its standard error")
	f.Int32Var(&tail, "tail", 0, "only the last N lines (0: every line kept)")
	f.StringVar(&since, "since", "", "only lines written since this time (RFC 3339, or a duration ago such as 10m)")
	f.BoolVar(&timestamps, "timestamps", false, "start each line with the time its host read it")
	return cmd
}

// logsError is a logs call's error for humans: one that says the host
// keeps no logs of a server that exists keeps the API's words, not "not
// found".
func logsError(c *client, name string, err error) error {
	var ce *callError
	if e := c.apiError(name, err); !errors.As(e, &ce) || ce.Reason() != "NO_LOGS" {
		return e
	}
	return c.apiError("", err)
}

// logPrinter writes a server's output as it comes.
type logPrinter struct {
	a          *app
	timestamps bool
	midLine    bool // the last text written was a part of a line
}

// print writes one line of a server's output: its text (a part of a
// longer line without a newline), after its time with --timestamps; or
// with -o json the entry as a JSON line.
func (p *logPrinter) print(e *tetherv1.LogEntry) error {
	out := p.a.out
	if p.a.output == formatJSON {
		raw, err := protojson.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode a log entry: %w", err)
		}
		_, err = fmt.Fprintf(out, "%s\n", raw)
		return err
	}
	if p.timestamps && !p.midLine {
		if _, err := fmt.Fprint(out, e.GetTime().AsTime().Format(time.RFC3339Nano), " "); err != nil {
			return err
		}
	}
	p.midLine = e.GetPartial()
	end := "\n"
	if e.GetPartial() {
		end = ""
	}
	_, err := fmt.Fprint(out, e.GetText(), end)
	return err
}
