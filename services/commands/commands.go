// Package commands carries controller → agent commands (start and stop a
// game server) on the TETHER_COMMANDS work-queue stream, one subject per
// host: tether.cmd.host.<host> (DESIGN.md §4). Each host's agent consumes its
// subject with a durable consumer, so commands wait while an agent is away.
package commands

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
)

// StreamName is the commands stream.
const StreamName = "TETHER_COMMANDS"

// subjectPrefix starts every command subject.
const subjectPrefix = "tether.cmd.host."

// Subject returns the command subject of a host id.
func Subject(host string) string { return subjectPrefix + host }

// Bus publishes and consumes commands.
type Bus struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// New creates or updates the commands stream.
func New(ctx context.Context, js jetstream.JetStream) (*Bus, error) {
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "Tether commands to host agents (work queue, one subject per host)",
		Subjects:    []string{subjectPrefix + "*"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  10 * time.Minute,
		MaxAge:      24 * time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("commands: create stream: %w", err)
	}
	return &Bus{js: js, stream: stream}, nil
}

// Send publishes a command to a host (its id, not its resource name). The
// command id is filled in if empty and used for de-duplication.
func (b *Bus) Send(ctx context.Context, host, sender string, cmd *agentv1.Command) error {
	if err := events.CheckID(host); err != nil {
		return fmt.Errorf("commands: host: %w", err)
	}
	if cmd.Id == "" {
		cmd.Id = events.NewEventID()
	}
	cmd.Sender = sender
	if cmd.IssueTime == nil {
		cmd.IssueTime = timestamppb.Now()
	}
	data, err := proto.Marshal(cmd)
	if err != nil {
		return fmt.Errorf("commands: encode: %w", err)
	}
	msg := &nats.Msg{Subject: Subject(host), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, cmd.Id)
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("commands: send to %s: %w", host, err)
	}
	return nil
}

// Consumer returns the durable consumer of one host's commands.
func (b *Bus) Consumer(ctx context.Context, host string) (jetstream.Consumer, error) {
	c, err := b.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       "agent-" + host,
		FilterSubject: Subject(host),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    10,
		Description:   "Commands of host " + host,
	})
	if err != nil {
		return nil, fmt.Errorf("commands: consumer of %s: %w", host, err)
	}
	return c, nil
}

// Decode parses a command message.
func Decode(data []byte) (*agentv1.Command, error) {
	cmd := &agentv1.Command{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		return nil, fmt.Errorf("commands: decode: %w", err)
	}
	return cmd, nil
}
