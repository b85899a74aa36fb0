package dev

import (
	"context"
	"runtime/pprof"
)

// ComponentLabel is the runtime/pprof label that `tether dev` puts on each
// component's goroutines (and that goroutines they start inherit), so that
// a CPU profile of the one process tells the components apart. Its values
// are the Component names below.
const ComponentLabel = "component"

// The components, as ComponentLabel names them.
const (
	ComponentNATS       = "nats-server"
	ComponentProjector  = "projector"
	ComponentAPI        = "apiserver"
	ComponentController = "controller"
	ComponentAgent      = "agent"
)

// runAs runs a component's Run with its goroutine labelled as component.
func runAs(ctx context.Context, component string, run func(context.Context) error) error {
	var err error
	pprof.Do(ctx, pprof.Labels(ComponentLabel, component), func(ctx context.Context) { err = run(ctx) })
	return err
}
