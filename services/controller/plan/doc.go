// Package plan is the controller's planner: a pure function from what one
// pass observed (a Snapshot) to what it decides (a Plan of Decisions),
// after the model of Nomad's scheduler/reconciler (a pure Compute() fed
// the cluster's state, returning what to place and stop).
//
// A pass has three steps (docs/architecture.md, "Adding a controller
// step"):
//
//  1. observe (the controller) reads the views, the host heartbeats and
//     what the controller keeps between passes into a Snapshot;
//  2. plan (this package) turns the snapshot into decisions, with no NATS,
//     PostgreSQL, HTTP or clock of its own, so the rules are tested as
//     tables: a snapshot in, decisions out;
//  3. execute (the controller) appends each decision guarded by the
//     sequence it was decided on and sends its command to the host's
//     agent.
//
// A plan assumes its decisions hold. One that the stream refuses (the
// aggregate changed since the views were read) is skipped, and the next
// pass plans again on views that show why. Each rule is a step of its own
// file: hosts.go (liveness verdicts), orphans.go (servers of a restarted
// agent), shutdowns.go (unfinished shutdowns), startbackoff.go (start
// failures), autoscaling.go, rollouts.go, fleets.go (replicas) with
// placement.go, and sessions.go (game-session deadlines). The package
// imports the domain (events), the view types (projections) and the
// generated protos only; purity_test.go keeps it so.
package plan
