package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// Demand mode is for capacity planning: one fleet, autoscaled with a
// buffer within MinReplicas and MaxReplicas, takes matches arriving at the
// demand curve's rate (a Poisson process whose rate follows the curve);
// at RolloutAt its template changes, and a rolling update runs under that
// load. Its figures (capacity.go) are read from the stream afterwards:
// allocations refused with NO_READY_GAME_SERVER, the READY servers' idle
// time, the replicas, and the rollout, which must leave every ALLOCATED
// server alone.

// demandFleet is the one fleet of demand mode.
var demandFleet = fleetID(0)

// setDemandDefaults applies demand mode's defaults: one fleet, as long a
// steady phase as the curve, a rollout two thirds in.
func (o *Options) setDemandDefaults() {
	o.Fleets = 1
	if o.Buffer == "" {
		o.Buffer = "3"
	}
	if o.MaxReplicas <= 0 {
		o.MaxReplicas = o.Hosts * o.ServersPerHost
	}
	if o.Duration <= 0 {
		o.Duration = o.Demand.End()
	}
	if o.Duration <= 0 {
		o.Duration = 60 * time.Second
	}
	if o.RolloutAt == 0 {
		o.RolloutAt = o.Duration * 2 / 3
	}
}

// validateDemand checks demand mode's options.
func (o *Options) validateDemand() error {
	if err := o.Demand.validate(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if _, _, err := events.ParseBufferSize(o.Buffer); err != nil {
		return fmt.Errorf("sim: --buffer: %w", err)
	}
	switch {
	case o.MinReplicas < 0 || o.MinReplicas > o.MaxReplicas:
		return fmt.Errorf("sim: min replicas %d must be within 0 and max replicas %d", o.MinReplicas, o.MaxReplicas)
	case o.MaxReplicas > events.MaxReplicas:
		return fmt.Errorf("sim: max replicas %d: at most %d", o.MaxReplicas, events.MaxReplicas)
	case o.RolloutAt >= o.Duration:
		return fmt.Errorf("sim: the rollout at %s must start within the steady phase of %s", o.RolloutAt, o.Duration)
	}
	return nil
}

// demand is a demand-mode run's own state.
type demand struct {
	steadyBegan, steadyEnded time.Time

	mu              sync.Mutex
	rolloutAt       time.Time // when the template change was asked for; zero before
	rolloutErr      error     // why it could not be
	attempts        []attempt // every allocation the matchmaker tried
	rolloutFinished bool      // the fleet's history holds its completion or halt
}

// outcome is how an allocation ended.
type outcome int

const (
	allocOK      outcome = iota + 1 // a server was allocated
	allocNoReady                    // NO_READY_GAME_SERVER
	allocFailed                     // any other error
)

// attempt is one allocation the matchmaker tried.
type attempt struct {
	at     time.Time
	result outcome
}

// note records an allocation's outcome.
func (d *demand) note(at time.Time, r outcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.attempts = append(d.attempts, attempt{at: at, result: r})
}

// snapshot copies what the run recorded.
func (d *demand) snapshot() (rolloutAt time.Time, attempts []attempt, rolloutErr error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rolloutAt, append([]attempt(nil), d.attempts...), d.rolloutErr
}

// initialReplicas is what the autoscaler keeps with nothing allocated:
// the buffer, within the bounds.
func (o *Options) initialReplicas() int {
	buffer, err := events.BufferFor(o.Buffer, 0)
	if err != nil {
		return 0 // refused by validateDemand already
	}
	return min(max(buffer, o.MinReplicas), o.MaxReplicas)
}

// readyTarget is the number of READY servers a settled system has: every
// slot, or in demand mode the fleet's idle size.
func (w *world) readyTarget() int {
	if w.demand != nil {
		return w.opts.initialReplicas()
	}
	return w.opts.Hosts * w.opts.ServersPerHost
}

// fleetTemplate is the simulated game servers' template; env tells
// revisions apart.
func fleetTemplate(env map[string]string) *tetherv1.GameServerTemplate {
	return &tetherv1.GameServerTemplate{Command: "simulated", Env: env,
		Ports: []*tetherv1.PortSpec{{Name: "game", Protocol: tetherv1.PortSpec_UDP}}}
}

// create creates the run's fleets: fleets filling every slot or, in
// demand mode, one autoscaled fleet.
func (w *world) create(ctx context.Context) error {
	o := w.opts
	total := o.Hosts * o.ServersPerHost
	if w.demand == nil {
		if err := w.createFleets(ctx); err != nil {
			return err
		}
		fmt.Fprintf(o.Progress, "fleets created: %d servers in %d fleets on %d hosts; waiting for READY\n", total, o.Fleets, o.Hosts)
		return nil
	}
	f := w.fleetSpec(0)
	f.Template = fleetTemplate(map[string]string{"SIM_REVISION": "1"})
	f.Autoscaling = &tetherv1.FleetAutoscaling{MinReplicas: int32(o.MinReplicas), MaxReplicas: int32(o.MaxReplicas),
		Buffer: &tetherv1.BufferPolicy{BufferSize: o.Buffer}}
	_, err := tetherv1.NewFleetServiceClient(w.conn).CreateFleet(ctx, &tetherv1.CreateFleetRequest{
		FleetId: demandFleet, RequestId: "sim-fleet-" + demandFleet, Fleet: f})
	if err != nil {
		return fmt.Errorf("sim: create fleet %s: %w", demandFleet, err)
	}
	fmt.Fprintf(o.Progress, "fleet %s created: autoscaled, buffer %s, %d to %d replicas, %d slots on %d hosts; waiting for %d READY\n",
		demandFleet, o.Buffer, o.MinReplicas, o.MaxReplicas, total, o.Hosts, w.readyTarget())
	return nil
}

// arrivals calls f at the curve's rate from began until ctx ends: a
// Poisson process at the curve's peak, each arrival kept with probability
// rate/peak (thinning), on an absolute schedule so that slow calls do not
// lower the rate.
func arrivals(ctx context.Context, c Curve, began time.Time, f func()) {
	peak := c.Max()
	if peak <= 0 {
		return
	}
	next := began
	for {
		next = next.Add(time.Duration(rand.ExpFloat64() / peak * float64(time.Second)))
		if !sleepCtx(ctx, time.Until(next)) {
			return
		}
		if rand.Float64()*peak < c.RateAt(next.Sub(began)) {
			f()
		}
	}
}

// rollout says what the steady phase does, then changes the fleet's
// template RolloutAt into it, which starts a rolling update while matches
// run.
func (w *world) rollout(ctx context.Context) {
	o := w.opts
	plan := "no rollout"
	if o.RolloutAt >= 0 {
		plan = fmt.Sprintf("rollout at %s", o.RolloutAt)
	}
	fmt.Fprintf(o.Progress, "steady phase: %s of demand %s matches/s (%.0f matches), %s\n", o.Duration, o.Demand, o.Demand.Matches(0, o.Duration), plan)
	if o.RolloutAt < 0 || !sleepCtx(ctx, time.Until(w.demand.steadyBegan.Add(o.RolloutAt))) {
		return
	}
	fleets := tetherv1.NewFleetServiceClient(w.conn)
	req := &tetherv1.UpdateFleetRequest{
		Fleet:      &tetherv1.Fleet{Name: events.FleetName(demandFleet), Template: fleetTemplate(map[string]string{"SIM_REVISION": "2"})},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"template"}}, RequestId: "sim-rollout-" + demandFleet,
	}
	at := time.Now()
	var err error
	for range 10 { // the controller's FleetAutoscaled may win the fleet's sequence: try again
		if _, err = fleets.UpdateFleet(ctx, req); err == nil || (status.Code(err) != codes.Aborted && status.Code(err) != codes.Unavailable) {
			break
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	if err != nil {
		fmt.Fprintf(o.Progress, "  rollout: the template change was refused: %v\n", err)
	} else {
		fmt.Fprintf(o.Progress, "  rollout: template of %s changed %.1f s into the steady phase\n", demandFleet, at.Sub(w.demand.steadyBegan).Seconds())
	}
	w.demand.mu.Lock()
	defer w.demand.mu.Unlock()
	w.demand.rolloutAt, w.demand.rolloutErr = at, err
}

// rolloutSettled reports whether demand mode's rollout is over: not
// asked for (or refused), or completed or halted in the fleet's history.
func (w *world) rolloutSettled(ctx context.Context) bool {
	d := w.demand
	if d == nil {
		return true
	}
	d.mu.Lock()
	done := d.rolloutAt.IsZero() || d.rolloutErr != nil || d.rolloutFinished
	d.mu.Unlock()
	if done {
		return true
	}
	hist, err := w.stack.Store.History(ctx, events.MustSubject(events.FleetName(demandFleet)), 0)
	if err != nil {
		return false
	}
	for _, e := range hist {
		switch e.Data.(type) {
		case *eventsv1.FleetRolloutCompleted, *eventsv1.FleetRolloutHalted:
			d.mu.Lock()
			d.rolloutFinished = true
			d.mu.Unlock()
			return true
		}
	}
	return false
}
