package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/nats/commands"
)

// consumeCommands handles the host's commands until ctx ends. A command is
// acknowledged once handled; one that cannot be decoded is terminated so it
// is not redelivered forever.
func (a *Agent) consumeCommands(ctx context.Context, cons jetstream.Consumer) error {
	cc, err := cons.Consume(func(m jetstream.Msg) {
		cmd, err := commands.Decode(m.Data())
		if err != nil {
			a.log.Error("undecodable command dropped", "subject", m.Subject(), "err", err)
			if err := m.Term(); err != nil {
				a.log.Warn("terminate command", "err", err)
			}
			return
		}
		if err := a.handle(ctx, cmd); err != nil {
			a.log.Error("command failed", "command", cmd.GetId(), "err", err)
		}
		if err := m.Ack(); err != nil {
			a.log.Warn("ack command", "command", cmd.GetId(), "err", err)
		}
	}, natsjs.FailoverPull(2*time.Second)...)
	if err != nil {
		return fmt.Errorf("agent: consume commands: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}
