package compose

import (
	"context"

	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/nats/commands"
)

// AgentOptions configure a host agent.
type AgentOptions struct {
	// Agent holds the agent's own settings (its host, ports, logs, who
	// its game servers run as, player tokens, …). Agent fills in, where
	// left unset, what it is built on: JetStream, Store (the event store
	// on Env.JetStream, which does not wait for an unavailable stream:
	// the agent's outbox keeps its events), Commands, Logger and
	// telemetry.
	Agent agent.Options
	// Configure, if set, adjusts the agent's options last, once the above
	// is filled in (`tether dev`'s port ranges, the simulator's processes).
	Configure func(*agent.Options) error
}

// Agent builds a host agent from o on env.
func Agent(ctx context.Context, env Env, o AgentOptions) (*agent.Agent, error) {
	a := o.Agent
	if a.JetStream == nil {
		a.JetStream = env.JetStream
	}
	if a.Store == nil {
		store, err := env.store(ctx, natsjs.Options{UnavailableWait: -1, MeterProvider: env.MeterProvider})
		if err != nil {
			return nil, err
		}
		a.Store = store
	}
	if a.Commands == nil {
		bus, err := commands.New(ctx, a.JetStream)
		if err != nil {
			return nil, err
		}
		a.Commands = bus
	}
	if a.Logger == nil {
		a.Logger = env.Logger
	}
	if a.TracerProvider == nil {
		a.TracerProvider = env.TracerProvider
	}
	if a.MeterProvider == nil {
		a.MeterProvider = env.MeterProvider
	}
	if o.Configure != nil {
		if err := o.Configure(&a); err != nil {
			return nil, err
		}
	}
	return agent.New(a)
}
