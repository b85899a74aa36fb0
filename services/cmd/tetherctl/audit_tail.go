package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// watchAfterHeader is the response header in which the API says after
// which sequence a watch starts (apiserver.WatchAfterSequenceHeader).
const watchAfterHeader = "tether-after-sequence"

// Reconnect backoff of tail and export.
const (
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// The columns of a tail line, in runes: a line is written as its event
// comes, so each cell is cut (with an ellipsis) or padded to its column's
// width, and the columns stay aligned whatever an actor's or a name's
// length. tailDataWidth bounds the payload, the last column.
const (
	tailTypeWidth  = 24
	tailNameWidth  = 28
	tailActorWidth = 32
	tailDataWidth  = 100
)

// cell is s cut or padded to n runes.
func cell(s string, n int) string {
	s = clip(s, n)
	return s + strings.Repeat(" ", max(n-utf8.RuneCountInString(s), 0))
}

// auditStreamCommands are the audit commands that stream events.
func (a *app) auditStreamCommands() []*cobra.Command {
	return []*cobra.Command{a.auditTailCommand(), a.auditExportCommand()}
}

func (a *app) auditTailCommand() *cobra.Command {
	var (
		fleet, host string
		types       []string
		after       int64
	)
	cmd := &cobra.Command{
		Use:   "tail [--fleet NAME] [--host NAME] [--type TYPE]... [--after SEQUENCE]",
		Short: "Print events as they are stored, until interrupted",
		Long: `Print one line per event as it is stored, until interrupted (Ctrl-C): time,
sequence, type, resource, actor and the start of its data. Without --after
it starts with the events stored from now on; --after SEQUENCE starts with
the event after that one. --fleet keeps the fleet's events and those of its
game servers, game sessions and player sessions; --host those written by the
host's agent or about the host; --type (repeatable) those types. With -o json
each event is one JSON object per line; with -o yaml one YAML document.

When the stream breaks (API server restart, load balancer, a client too slow
for the server) tail reports it on stderr and resumes after the last
sequence it printed: no event is lost or printed twice.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if after < 0 {
				return fmt.Errorf("--after must not be negative, not %d", after)
			}
			req := &tetherv1.WatchEventsRequest{AfterSequence: after, Types: types}
			if fleet != "" {
				req.Fleet = fleetName(fleet)
			}
			if host != "" {
				req.Host = hostName(host)
			}
			return a.withClient(func(c *client) error {
				return a.streamEvents(cmd.Context(), c, watchOpener(c), req, a.printTailEvent, cmd.ErrOrStderr())
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&fleet, "fleet", "", "only events of this fleet, its game servers, game sessions and player sessions")
	f.StringVar(&host, "host", "", "only events written by this host's agent or about the host")
	f.StringArrayVar(&types, "type", nil, "only events of this type, e.g. GameServerUnhealthy (repeatable)")
	f.Int64Var(&after, "after", 0, "start after this event sequence (default: from now)")
	return cmd
}

// eventStream is what tail and export use of a WatchEvents stream.
type eventStream interface {
	Header() (map[string][]string, error)
	Recv() (*tetherv1.Event, error)
}

// openWatch starts a WatchEvents stream that lives as long as ctx.
type openWatch func(ctx context.Context, req *tetherv1.WatchEventsRequest) (eventStream, error)

// watchOpener opens watches on the client's connection.
func watchOpener(c *client) openWatch {
	history := tetherv1.NewHistoryServiceClient(c.conn)
	return func(ctx context.Context, req *tetherv1.WatchEventsRequest) (eventStream, error) {
		s, err := history.WatchEvents(ctx, req)
		if err != nil {
			return nil, err
		}
		return grpcEventStream{s}, nil
	}
}

// grpcEventStream adapts a generated client stream to eventStream.
type grpcEventStream struct {
	s grpc.ServerStreamingClient[tetherv1.Event]
}

func (g grpcEventStream) Header() (map[string][]string, error) { return g.s.Header() }
func (g grpcEventStream) Recv() (*tetherv1.Event, error)       { return g.s.Recv() }

// streamEvents runs a watch and prints its events until ctx ends or, for a
// bounded watch (end_time set), until the server ends it. When the stream
// breaks it reports why on errOut and opens a new one after the last
// sequence printed, with a backoff; errors that a new stream cannot fix
// (a bad request) are returned.
func (a *app) streamEvents(ctx context.Context, c *client, open openWatch, req *tetherv1.WatchEventsRequest,
	print func(*tetherv1.Event) error, errOut io.Writer) error {
	backoff := watchRetryMin
	lastWarning := ""
	for {
		err := a.watchOnce(ctx, open, req, print, func() {
			backoff = watchRetryMin
			if lastWarning != "" {
				fmt.Fprintln(errOut, "watch resumed")
				lastWarning = ""
			}
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, io.EOF) && req.GetEndTime() != nil:
			return nil // a bounded watch sent everything
		case err != nil && !errors.Is(err, io.EOF) && !resumable(err):
			return c.apiError("", err)
		}
		msg := "the server ended the stream"
		if err != nil && !errors.Is(err, io.EOF) {
			msg = c.apiError("", err).Error()
		}
		if msg != lastWarning {
			fmt.Fprintf(errOut, "warning: %s; resuming after sequence %d\n", msg, resumePoint(req))
			lastWarning = msg
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, watchRetryMax)
	}
}

// watchOnce runs one stream until it ends, printing its events and moving
// req's start past each, so that a new stream resumes after the last one.
// progress is called when the stream delivers its header or an event.
func (a *app) watchOnce(ctx context.Context, open openWatch, req *tetherv1.WatchEventsRequest,
	print func(*tetherv1.Event) error, progress func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := open(ctx, req)
	if err != nil {
		return err
	}
	md, err := s.Header()
	if err != nil {
		return err
	}
	if v := md[watchAfterHeader]; len(v) == 1 && req.GetAfterSequence() == 0 && req.GetStartTime() == nil {
		// Started "from now": resume from that point, not from a later now.
		seq, err := strconv.ParseInt(v[0], 10, 64)
		if err == nil && seq > 0 {
			req.AfterSequence = seq
		} else if err == nil {
			req.StartTime = timestamppb.New(time.Unix(0, 0)) // an empty stream: from its first event
		}
	}
	for {
		ev, err := s.Recv()
		if err != nil {
			return err
		}
		progress()
		if ev.GetSequence() <= req.GetAfterSequence() {
			continue // never print an event twice, whatever the server does
		}
		if err := print(ev); err != nil {
			return err
		}
		req.AfterSequence, req.StartTime = ev.GetSequence(), nil
	}
}

// resumePoint describes where a resumed watch starts, for messages.
func resumePoint(req *tetherv1.WatchEventsRequest) int64 { return req.GetAfterSequence() }

// resumable reports stream errors that a new stream from the last sequence
// can fix: the server or the path to it went away, or the client fell
// behind. Errors of the request itself are not.
func resumable(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted, codes.Canceled, codes.DeadlineExceeded:
		return true
	case codes.ResourceExhausted:
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == "WATCH_FELL_BEHIND" {
				return true
			}
		}
	}
	return false
}

// printTailEvent writes one event as a line, a JSON line or a YAML document.
func (a *app) printTailEvent(ev *tetherv1.Event) error {
	var err error
	switch a.output {
	case formatTable:
		_, err = fmt.Fprintf(a.out, "%s %6d %s %s %s %s\n", ev.GetTime().AsTime().Local().Format("15:04:05.000"),
			ev.GetSequence(), cell(ev.GetType(), tailTypeWidth), cell(shortName(ev.GetAggregate()), tailNameWidth),
			cell(actorOf(ev), tailActorWidth), tailData(ev))
	case formatYAML:
		var doc []byte
		if doc, err = eventJSON(ev); err != nil {
			return err
		}
		if doc, err = yaml.JSONToYAML(doc); err != nil {
			return fmt.Errorf("convert to YAML: %w", err)
		}
		_, err = fmt.Fprintf(a.out, "---\n%s", doc)
	default:
		return printEventLine(a.out, ev)
	}
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// printEventLine writes an event as one compact JSON object and a newline.
func printEventLine(w io.Writer, ev *tetherv1.Event) error {
	doc, err := eventJSON(ev)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "%s\n", doc); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// eventJSON renders an event's REST shape compactly, on one line.
func eventJSON(ev *tetherv1.Event) ([]byte, error) {
	raw, err := protojson.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode event %d: %w", ev.GetSequence(), err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("encode event %d: %w", ev.GetSequence(), err)
	}
	return buf.Bytes(), nil
}

// tailData renders the start of an event's payload as compact JSON, or "-".
func tailData(ev *tetherv1.Event) string {
	if len(ev.GetData().GetFields()) == 0 {
		return "-"
	}
	raw, err := protojson.Marshal(ev.GetData())
	if err != nil {
		return "?"
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "?"
	}
	s := []rune(buf.String())
	if len(s) > tailDataWidth {
		return string(s[:tailDataWidth-1]) + "…"
	}
	return string(s)
}
