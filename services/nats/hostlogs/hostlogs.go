// Package hostlogs carries reads of game servers' logs to the host agents
// that keep them: core NATS request/reply on one subject per host,
// tether.logs.host.<host>. Nothing is stored on the way, so a host whose
// agent is away cannot answer, and the reader is told so at once (NATS
// answers "no responders") or at its deadline. The API asks (Client.Read);
// each agent answers for its own host (Serve), one chunk of output per
// request (agentv1.LogsReply), and the reader asks again from the chunk's
// cursor. NATS permissions let an agent subscribe to its own host's
// subject only, and answer the requests it gets (services/nats/natsauth).
package hostlogs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
)

// SubjectPrefix starts every host's logs subject.
const SubjectPrefix = "tether.logs.host."

// Subject returns the logs subject of a host id: "tether.logs.host.h1".
func Subject(host string) string { return SubjectPrefix + host }

// ErrAgentUnavailable is a read that no agent answered: none subscribes
// to the host's subject (the agent is stopped, or cut off from NATS), or
// none answered in time.
var ErrAgentUnavailable = errors.New("the host's agent does not answer")

// AnswerTimeout is how long a reader waits for an answer beyond the wait
// it asked the agent for (agentv1.LogsRequest.wait_millis).
const AnswerTimeout = 5 * time.Second

// MaxWait bounds the wait a request may ask for: the agent answers within
// it, and its NATS permissions let it answer a request for at most
// ReplyWindow.
const MaxWait = 30 * time.Second

// ReplyWindow is how long after a request its agent may still answer it
// (the agents' NATS response permission): MaxWait and the time a read
// takes.
const ReplyWindow = MaxWait + time.Minute

// Client reads logs from host agents.
type Client struct{ nc *nats.Conn }

// NewClient returns a client that asks over nc.
func NewClient(nc *nats.Conn) *Client { return &Client{nc: nc} }

// Wait is how long the agent waits for new lines before it answers req:
// its wait_millis, at most MaxWait. The client's timeout is that plus
// AnswerTimeout, so both ends must read it alike.
func Wait(req *agentv1.LogsRequest) time.Duration {
	return min(time.Duration(max(req.GetWaitMillis(), 0))*time.Millisecond, MaxWait)
}

// Read asks host's agent for one chunk. An agent that does not answer is
// ErrAgentUnavailable, wrapped with why; an answer that is an error
// (reply.Error) is the caller's to judge.
func (c *Client) Read(ctx context.Context, host string, req *agentv1.LogsRequest) (*agentv1.LogsReply, error) {
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("hostlogs: encode request: %w", err)
	}
	timeout := Wait(req) + AnswerTimeout
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := c.nc.RequestWithContext(rctx, Subject(host), data)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err() // the caller's own end, not the agent's silence
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: nothing listens on %s (the agent is stopped, or cut off from NATS)", ErrAgentUnavailable, Subject(host))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w: no answer within %s", ErrAgentUnavailable, timeout)
	default:
		return nil, fmt.Errorf("%w: %w", ErrAgentUnavailable, err)
	}
	reply := &agentv1.LogsReply{}
	if err := proto.Unmarshal(msg.Data, reply); err != nil {
		return nil, fmt.Errorf("hostlogs: decode the answer of host %s: %w", host, err)
	}
	return reply, nil
}

// Handler answers one request; ctx ends when Serve's does.
type Handler func(ctx context.Context, req *agentv1.LogsRequest) *agentv1.LogsReply

// Serve answers the requests on host's subject until ctx ends, each in a
// goroutine of its own (a follow waits in its handler), at most inFlight
// at once: beyond, a request is answered BUSY at once. It then waits for
// the answers in progress, whose ctx has ended.
func Serve(ctx context.Context, nc *nats.Conn, host string, inFlight int, h Handler, log *slog.Logger) error {
	slots := make(chan struct{}, max(inFlight, 1))
	var (
		mu      sync.Mutex
		stopped bool
		wg      sync.WaitGroup // answers in progress
	)
	respond := func(m *nats.Msg, reply *agentv1.LogsReply) {
		data, err := proto.Marshal(reply)
		if err == nil {
			err = m.Respond(data)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("answer to a log read failed", "err", err)
		}
	}
	sub, err := nc.Subscribe(Subject(host), func(m *nats.Msg) {
		if m.Reply == "" {
			return // not a request: nobody to answer
		}
		req := &agentv1.LogsRequest{}
		if err := proto.Unmarshal(m.Data, req); err != nil {
			respond(m, &agentv1.LogsReply{Error: agentv1.LogsReply_BAD_REQUEST, ErrorMessage: "undecodable request: " + err.Error()})
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			respond(m, &agentv1.LogsReply{Error: agentv1.LogsReply_BUSY,
				ErrorMessage: fmt.Sprintf("host %s serves %d log reads at once already; retry", host, cap(slots))})
			return
		}
		mu.Lock()
		if stopped {
			mu.Unlock()
			<-slots
			return
		}
		wg.Add(1)
		mu.Unlock()
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			respond(m, h(ctx, req))
		}()
	})
	if err != nil {
		return fmt.Errorf("hostlogs: subscribe to %s: %w", Subject(host), err)
	}
	<-ctx.Done()
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		log.Warn("stop answering log reads", "err", err)
	}
	mu.Lock()
	stopped = true
	mu.Unlock()
	wg.Wait()
	return nil
}
