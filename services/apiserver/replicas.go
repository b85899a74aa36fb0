package apiserver

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/services/nats/replicas"
)

// replicasRetry is the pause before joining the replica set again after
// it failed (no bucket yet, NATS unreachable).
const replicasRetry = 5 * time.Second

// joinReplicas keeps this replica in the set of live API replicas while
// ctx lasts, and gives the candidate pool its slice: with two replicas,
// each allocates from half of the READY servers first. Out of the set
// (before it joins, while NATS is away) the pool takes from the whole, as
// a single replica does.
func (s *Server) joinReplicas(ctx context.Context, js jetstream.JetStream) {
	for ctx.Err() == nil {
		m, err := replicas.Join(ctx, js, s.opts.ReplicaID, s.log)
		if err == nil {
			s.candidates.sliceOf(m.Slice)
			err = m.Run(ctx)
			s.candidates.sliceOf(nil)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("api replica set: allocating from every READY server, racing the other replicas, until this replica rejoins", "retry_in", replicasRetry, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(replicasRetry):
		}
	}
}
