package apiserver

import (
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/tetherhq/tether/events"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/services/nats/hostlogs"
)

// Error reasons of StreamGameServerLogs.
const (
	// ReasonAgentUnavailable: the agent of the host that keeps the logs
	// does not answer (UNAVAILABLE).
	ReasonAgentUnavailable = "AGENT_UNAVAILABLE"
	// ReasonNoLogs: the host keeps no log of the server (NOT_FOUND): it
	// never started there, or retention has removed its files.
	ReasonNoLogs = "NO_LOGS"
)

// Bounds of a log stream.
const (
	// logChunkBytes is what one read asks a host for: a message of the
	// stream holds about this much.
	logChunkBytes = 256 << 10
	// logFollowWait is how long a follow's read waits on the host for new
	// lines before it asks again.
	logFollowWait = 10 * time.Second
	// maxTailLines bounds tail_lines.
	maxTailLines = 100_000
	// agentBusyRetry is how long a read waits before asking a host that
	// serves as many reads as it may again.
	agentBusyRetry = 200 * time.Millisecond
)

// StreamGameServerLogs streams a game server's output from its host's
// agent, which keeps its log files (services/agent, "Game server logs"):
// the server's host comes from the views, and each chunk is one request
// on the host's logs subject (services/nats/hostlogs), from the cursor
// the last one gave. The server may have ended long ago: its files stay
// until the host's retention removes them.
func (g *gameServerService) StreamGameServerLogs(req *tetherv1.StreamGameServerLogsRequest, stream grpc.ServerStreamingServer[tetherv1.StreamGameServerLogsResponse]) error {
	ctx := stream.Context()
	if _, _, err := events.ParseGameServerName(req.GetName()); err != nil {
		return invalidField("name", err.Error())
	}
	var agentStream agentv1.LogLine_Stream
	switch req.GetStream() {
	case tetherv1.LogEntry_STREAM_UNSPECIFIED:
	case tetherv1.LogEntry_STDOUT:
		agentStream = agentv1.LogLine_STDOUT
	case tetherv1.LogEntry_STDERR:
		agentStream = agentv1.LogLine_STDERR
	default:
		return invalidField("stream", "STDOUT or STDERR, or unset for both")
	}
	if req.GetTailLines() < 0 || req.GetTailLines() > maxTailLines {
		return invalidField("tail_lines", "from 0 (every line kept) to 100000")
	}
	if t := req.GetSinceTime(); t != nil && !t.IsValid() {
		return invalidField("since_time", "not a valid time")
	}
	js := g.s.opts.JetStream
	if js == nil {
		return &apiError{code: codes.Unimplemented, reason: "UNIMPLEMENTED", msg: "this API server has no NATS connection to read game server logs through"}
	}
	row, err := g.s.opts.Views.GameServer(ctx, req.GetName())
	if err != nil {
		return err
	}
	host := row.State.GetHost()
	hostID, err := events.ParseHostName(host)
	if err != nil {
		return &apiError{code: codes.NotFound, reason: ReasonNoLogs, msg: req.GetName() + " has no host, so no logs"}
	}
	client := hostlogs.NewClient(js.Conn())
	read := &agentv1.LogsRequest{
		GameServer: req.GetName(), Stream: agentStream, TailLines: req.GetTailLines(), SinceTime: req.GetSinceTime(),
		MaxBytes: logChunkBytes,
	}
	for {
		reply, err := client.Read(ctx, hostID, read)
		switch {
		case errors.Is(err, hostlogs.ErrAgentUnavailable):
			return &apiError{code: codes.Unavailable, reason: ReasonAgentUnavailable,
				msg: "the logs of " + req.GetName() + " are kept on " + host + ", whose agent does not answer: " +
					strings.TrimPrefix(err.Error(), hostlogs.ErrAgentUnavailable.Error()+": ") + "; retry once it runs"}
		case err != nil:
			return err
		}
		switch reply.GetError() {
		case agentv1.LogsReply_ERROR_UNSPECIFIED:
		case agentv1.LogsReply_NOT_FOUND:
			return &apiError{code: codes.NotFound, reason: ReasonNoLogs, msg: reply.GetErrorMessage()}
		case agentv1.LogsReply_BUSY:
			t := time.NewTimer(agentBusyRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			continue
		case agentv1.LogsReply_BAD_REQUEST:
			return &apiError{code: codes.InvalidArgument, reason: ReasonInvalidArgument, msg: reply.GetErrorMessage()}
		default:
			return &apiError{code: codes.Unavailable, reason: ReasonUnavailable, msg: host + " could not read the logs of " + req.GetName() + ": " + reply.GetErrorMessage()}
		}
		if lines := reply.GetLines(); len(lines) > 0 {
			if err := stream.Send(&tetherv1.StreamGameServerLogsResponse{Entries: logEntries(lines)}); err != nil {
				return err
			}
		}
		if reply.GetCaughtUp() && (!req.GetFollow() || reply.GetEnded()) {
			return nil
		}
		read = &agentv1.LogsRequest{GameServer: req.GetName(), Stream: agentStream, SinceTime: req.GetSinceTime(),
			MaxBytes: logChunkBytes, Cursor: reply.GetNext()}
		if req.GetFollow() {
			read.WaitMillis = int32(logFollowWait / time.Millisecond)
		}
	}
}

// logEntries converts an agent's lines to the API's: text that is not
// UTF-8 (which a protobuf string may not hold) gets U+FFFD in its place.
func logEntries(lines []*agentv1.LogLine) []*tetherv1.LogEntry {
	out := make([]*tetherv1.LogEntry, len(lines))
	for i, l := range lines {
		s := tetherv1.LogEntry_STDOUT
		if l.GetStream() == agentv1.LogLine_STDERR {
			s = tetherv1.LogEntry_STDERR
		}
		out[i] = &tetherv1.LogEntry{Time: l.GetTime(), Stream: s, Text: strings.ToValidUTF8(string(l.GetText()), "\uFFFD"), Partial: l.GetPartial()}
	}
	return out
}
