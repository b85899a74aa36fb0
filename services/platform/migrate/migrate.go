// Package migrate brings a deployment's storage to what this version of
// Tether needs: the PostgreSQL schema (the migrations package) and the
// JetStream streams and key-value buckets. `tether migrate` runs it once per
// upgrade, and `tether dev` before it starts anything; the services
// themselves never create or reconfigure storage, and exit telling the
// operator to run `tether migrate` when something is missing.
//
// Every step is idempotent: a stream or bucket already as wanted is not
// written to, and one that differs is updated in place (its replicas
// included, which is how an R1 deployment becomes R3).
package migrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/migrations"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/nats/lease"
	"github.com/tetherhq/tether/services/nats/replicas"
)

// Options say what to set up, and how.
type Options struct {
	// Replicas of every stream and bucket: 1, 3 or 5 (default 1). A NATS
	// cluster of three nodes or more takes 3.
	Replicas int
	// LeaseTTL is how long a silent leader keeps its lease (the lease
	// bucket's TTL); default lease.DefaultTTL.
	LeaseTTL time.Duration
	// EventsStorage is the events stream's storage; default file.
	EventsStorage jetstream.StorageType
	// AttemptTimeout is how long one try of a step may wait for the
	// JetStream API's replies before the step is tried again; default 10 s.
	// A lost reply then costs one try, not the whole migration.
	AttemptTimeout time.Duration
	// Logger; default discards.
	Logger *slog.Logger
}

// Validate reports a bad option.
func (o *Options) Validate() error {
	switch o.Replicas {
	case 0, 1, 3, 5:
	default:
		return fmt.Errorf("migrate: %d stream replicas: want 1, 3 or 5 (an odd count, so a majority survives a node's loss)", o.Replicas)
	}
	if o.LeaseTTL < 0 {
		return fmt.Errorf("migrate: negative lease TTL %s", o.LeaseTTL)
	}
	if o.AttemptTimeout < 0 {
		return fmt.Errorf("migrate: negative attempt timeout %s", o.AttemptTimeout)
	}
	return nil
}

func (o *Options) setDefaults() {
	o.Replicas = max(o.Replicas, 1)
	if o.LeaseTTL == 0 {
		o.LeaseTTL = lease.DefaultTTL
	}
	if o.AttemptTimeout == 0 {
		o.AttemptTimeout = defaultAttemptTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// NATS creates or updates every stream and key-value bucket.
func NATS(ctx context.Context, js jetstream.JetStream, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	opts.setDefaults()
	steps := []struct {
		what string
		run  func(context.Context) error
	}{
		{"stream " + events.StreamName, func(ctx context.Context) error {
			return natsjs.Setup(ctx, js, natsjs.Options{Replicas: opts.Replicas, Storage: opts.EventsStorage, Logger: opts.Logger})
		}},
		{"stream " + commands.StreamName, func(ctx context.Context) error { return commands.Setup(ctx, js, opts.Replicas) }},
		{"bucket " + hostbeat.Bucket, func(ctx context.Context) error { return hostbeat.Setup(ctx, js, opts.Replicas) }},
		{"bucket " + lease.Bucket, func(ctx context.Context) error { return lease.Setup(ctx, js, opts.LeaseTTL, opts.Replicas) }},
		{"bucket " + replicas.Bucket, func(ctx context.Context) error {
			return replicas.Setup(ctx, js, replicas.DefaultTTL, opts.Replicas)
		}},
	}
	for _, s := range steps {
		if err := retryTransient(ctx, opts.Logger, s.what, opts.AttemptTimeout, s.run); err != nil {
			return fmt.Errorf("migrate: %s: %w", s.what, err)
		}
		opts.Logger.InfoContext(ctx, "jetstream storage up to date", "what", s.what, "replicas", opts.Replicas)
	}
	return nil
}

// jsErrNoSuitablePeers is the JetStream API's "no suitable peers for
// placement" (JSClusterNoPeersErrF): a cluster that has just started, or
// just lost a node, does not yet know enough live peers for the replicas.
const jsErrNoSuitablePeers jetstream.ErrorCode = 10005

// noPeersBudget bounds how long a step waits for the cluster's peers.
const noPeersBudget = time.Minute

// jsErrStreamCreate is the JetStream API's stream creation failure
// (JSStreamCreateErrF), e.g. "error creating store for stream".
const jsErrStreamCreate jetstream.ErrorCode = 10049

// createFailedBudget bounds how long a step tries again after
// jsErrStreamCreate: a lasting cause (a full disk, permissions) is
// reported after it.
const createFailedBudget = 5 * time.Second

// defaultAttemptTimeout bounds one try of a step. A JetStream API request whose
// reply is lost (seen in CI while a new three-node cluster settled, with
// both cores busy) would otherwise hold the step until the caller's context
// ends; each try gets its own deadline, and a try that runs out of it is
// made again.
const defaultAttemptTimeout = 10 * time.Second

// noReplyBudget bounds how long a step goes on trying after tries that got
// no reply: a NATS that answers nothing for this long is reported.
const noReplyBudget = time.Minute

// retryTransient runs step, each try bounded by attempt, again while the
// error is one a settling cluster gives:
//   - the cluster lacks the peers for the replicas (for at most
//     noPeersBudget): `tether migrate` run right after the NATS nodes start
//     then waits for them instead of failing;
//   - a try got no reply within attempt, or the request timed out (for at
//     most noReplyBudget);
//   - the server failed to create a stream's storage (for at most
//     createFailedBudget).
//
// The caller's context ending stops it at once.
func retryTransient(ctx context.Context, log *slog.Logger, what string, attempt time.Duration, step func(context.Context) error) error {
	start := time.Now()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		tryCtx, cancel := context.WithTimeout(ctx, attempt)
		err := step(tryCtx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		var apiErr *jetstream.APIError
		switch {
		case isNoReply(err) && time.Since(start) < noReplyBudget:
			log.WarnContext(ctx, "a NATS request got no reply in time; trying again", "what", what, "attempt_timeout", attempt, "err", err)
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrNoSuitablePeers && time.Since(start) < noPeersBudget:
			log.InfoContext(ctx, "waiting for the NATS cluster's peers", "what", what, "err", err)
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrStreamCreate && time.Since(start) < createFailedBudget:
			// Seen once in CI, on a server just restarted over an
			// existing store: the server removed its account's empty
			// directory while the stream's was being made ("mkdir
			// …/$G/streams: no such file or directory"). A second try
			// finds the directories as they are.
			log.WarnContext(ctx, "the NATS server could not create a stream's storage; trying again", "what", what, "err", err)
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// isNoReply reports an error that says a request's reply did not come in
// time: the try's own deadline, or the client's request timeout.
func isNoReply(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// Postgres applies the pending PostgreSQL migrations.
func Postgres(ctx context.Context, databaseURL string, log *slog.Logger) error {
	if databaseURL == "" {
		return errors.New("migrate: no database URL (set --database-url or DATABASE_URL)")
	}
	return migrations.Apply(ctx, databaseURL, log)
}
