// Package projector runs the projector (projections/postgres) as a highly
// available service: any number of instances, one active at a time, chosen
// by the "projector" lease (services/nats/lease). The active instance folds
// the event stream into the views from the views' checkpoint, fencing every
// batch with its lease epoch; a standby waits, and takes over from the
// checkpoint the moment the lease is released (a clean stop) or expires (a
// crash), so two instances never both write.
package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/nats/lease"
)

// LeaseRole is the projector's key in the lease bucket (lease.Bucket).
const LeaseRole = "projector"

// Options configure the service.
type Options struct {
	// Projector configures each tenure's projector (Pool and JetStream
	// required).
	Projector postgres.ProjectorOptions
	// ID names this instance in the lease; default a random "proj-…" id.
	ID string
	// Logger; default discards.
	Logger *slog.Logger
}

// Service is one projector instance.
type Service struct {
	opts  Options
	log   *slog.Logger
	proj  *postgres.Projector
	lease atomic.Pointer[lease.Lease] // set once Run has opened it
}

// New builds an instance; Run starts it.
func New(opts Options) (*Service, error) {
	if opts.ID == "" {
		opts.ID = events.NewID("proj")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Projector.Logger == nil {
		opts.Projector.Logger = opts.Logger
	}
	proj, err := postgres.NewProjector(opts.Projector)
	if err != nil {
		return nil, err
	}
	return &Service{opts: opts, log: opts.Logger, proj: proj}, nil
}

// ID returns the instance id.
func (s *Service) ID() string { return s.opts.ID }

// Projector returns the projector this instance runs while active.
func (s *Service) Projector() *postgres.Projector { return s.proj }

// IsActive reports whether this instance holds the lease now.
func (s *Service) IsActive() bool {
	l := s.lease.Load()
	if l == nil {
		return false
	}
	held, _ := l.Held()
	return held
}

// Run waits for the lease and projects while it holds it, until ctx ends;
// the lease is released then, so a standby takes over at once. A projector
// fenced out by a newer epoch (it lost the lease without noticing in time)
// goes back to standby.
func (s *Service) Run(ctx context.Context) error {
	l, err := lease.Open(ctx, s.opts.Projector.JetStream, LeaseRole, s.opts.ID, s.log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("projector: %w", err)
	}
	s.lease.Store(l)
	return l.Run(ctx, func(ctx context.Context, epoch uint64) error {
		s.log.Info("projector active", "id", s.opts.ID, "epoch", epoch)
		err := s.proj.RunFenced(ctx, epoch)
		if errors.Is(err, postgres.ErrFenced) {
			s.log.Warn("projector fenced out by a newer one; standing by", "err", err)
			return nil
		}
		return err
	})
}

// Status says in words whether this instance is active or standing by,
// and for a standby who is active.
func (s *Service) Status() string {
	l := s.lease.Load()
	if l == nil {
		return "starting"
	}
	status, _ := l.Status() // Ready reports the error
	return status
}

// Ready reports why this instance cannot be counted on now: before it has
// opened the lease, while the lease cannot be reached, and while it is
// active but its batches fail (PostgreSQL unreachable). A standby that can
// reach the lease is ready.
func (s *Service) Ready() error {
	l := s.lease.Load()
	if l == nil {
		return errors.New("starting: the lease is not open yet")
	}
	status, err := l.Status()
	if err != nil {
		return fmt.Errorf("%s: %w", status, err)
	}
	if held, _ := l.Held(); held {
		return s.proj.Ready()
	}
	return nil
}
